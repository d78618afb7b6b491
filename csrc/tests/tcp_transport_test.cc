// TcpTransport between threads of one process over loopback: all-to-all traffic in both directions at
// once (including 64 MiB and zero-length messages), messages to self, strangers with a wrong secret or
// garbage refused while the job's mesh still forms, bad magic / oversized length rejected (nothing is
// allocated from a length), a closing peer -> PEER_LOST naming it, a deadline -> TIMEOUT; zero-copy
// receives (RecvSink) through a small shared-memory ring; a short message to a receive that sleeps
// with SO_RCVLOWAT set still fails at once.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <chrono>
#include <thread>

#include "common/error.h"
#include "rendezvous/handshake.h"
#include "rendezvous/memory_store.h"
#include "rendezvous/socket.h"
#include "tests/check.h"
#include "tests/mesh_harness.h"
#include "transport/tcp_transport.h"

using namespace phv;
using namespace phv::testing;

namespace {
const std::string kSecret = "job-secret";
bool g_shm = false;  // the same tests run over sockets and over shared-memory rings

MeshOptions mesh_options(int rank, int size, const std::string& prefix) {
  return phv::testing::mesh_options(rank, size, prefix, g_shm, kSecret);
}

std::vector<std::unique_ptr<TcpTransport>> make_mesh(Store& store, int n, const std::string& prefix) {
  return phv::testing::make_mesh(store, n, [&](int r) { return mesh_options(r, n, prefix); });
}

uint8_t pattern(int from, int to, int msg, size_t i) {
  return uint8_t(from * 31 + to * 7 + msg * 13 + i * 2654435761u);
}

// Every rank sends `sizes` messages to every other rank (and itself) while receiving the same from
// everyone; all posted up front, so sends and receives must progress together.
void all_to_all(std::vector<std::unique_ptr<TcpTransport>>& mesh, const std::vector<size_t>& sizes) {
  int n = static_cast<int>(mesh.size());
  std::vector<std::thread> threads;
  std::vector<int> bad(n, 0);
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      TcpTransport& t = *mesh[r];
      std::vector<std::vector<uint8_t>> sendbufs, recvbufs;
      std::vector<RequestId> ids;
      for (int p = 0; p < n; ++p)
        for (size_t m = 0; m < sizes.size(); ++m) {
          std::vector<uint8_t> s(sizes[m]);
          for (size_t i = 0; i < s.size(); ++i) s[i] = pattern(r, p, int(m), i);
          sendbufs.push_back(std::move(s));
          recvbufs.emplace_back(sizes[m], 0xEE);
        }
      size_t k = 0;
      for (int p = 0; p < n; ++p)
        for (size_t m = 0; m < sizes.size(); ++m, ++k) {
          ids.push_back(t.post_recv(p, recvbufs[k].data(), sizes[m]));
          ids.push_back(t.post_send(p, sendbufs[k].data(), sizes[m]));
        }
      t.wait_all(ids, deadline_after(60));
      CHECK(t.pending() == 0);
      k = 0;
      for (int p = 0; p < n; ++p)
        for (size_t m = 0; m < sizes.size(); ++m, ++k)
          for (size_t i = 0; i < sizes[m]; ++i)
            if (recvbufs[k][i] != pattern(p, r, int(m), i)) {
              ++bad[r];
              break;
            }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) CHECK(bad[r] == 0);
}

void test_traffic() {
  MemoryStore store;
  auto mesh = make_mesh(store, 4, "traffic");
  for (int p = 1; p < 4; ++p) CHECK(mesh[0]->uses_shm(p) == g_shm);
  std::vector<size_t> sizes = {0, 1, 7, 4096, 0, 65537, 1 << 20, 3, 0};
  all_to_all(mesh, sizes);
  all_to_all(mesh, sizes);  // sequence numbers continue correctly across rounds
  std::printf("ok   4-rank all-to-all, %zu messages per pair, twice\n", sizes.size());
  auto big = make_mesh(store, 2, "big");
  all_to_all(big, {64u << 20, 0});
  std::printf("ok   2 ranks, 64 MiB + 0 bytes in both directions at once (and to self)\n");
}

