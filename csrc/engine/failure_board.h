// Which rank failed first, and why: a failure board in the rendezvous store.
//
// When a rank dies, only its neighbours see its sockets close. They stop their engines, which closes their
// own connections, so the next ranks see *those* close: an echo. Without help, rank 1 of a job whose rank 2
// was killed reports "connection closed by rank 0", which hides the cause. So every rank whose transport
// fails publishes its own error text under "<prefix>/failure/<rank>" and then follows the *blame chain*:
// the peer its error names (the first "rank N" other than itself: every transport error names the peer
// whose connection broke), that peer's published error, the peer *it* names, ... until
//   - a rank that published nothing within `wait_s`: it died, is stopped, or lost its network -- the root;
//   - a rank already visited: two ranks that lost each other (a cut link) -- both reports are quoted.
// The explanation is appended to the local error, so the first error every rank raises (and every later
// "stopped after an error" message quoting it) names the rank that failed first and says why.
//
// Bounded: one short-lived store client (connect and every call limited by wait_s), at most one wait of
// wait_s per rank of the chain, and any store failure (e.g. the store was hosted by the dead rank) just
// leaves the local error as it is.
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "rendezvous/store.h"
#include "transport/transport.h"

namespace phv {

// The peer a transport error blames: the first "rank N" in `message` with N != me; -1 if there is none.
int blamed_peer(const std::string& message, int me);

struct FailureBoardOptions {
  std::string prefix;  // store key namespace of this engine (ConnectOptions::store_prefix)
  int rank = 0;
  int size = 1;
  double wait_s = 1.0;  // how long to wait for a blamed rank's report before calling it silent
};

// Publishes `my_error` and follows the blame chain. Returns the text to append to my_error (starting with
// " [", or "" when there is nothing to add). Never throws.
std::string explain_failure(Store& store, const FailureBoardOptions& options, const std::string& my_error);

// A Transport that forwards everything to `inner` and, the first time a call throws an error other than
// SHUTDOWN or INVALID_ARGUMENT, re-throws it with explain(text) appended. Later calls that re-throw the
// same failure get the same explained text, so every message of a stopped engine quotes one cause.
class ExplainingTransport : public Transport {
 public:
  using Explain = std::function<std::string(const std::string& error)>;
  ExplainingTransport(Transport& inner, Explain explain) : inner_(inner), explain_(std::move(explain)) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  RequestId post_send(int peer, const void* buf, size_t len) override;
  RequestId post_recv(int peer, void* buf, size_t len) override;
  // The zero-copy receive and the shared-memory fact must pass through too, or every collective the
  // engine runs would take the copying path and the TCP segment sizes (they used to be missing here).
  bool recv_in_place(int peer) const override { return inner_.recv_in_place(peer); }
  RequestId post_recv_sink(int peer, size_t len, size_t grain, RecvSink* sink) override;
  bool shared_memory_everywhere() const override { return inner_.shared_memory_everywhere(); }
  void progress(std::vector<RequestId>& completed, Deadline deadline) override;
  size_t pending() const override { return inner_.pending(); }
  std::string describe_peer(int peer) const override { return inner_.describe_peer(peer); }

 private:
  [[noreturn]] void rethrow(const HvdError& e);

  Transport& inner_;
  Explain explain_;
  std::mutex mu_;
  std::string original_, explained_;  // the first failure, as thrown and as explained
};

}  // namespace phv
