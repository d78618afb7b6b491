// The failure board (engine/failure_board.h): which peer an error blames, the blame chain through the
// store (a dead rank, echoes of it, two ranks that lost each other), a broken store, and the transport
// wrapper that appends the explanation once and repeats it for every later re-throw of the same failure.
#include <chrono>
#include <cstdio>
#include <string>

#include "common/error.h"
#include "engine/failure_board.h"
#include "rendezvous/memory_store.h"
#include "tests/check.h"

using phv::testing::expect;

namespace {
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

phv::FailureBoardOptions opts(int rank, int size) {
  phv::FailureBoardOptions o;
  o.prefix = "phv/g0";
  o.rank = rank;
  o.size = size;
  o.wait_s = 0.1;
  return o;
}

class BrokenStore : public phv::Store {
 public:
  void set(const std::string&, const std::string&) override { fail(); }
  std::string get(const std::string&, double) override { fail(); }
  int64_t add(const std::string&, int64_t) override { fail(); }
  void wait(const std::vector<std::string>&, double) override { fail(); }
  bool check(const std::string&) override { fail(); }

 private:
  [[noreturn]] static void fail() { throw phv::HvdError(phv::ErrorKind::PEER_LOST, "store is gone"); }
};

// Throws `error` from every call (as a failed TcpTransport re-throws its first failure).
class FailedTransport : public phv::Transport {
 public:
  explicit FailedTransport(phv::HvdError error) : error_(std::move(error)) {}
  int rank() const override { return 1; }
  int size() const override { return 3; }
  phv::RequestId post_send(int, const void*, size_t) override { throw error_; }
  phv::RequestId post_recv(int, void*, size_t) override { throw error_; }
  void progress(std::vector<phv::RequestId>&, phv::Deadline) override { throw error_; }
  size_t pending() const override { return 1; }
  std::string describe_peer(int peer) const override { return "rank " + std::to_string(peer); }
  phv::HvdError error_;
};

std::string thrown_by(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const phv::HvdError& e) {
    return e.what();
  }
  return "(nothing thrown)";
}
}  // namespace

int main() {
  using phv::blamed_peer;
  expect(blamed_peer("rank 1: connection closed by rank 0 (127.0.0.1:5, shared memory)", 1) == 0, "blames rank 0");
  expect(blamed_peer("rank 0: deadline passed while waiting for receive from rank 12 (x)", 0) == 12, "blames rank 12");
  expect(blamed_peer("rank 3: ranks [1, 2] never submitted it; thisrank 7", 3) == -1, "no peer in 'ranks [..]'");
  expect(blamed_peer("rank 2: poll failed: EINTR", 2) == -1, "no peer at all");

  {  // Rank 2 of 3 was killed: rank 0 saw it go, rank 1 saw only rank 0's echo.
    phv::MemoryStore store;
    std::string e0 = "rank 0: connection closed by rank 2 (127.0.0.1:9) during receive from rank 2";
    std::string x0 = phv::explain_failure(store, opts(0, 3), e0);
    expect(has(x0, "first failure: rank 2 reported no error (it died, is stopped, or lost its network)"),
           "the direct neighbour names the silent rank", x0);
    std::string x1 = phv::explain_failure(store, opts(1, 3), "rank 1: connection closed by rank 0 (127.0.0.1:8)");
    expect(has(x1, "first failure: rank 2 reported no error") && has(x1, "; rank 0 reported: " + e0),
           "the echo names the silent rank and quotes its neighbour", x1);
    expect(store.get("phv/g0/failure/1", 0) == "rank 1: connection closed by rank 0 (127.0.0.1:8)",
           "each rank publishes its own error, unexplained");
  }
  {  // A cut link: ranks 0 and 1 blame each other.
    phv::MemoryStore store;
    store.set("phv/g0/failure/1", "rank 1: deadline passed while waiting for receive from rank 0 (10.0.0.1:5)");
    std::string x0 = phv::explain_failure(store, opts(0, 2), "rank 0: deadline passed while waiting for receive from rank 1");
    expect(has(x0, " [rank 1 lost contact too: rank 1: deadline passed while waiting for receive from rank 0"),
           "two ranks that lost each other quote each other", x0);
  }
  {  // The first failure blames nobody (a protocol error, say).
    phv::MemoryStore store;
    store.set("phv/g0/failure/0", "rank 0: poll failed: out of memory");
    std::string x = phv::explain_failure(store, opts(2, 3), "rank 2: connection closed by rank 0");
    expect(x == " [first failure reported by rank 0: rank 0: poll failed: out of memory]", "a chain's end is quoted", x);
  }
  {
    BrokenStore broken;
    expect(phv::explain_failure(broken, opts(1, 3), "rank 1: connection closed by rank 0").empty(),
           "a store that fails adds nothing (and does not throw)");
    phv::MemoryStore store;
    expect(phv::explain_failure(store, opts(1, 3), "rank 1: poll failed").empty(), "no blamed peer: nothing to add");
  }
  {
    int calls = 0;
    FailedTransport inner(phv::HvdError(phv::ErrorKind::PEER_LOST, "rank 1: connection closed by rank 0"));
    phv::ExplainingTransport t(inner, [&](const std::string& e) { ++calls; return " [because " + e.substr(0, 6) + "]"; });
    std::vector<phv::RequestId> done;
    std::string a = thrown_by([&] { t.progress(done, phv::Clock::now()); });
    std::string b = thrown_by([&] { t.post_send(0, nullptr, 0); });
    expect(a == "rank 1: connection closed by rank 0 [because rank 1]" && a == b && calls == 1,
           "explained once, repeated for later re-throws", a + " | " + b);
    inner.error_ = phv::HvdError(phv::ErrorKind::SHUTDOWN, "rank 1: transport closed");
    std::string c = thrown_by([&] { t.post_recv(0, nullptr, 0); });
    expect(c == "rank 1: transport closed" && calls == 1, "SHUTDOWN passes through unexplained", c);
  }
  return phv::testing::finish("failure_board_test");
}