// Zero-copy receives over shared memory (Transport::RecvSink): a small ring (64 KiB) so that messages
// wrap around it and arrive in several pieces; sink and plain receives interleaved on one link; both
// directions at once. Each piece must continue where the previous one ended, be a multiple of the grain
// (but the last), and hold the right bytes. Without shared memory the call is refused.
struct CheckingSink : RecvSink {
  size_t len = 0, grain = 1, next = 0, pieces = 0;
  int from = 0, to = 0, msg = 0;
  bool ok = true;
  void consume(const void* data, size_t offset, size_t n) override {
    ok = ok && offset == next && (n % grain == 0 || offset + n == len) && n > 0;
    const uint8_t* d = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n && ok; ++i) ok = d[i] == pattern(from, to, msg, offset + i);
    next = offset + n;
    ++pieces;
  }
};

void test_sink_receives() {
  MemoryStore store;
  const int n = 2;
  auto mesh = phv::testing::make_mesh(store, n, [&](int r) {
    MeshOptions o = mesh_options(r, n, "sink");
    o.shm_ring_bytes = 64 << 10;
    return o;
  });
  if (!g_shm) {
    CHECK(!mesh[0]->recv_in_place(1));
    CheckingSink sink;
    expect_error("zero-copy receive over TCP refused", ErrorKind::INTERNAL, {"not supported"},
                 [&] { mesh[0]->post_recv_sink(1, 8, 4, &sink); });
    return;
  }
  CHECK(mesh[0]->recv_in_place(1) && mesh[1]->recv_in_place(0) && !mesh[0]->recv_in_place(0));
  const std::vector<size_t> sizes = {4, 0, 12, (64 << 10) + 20, 200000, (1 << 20) + 8, 96, 3 << 20, 8};
  std::vector<int> bad(n, 0), multi(n, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      TcpTransport& t = *mesh[r];
      const int peer = 1 - r;
      std::vector<std::vector<uint8_t>> sendbufs, recvbufs(sizes.size());
      std::vector<CheckingSink> sinks(sizes.size());
      std::vector<RequestId> ids;
      for (size_t m = 0; m < sizes.size(); ++m) {
        std::vector<uint8_t> b(sizes[m]);
        for (size_t i = 0; i < b.size(); ++i) b[i] = pattern(r, peer, int(m), i);
        sendbufs.push_back(std::move(b));
      }
      for (size_t m = 0; m < sizes.size(); ++m) {
        if (m % 3 == 2) {  // every third one a plain receive, so both kinds share the ring
          recvbufs[m].assign(sizes[m], 0xEE);
          ids.push_back(t.post_recv(peer, recvbufs[m].data(), sizes[m]));
        } else {
          CheckingSink& k = sinks[m];
          k.len = sizes[m];
          k.grain = m % 2 ? 8 : 4;
          k.from = peer;
          k.to = r;
          k.msg = int(m);
          ids.push_back(t.post_recv_sink(peer, sizes[m], k.grain, &k));
        }
        ids.push_back(t.post_send(peer, sendbufs[m].data(), sizes[m]));
      }
      t.wait_all(ids, deadline_after(60));
      for (size_t m = 0; m < sizes.size(); ++m) {
        if (m % 3 == 2) {
          for (size_t i = 0; i < sizes[m]; ++i)
            if (recvbufs[m][i] != pattern(peer, r, int(m), i)) {
              ++bad[r];
              break;
            }
        } else {
          const CheckingSink& k = sinks[m];
          if (!k.ok || k.next != sizes[m]) ++bad[r];
          if (k.pieces > 1) ++multi[r];
        }
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) CHECK(bad[r] == 0 && multi[r] > 0);
  std::printf("ok   zero-copy receives through a 64 KiB ring, both directions, %zu messages each\n", sizes.size());
}

void test_strangers() {
  MemoryStore store;
  std::unique_ptr<TcpTransport> rank1;
  std::thread t1([&] { rank1 = std::make_unique<TcpTransport>(store, mesh_options(1, 2, "strangers")); });
  std::string addr = store.get("strangers/tcp/addr/1", 10), host;
  int port = 0;
  CHECK(split_host_port(addr, &host, &port));
  // 1: the wrong secret. 2: garbage instead of a hello. 3: a hello claiming a huge version. 4: silence then close.
  expect_error("wrong secret refused", ErrorKind::INTERNAL, {"rank 1"}, [&] {
    Fd fd = connect_tcp(host, port, deadline_after(5));
    connect_handshake(fd.get(), "not-the-secret", "strangers", {HandshakeRole::TRANSPORT, 0}, HandshakeRole::TRANSPORT,
                      1, deadline_after(5), "rank 1");
  });
  {
    Fd fd = connect_tcp(host, port, deadline_after(5));
    std::string junk(4096, '\x5a');
    send_all(fd.get(), junk.data(), junk.size(), deadline_after(5), "rank 1");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  {
    Fd fd = connect_tcp(host, port, deadline_after(5));
    uint8_t hello[64] = {0x48, 0x56, 0x48, 0x50, 0xff, 0xff, 3, 0};  // magic, version 65535
    send_all(fd.get(), hello, sizeof(hello), deadline_after(5), "rank 1");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  {
    Fd fd = connect_tcp(host, port, deadline_after(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // The real rank 0 arrives after the strangers; the job proceeds.
  std::unique_ptr<TcpTransport> rank0 = std::make_unique<TcpTransport>(store, mesh_options(0, 2, "strangers"));
  t1.join();
  CHECK(rank1->rejected_connections() >= 3);
  std::printf("ok   rank 1 refused %zu stranger(s) and then connected to rank 0\n", rank1->rejected_connections());
  std::vector<std::unique_ptr<TcpTransport>> mesh;
  mesh.push_back(std::move(rank0));
  mesh.push_back(std::move(rank1));
  all_to_all(mesh, {5, 0, 100000});
}

// A fake rank 0 that knows the secret but then sends a corrupt header.
void test_bad_frames() {
  for (int variant = 0; variant < 4; ++variant) {
    MemoryStore store;
    std::string prefix = "bad" + std::to_string(variant);
    std::unique_ptr<TcpTransport> rank1;
    std::thread t1([&] { rank1 = std::make_unique<TcpTransport>(store, mesh_options(1, 2, prefix)); });
    store.set(prefix + "/tcp/addr/0", "");
    std::string addr = store.get(prefix + "/tcp/addr/1", 10), host;
    int port = 0;
    split_host_port(addr, &host, &port);
    Fd fd = connect_tcp(host, port, deadline_after(5));
    connect_handshake(fd.get(), kSecret, prefix, {HandshakeRole::TRANSPORT, 0}, HandshakeRole::TRANSPORT, 1,
                      deadline_after(5), "rank 1");
    // The shared-memory negotiation that follows every connection: {enabled, host hash}; we decline.
    uint8_t shm_offer[33] = {0}, theirs[33];
    send_all(fd.get(), shm_offer, sizeof(shm_offer), deadline_after(5), "rank 1");
    recv_all(fd.get(), theirs, sizeof(theirs), deadline_after(5), "rank 1");
    t1.join();
    uint8_t h[16] = {0x50, 0x48, 0x56, 0x4d, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0};  // "PHVM", seq 0, len 8
    const char* what = "";
    std::string needle;
    if (variant == 0) {
      h[0] = 0;
      what = "bad magic rejected";
      needle = "bad message magic";
    }
    if (variant == 1) {
      h[15] = 0x10;
      what = "oversized length rejected before allocation";
      needle = "1152921504606846984 bytes";
    }
    if (variant == 2) {
      h[4] = 5;
      what = "wrong sequence rejected";
      needle = "message #5";
    }
    // A message shorter than the receive that sleeps for it: SO_RCVLOWAT must still wake the receiver
    // for the header, so this fails at once with a protocol error, not at the deadline.
    if (variant == 3) {
      what = "short message to a sleeping 1 MiB receive rejected";
      needle = "expects 1048576";
    }
    std::vector<uint64_t> buf(variant == 3 ? (1 << 20) / 8 : 1, 0);
    std::thread late;
    if (variant == 3) {
      rank1->post_recv(0, buf.data(), buf.size() * 8);
      late = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        send_all(fd.get(), h, sizeof(h), deadline_after(5), "rank 1");
      });
    } else {
      send_all(fd.get(), h, sizeof(h), deadline_after(5), "rank 1");
      rank1->post_recv(0, buf.data(), 8);
    }
    std::vector<RequestId> done;
    Clock::time_point t0 = Clock::now();
    expect_error(what, ErrorKind::INTERNAL, {"rank 1:", "rank 0 (", needle},
                 [&] { rank1->progress(done, deadline_after(5)); });
    CHECK(Clock::now() - t0 < std::chrono::seconds(2));
    if (late.joinable()) late.join();
    CHECK(rank1->pending() == 0);
    // Every later call reports the first failure.
    expect_error("later calls repeat the first error", ErrorKind::INTERNAL, {needle},
                 [&] { rank1->post_send(0, buf.data(), 8); });
    CHECK(thrown_peer([&] { rank1->post_send(0, buf.data(), 8); }) == 0);  // the protocol error is about rank 0
  }
}

void test_peer_lost_and_timeout() {
  MemoryStore store;
  auto mesh = make_mesh(store, 3, "lost");
  char buf[64];
  std::vector<RequestId> done;
  // Deadline: rank 1 waits for rank 2, which sends nothing.
  mesh[1]->post_recv(2, buf, sizeof(buf));
  auto t0 = Clock::now();
  expect_error("deadline -> TIMEOUT naming the peer", ErrorKind::TIMEOUT, {"rank 1:", "rank 2 (127.0.0.1:", "64 bytes"},
               [&] { mesh[1]->progress(done, deadline_after(0.3)); });
  double took = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(took >= 0.28 && took < 2);
  CHECK(thrown_peer([&] { mesh[1]->post_send(0, buf, 1); }) == 2);  // the error carries the peer it waited for
  // Rank 1's failure closed its connections: rank 0, waiting on rank 1, learns at once.
  mesh[0]->post_recv(1, buf, sizeof(buf));
  t0 = Clock::now();
  expect_error("peer closed -> PEER_LOST naming it", ErrorKind::PEER_LOST, {"rank 0:", "rank 1 (127.0.0.1:"},
               [&] { mesh[0]->progress(done, deadline_after(10)); });
  CHECK(std::chrono::duration<double>(Clock::now() - t0).count() < 1);
  CHECK(thrown_peer([&] { mesh[0]->post_send(2, buf, 1); }) == 1);
  // A large send to a peer that is closed: the send fails too, it does not block.
  std::vector<char> big(32 << 20);
  mesh[2]->post_send(1, big.data(), big.size());
  expect_error("send to a closed peer -> PEER_LOST", ErrorKind::PEER_LOST, {"rank 2:", "rank 1 ("}, [&] {
    mesh[2]->wait_all({}, deadline_after(10));
    mesh[2]->progress(done, deadline_after(10));
  });
  CHECK(thrown_peer([&] { mesh[2]->post_send(0, buf, 1); }) == 1);
}

// A peer that finishes and closes right after its last send: the receiver still gets that message
// (for shared memory it may still sit in the ring), and only a further receive fails.
void test_send_then_close() {
  MemoryStore store;
  auto mesh = make_mesh(store, 2, "close");
  std::string msg(3000, 'm'), got(3000, '?');
  mesh[0]->wait_all({mesh[0]->post_send(1, msg.data(), msg.size())}, deadline_after(5));
  mesh[0]->close();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  mesh[1]->wait_all({mesh[1]->post_recv(0, &got[0], got.size())}, deadline_after(5));
  CHECK(got == msg);
  char more[8];
  std::vector<RequestId> done;
  mesh[1]->post_recv(0, more, sizeof(more));
  expect_error("message sent before the peer closed arrives; the next one -> PEER_LOST", ErrorKind::PEER_LOST,
               {"rank 0 ("}, [&] { mesh[1]->progress(done, deadline_after(5)); });
}

void test_self_and_single() {
  MemoryStore store;
  auto mesh = make_mesh(store, 1, "single");
  std::string a = "hello", b(5, '?');
  std::vector<RequestId> done;
  RequestId r = mesh[0]->post_recv(0, &b[0], 5);
  RequestId s = mesh[0]->post_send(0, a.data(), 5);
  mesh[0]->wait_all({r, s}, deadline_after(1));
  CHECK(b == "hello");
  CHECK(mesh[0]->pending() == 0);
  expect_error("peer out of range", ErrorKind::INVALID_ARGUMENT, {"rank 3"},
               [&] { mesh[0]->post_send(3, a.data(), 1); });
  std::printf("ok   messages to self\n");
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  alarm(120);  // hard limit: a hang is a failure
  for (int shm = 0; shm < 2; ++shm) {
    g_shm = shm != 0;
    std::printf("===== %s\n", g_shm ? "shared memory between local peers" : "TCP only");
    test_self_and_single();
    test_traffic();
    test_sink_receives();
    test_peer_lost_and_timeout();
    test_send_then_close();
  }
  g_shm = false;  // the fake peers below speak only the TCP handshake
  test_strangers();
  test_bad_frames();
  return finish("tcp_transport_test");
}
