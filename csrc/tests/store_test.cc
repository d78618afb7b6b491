// TcpStoreServer / TcpStoreClient and MemoryStore over loopback, threads in one process:
// semantics (set/get/add/wait/check), server-side blocking get/wait, timeouts naming the keys,
// a wrong secret refused, and garbage/strangers closed without affecting the other clients.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "common/error.h"
#include "rendezvous/memory_store.h"
#include "rendezvous/socket.h"
#include "rendezvous/tcp_store.h"
#include "tests/check.h"

using namespace phv;
using namespace phv::testing;

namespace {
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// `other` sets keys from another thread (a TcpStoreClient serialises calls on its one connection).
void semantics(Store& s, Store& other, const char* name) {
  std::printf("-- %s\n", name);
  CHECK(!s.check("a"));
  s.set("a", std::string("x\0y", 3));
  CHECK(s.check("a"));
  CHECK(s.get("a", 1) == std::string("x\0y", 3));
  s.set("a", "");  // overwrite with an empty value
  CHECK(s.get("a", 1).empty());
  CHECK(s.add("n", 5) == 5);
  CHECK(s.add("n", -7) == -2);
  CHECK(s.get("n", 1) == "-2");
  // get blocks until another thread sets the key.
  auto t0 = Clock::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    other.set("late", "v");
  });
  CHECK(s.get("late", 5) == "v");
  double waited = seconds_since(t0);
  CHECK(waited >= 0.15 && waited < 3);
  setter.join();
  std::thread setter2([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    other.set("w1", "1");
    other.set("w2", "2");
  });
  s.wait({"w1", "w2", "a"}, 5);
  setter2.join();
  t0 = Clock::now();
  expect_error("get times out naming the key", ErrorKind::TIMEOUT, {"missing_key"}, [&] { s.get("missing_key", 0.3); });
  double took = seconds_since(t0);
  CHECK(took >= 0.25 && took < 3);
  expect_error("wait times out naming the missing keys", ErrorKind::TIMEOUT, {"'k2'"},
               [&] { s.wait({"a", "k2"}, 0.2); });
  std::string big(5 << 20, 'z');
  big[12345] = 'q';
  s.set("big", big);
  CHECK(s.get("big", 1) == big);
}
}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  alarm(60);  // hard limit: a hang is a failure
  MemoryStore mem;
  semantics(mem, mem, "memory store");

  StoreLimits limits;
  limits.max_value_bytes = 6 << 20;  // semantics() stores 5 MiB
  TcpStoreServer server("127.0.0.1", 0, "s3cret", limits);
  CHECK(server.port() > 0);
  {
    TcpStoreClient client("127.0.0.1", server.port(), "s3cret", 5);
    TcpStoreClient client2("127.0.0.1", server.port(), "s3cret", 5);
    semantics(client, client2, "tcp store");
    CHECK(client.get("a", 1).empty());
    // Over the value limit: refused with the limit's name, and the connection stays usable.
    expect_error("value over the limit", ErrorKind::INVALID_ARGUMENT, {"PYHOROVOD_STORE_MAX_VALUE_BYTES", "6291456"},
                 [&] { client.set("huge", std::string(7 << 20, 'h')); });
    CHECK(!client.check("huge") && client.get("big", 1).size() == (5u << 20));

    // Many clients adding concurrently: every increment is counted exactly once.
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
      threads.emplace_back([&] {
        TcpStoreClient c("127.0.0.1", server.port(), "s3cret", 5);
        for (int i = 0; i < 50; ++i) c.add("counter", 1);
      });
    for (auto& t : threads) t.join();
    CHECK(client.get("counter", 1) == "400");

    size_t rejected_before = server.rejected_connections();
    expect_error("wrong secret refused", ErrorKind::INTERNAL, {"127.0.0.1:" + std::to_string(server.port())},
                 [&] { TcpStoreClient bad("127.0.0.1", server.port(), "wrong", 2); });
    // Strangers: garbage after connecting, a half handshake, an oversized claimed length.
    for (int variant = 0; variant < 3; ++variant) {
      Fd fd = connect_tcp("127.0.0.1", server.port(), deadline_after(2));
      char hello[32];
      recv_all(fd.get(), hello, sizeof(hello), deadline_after(2), "server");
      std::string junk = variant == 0   ? std::string(64, '\xff')
                         : variant == 1 ? std::string(10, 'a')
                                        : std::string(200000, '\x7f');
      try {
        send_all(fd.get(), junk.data(), junk.size(), deadline_after(2), "server");
      } catch (const HvdError&) {
      }
      if (variant == 1) ::shutdown(fd.get(), SHUT_WR);
    }
    // A bounded fuzz loop: random lengths of random bytes, sometimes a valid-looking magic first.
    std::mt19937 rng(12345);
    for (int i = 0; i < 100; ++i) {
      Fd fd = connect_tcp("127.0.0.1", server.port(), deadline_after(2));
      std::string junk(rng() % 300, '\0');
      for (auto& ch : junk) ch = static_cast<char>(rng());
      if (i % 3 == 0 && junk.size() >= 4) std::memcpy(&junk[0], "HVHP", 4);
      try {
        send_all(fd.get(), junk.data(), junk.size(), deadline_after(2), "server");
      } catch (const HvdError&) {
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(server.rejected_connections() >= rejected_before + 2);
    // The job's client still works.
    client.set("after", "ok");
    CHECK(client.get("after", 1) == "ok");
    std::printf("rejected connections: %zu\n", server.rejected_connections());
  }
  // A client whose server is gone: errors name host:port, never hang.
  int port = server.port();
  TcpStoreClient orphan("127.0.0.1", port, "s3cret", 2);
  server.close();
  expect_error("server gone", ErrorKind::PEER_LOST, {"127.0.0.1:" + std::to_string(port)}, [&] { orphan.get("x", 1); });
  auto t0 = Clock::now();
  expect_error("no server: connect retries until the timeout", ErrorKind::TIMEOUT,
               {"127.0.0.1:" + std::to_string(port)}, [&] { TcpStoreClient none("127.0.0.1", port, "s3cret", 0.5); });
  CHECK(seconds_since(t0) < 3);
  return finish("store_test");
}
