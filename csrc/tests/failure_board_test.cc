// The failure board (engine/failure_board.h): the reports it publishes, the blame chain through the store
// (a dead rank, echoes of it, two ranks that lost each other) and a broken store.
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

// A transport error about `peer`, as TcpTransport throws it.
phv::HvdError lost(const std::string& text, int peer) { return phv::HvdError(phv::ErrorKind::PEER_LOST, text, peer); }

void publish(phv::Store& store, int rank, int blamed, const std::string& text) {
  store.set("phv/g0/failure/" + std::to_string(rank), phv::encode_failure_report({blamed, text}));
}
}  // namespace

int main() {
  {  // A report keeps its text exactly and its blamed peer; a value of another form blames nobody.
    phv::FailureReport r = phv::decode_failure_report(phv::encode_failure_report({12, "rank 0: a\nb"}));
    expect(r.blamed == 12 && r.text == "rank 0: a\nb", "a report survives the store", r.text);
    r = phv::decode_failure_report(phv::encode_failure_report({phv::kNoPeer, "rank 2: poll failed"}));
    expect(r.blamed == phv::kNoPeer && r.text == "rank 2: poll failed", "a report that blames nobody", r.text);
    for (const char* odd : {"rank 3: connection closed by rank 1", "", "7", "x\nrank 1", "99999999999\nrank 1"}) {
      r = phv::decode_failure_report(odd);
      expect(r.blamed == phv::kNoPeer && r.text == odd, "an odd value is a report that blames nobody", odd);
    }
  }

  {  // Rank 2 of 3 was killed: rank 0 saw it go, rank 1 saw only rank 0's echo.
    phv::MemoryStore store;
    std::string e0 = "rank 0: connection closed by rank 2 (127.0.0.1:9) during receive from rank 2";
    std::string x0 = phv::explain_failure(store, opts(0, 3), lost(e0, 2));
    expect(has(x0, "first failure: rank 2 reported no error (it died, is stopped, or lost its network)"),
           "the direct neighbour names the silent rank", x0);
    std::string e1 = "rank 1: connection closed by rank 0 (127.0.0.1:8)";
    std::string x1 = phv::explain_failure(store, opts(1, 3), lost(e1, 0));
    expect(has(x1, "first failure: rank 2 reported no error") && has(x1, "; rank 0 reported: " + e0),
           "the echo names the silent rank and quotes its neighbour", x1);
    phv::FailureReport mine = phv::decode_failure_report(store.get("phv/g0/failure/1", 0));
    expect(mine.text == e1 && mine.blamed == 0,
           "each rank publishes its own error, unexplained, with the peer it blames", mine.text);
  }
  {  // A cut link: ranks 0 and 1 blame each other.
    phv::MemoryStore store;
    publish(store, 1, 0, "rank 1: deadline passed while waiting for receive from rank 0 (10.0.0.1:5)");
    phv::HvdError e0(phv::ErrorKind::TIMEOUT, "rank 0: deadline passed while waiting for receive from rank 1", 1);
    std::string x0 = phv::explain_failure(store, opts(0, 2), e0);
    expect(has(x0, " [rank 1 lost contact too: rank 1: deadline passed while waiting for receive from rank 0"),
           "two ranks that lost each other quote each other", x0);
  }
  {  // The first failure blames nobody (a protocol error, say).
    phv::MemoryStore store;
    publish(store, 0, phv::kNoPeer, "rank 0: poll failed: out of memory");
    std::string x = phv::explain_failure(store, opts(2, 3), lost("rank 2: connection closed by rank 0", 0));
    expect(x == " [first failure reported by rank 0: rank 0: poll failed: out of memory]", "a chain's end is quoted",
           x);
  }
  {
    BrokenStore broken;
    expect(phv::explain_failure(broken, opts(1, 3), lost("rank 1: connection closed by rank 0", 0)).empty(),
           "a store that fails adds nothing (and does not throw)");
    phv::MemoryStore store;
    expect(phv::explain_failure(store, opts(1, 3), lost("rank 1: poll failed", phv::kNoPeer)).empty(),
           "no blamed peer: nothing to add");
  }
  {  // The blame is the error's peer, never a rank its text happens to mention.
    phv::MemoryStore store;
    publish(store, 0, phv::kNoPeer, "rank 0: poll failed");
    expect(phv::explain_failure(store, opts(1, 3), lost("rank 1: the tensor of rank 0 is odd", phv::kNoPeer)).empty(),
           "a rank in the text is not a blame");
    std::string x = phv::explain_failure(store, opts(2, 3), lost("rank 2: lost its neighbour", 0));
    expect(x == " [first failure reported by rank 0: rank 0: poll failed]", "a peer without a rank in the text", x);
  }
  return phv::testing::finish("failure_board_test");
}
