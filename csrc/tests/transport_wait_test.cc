// How TcpTransport waits, over sockets and over shared-memory rings: an interrupt check of the waiting
// thread (common/interrupt.h) is asked at least every slice while progress() sleeps, and when it says
// stop the wait fails with INTERRUPTED at once, closing the connections (the peer then fails with
// PEER_LOST) and naming no other rank; a check that says go on leaves the wait to its deadline. A
// TransferWatch (transfer_watch.h) on the thread warns after warn_s without a byte moving and fails with
// TIMEOUT after fail_s; bytes that keep moving never trip it. The socket helpers (store and set-up waits)
// listen to the check too.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>

#include "common/error.h"
#include "common/interrupt.h"
#include "rendezvous/memory_store.h"
#include "rendezvous/socket.h"
#include "tests/check.h"
#include "tests/mesh_harness.h"
#include "transport/tcp_transport.h"
#include "transport/transfer_watch.h"

using namespace phv;
using namespace phv::testing;

namespace {

bool g_shm = false;

std::vector<std::unique_ptr<TcpTransport>> make_mesh(Store& store, int n, const std::string& prefix) {
  return phv::testing::make_mesh(store, n, [&](int r) { return mesh_options(r, n, prefix, g_shm, "s"); });
}

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// An interrupt check that counts its calls and says stop once `stop_after` has passed.
struct Alarm {
  Clock::time_point stop_at;
  int calls = 0;
  static bool check(void* self) {
    auto* a = static_cast<Alarm*>(self);
    ++a->calls;
    return Clock::now() >= a->stop_at;
  }
};

void test_interrupt() {
  MemoryStore store;
  auto mesh = make_mesh(store, 2, g_shm ? "int-shm" : "int-tcp");
  char buf[64];
  std::vector<RequestId> done;
  {  // A check that never says stop: the wait runs to its deadline, asking the check every slice.
    Alarm never{Clock::now() + std::chrono::hours(1)};
    InterruptScope scope(&Alarm::check, &never);
    mesh[0]->post_recv(1, buf, sizeof(buf));
    std::atomic<bool> sent{false};
    std::thread late([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
      mesh[1]->wait_all({mesh[1]->post_send(0, buf, sizeof(buf))}, deadline_after(5));
      sent = true;
    });
    Clock::time_point t0 = Clock::now();
    while (mesh[0]->pending() > 0) mesh[0]->progress(done, deadline_after(5));
    late.join();
    double took = since(t0);
    expect(sent && took >= 0.6 && never.calls >= 5, "a check that says go on: asked " + std::to_string(never.calls) +
                                                        " times in " + std::to_string(took) + " s, the wait completes");
  }
  // A check that says stop after 0.3 s: INTERRUPTED within a slice, naming no other rank.
  Alarm alarm{Clock::now() + std::chrono::milliseconds(300)};
  mesh[0]->post_recv(1, buf, sizeof(buf));
  Clock::time_point t0 = Clock::now();
  {
    InterruptScope scope(&Alarm::check, &alarm);
    try {
      mesh[0]->progress(done, deadline_after(10));
      expect(false, "interrupted wait", "no error");
    } catch (const HvdError& e) {
      std::string what = e.what();
      expect(e.kind() == ErrorKind::INTERRUPTED && what.find("rank 1") == std::string::npos,
             "interrupt -> INTERRUPTED, no other rank named: " + what);
    }
  }
  double took = since(t0);
  expect(took >= 0.28 && took < 0.6, "interrupted " + std::to_string(took) + " s after the wait began (stop at 0.3 s)");
  // The interrupted side closed its connections: the peer learns at once.
  mesh[1]->post_recv(0, buf, sizeof(buf));
  t0 = Clock::now();
  expect_error("the peer of an interrupted rank -> PEER_LOST", ErrorKind::PEER_LOST, {"rank 0 ("},
               [&] { mesh[1]->progress(done, deadline_after(10)); });
  CHECK(thrown_peer([&] { mesh[0]->post_send(1, buf, 1); }) == kNoPeer);  // an interrupt blames nobody
  CHECK(thrown_peer([&] { mesh[1]->post_send(0, buf, 1); }) == 0);
  CHECK(since(t0) < 1);
}

int g_described = 0;
std::string describe(const void*) {
  ++g_described;
  return "allreduce 'w' (op #1 in process set 0)";
}

void test_watch() {
  MemoryStore store;
  auto mesh = make_mesh(store, 2, g_shm ? "watch-shm" : "watch-tcp");
  std::vector<RequestId> done;
  char buf[64];
  {  // Warnings only: the wait still ends at its deadline.
    TransferWatch warn{0.15, 0, &describe, nullptr};
    TransferWatchScope scope(&warn);
    g_described = 0;
    mesh[0]->post_recv(1, buf, sizeof(buf));
    expect_error("warn_s only: the deadline still decides", ErrorKind::TIMEOUT, {"deadline passed", "rank 1 ("},
                 [&] { mesh[0]->progress(done, deadline_after(0.5)); });
    expect(g_described >= 2, "warned " + std::to_string(g_described) + " times in 0.5 s (every 0.15 s)");
  }
  mesh = make_mesh(store, 2, g_shm ? "watch2-shm" : "watch2-tcp");
  {  // Bytes that keep moving (a slow sender) never trip fail_s; a silent peer does.
    TransferWatch limit{0, 0.3, &describe, nullptr};
    TransferWatchScope scope(&limit);
    const size_t kBytes = g_shm ? (8u << 20) : (32u << 20);
    std::vector<char> big(kBytes), got(kBytes);
    for (size_t i = 0; i < kBytes; ++i) big[i] = static_cast<char>(i * 2654435761u >> 24);
    std::thread slow([&] {
      size_t piece = kBytes / 8;
      for (int i = 0; i < 8; ++i) {  // 8 messages, 0.1 s apart: 0.8 s in all, never 0.3 s silent
        mesh[1]->wait_all({mesh[1]->post_send(0, big.data() + i * piece, piece)}, deadline_after(5));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    size_t piece = kBytes / 8;
    for (int i = 0; i < 8; ++i)
      mesh[0]->wait_all({mesh[0]->post_recv(1, got.data() + i * piece, piece)}, deadline_after(5));
    slow.join();
    expect(got == big, "a sender that pauses 0.1 s between messages passes fail_s = 0.3 s, data intact");
    mesh[0]->post_recv(1, buf, sizeof(buf));
    Clock::time_point t0 = Clock::now();
    expect_error("fail_s -> TIMEOUT naming the limit and the peer", ErrorKind::TIMEOUT,
                 {"no byte moved for", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "rank 1 ("},
                 [&] { mesh[0]->progress(done, deadline_after(10)); });
    CHECK(thrown_peer([&] { mesh[0]->post_send(1, buf, 1); }) == 1);  // a stall blames the silent peer
    double took = since(t0);
    expect(took >= 0.28 && took < 0.8, "failed " + std::to_string(took) + " s after the last byte (fail_s 0.3)");
  }
}

void test_socket_wait() {
  Fd listener = listen_tcp("127.0.0.1", 0);
  Fd fd = connect_tcp("127.0.0.1", local_port(listener.get()), deadline_after(5));
  Alarm alarm{Clock::now() + std::chrono::milliseconds(200)};
  InterruptScope scope(&Alarm::check, &alarm);
  char b[4];
  Clock::time_point t0 = Clock::now();
  expect_error("a socket wait (store, set-up) -> INTERRUPTED", ErrorKind::INTERRUPTED,
               [&] { recv_all(fd.get(), b, sizeof(b), deadline_after(10), "nobody"); });
  CHECK(since(t0) < 0.5);
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  alarm(120);  // hard limit: a hang is a failure
  for (int shm = 0; shm < 2; ++shm) {
    g_shm = shm != 0;
    std::printf("===== %s\n", g_shm ? "shared memory" : "TCP only");
    test_interrupt();
    test_watch();
  }
  test_socket_wait();
  return finish("transport_wait_test");
}
