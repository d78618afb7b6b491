// Which rank failed first, and why: a failure board in the rendezvous store.
//
// When a rank dies, only its neighbours see its sockets close. They stop their engines, which closes their
// own connections, so the next ranks see *those* close: an echo. Without help, rank 1 of a job whose rank 2
// was killed reports "connection closed by rank 0", which hides the cause. So every rank whose transport
// fails publishes its own error, and the peer that error blames (HvdError::peer(): every transport error
// about a connection carries the peer whose connection broke), under "<prefix>/failure/<rank>", and then
// follows the *blame chain*: the peer its error blames, that peer's published error, the peer *it*
// blames, ... until
//   - a rank that published nothing within `wait_s`: it died, is stopped, or lost its network -- the root;
//   - a rank already visited: two ranks that lost each other (a cut link) -- both reports are quoted.
// The explanation is appended to the local error (transport/explaining_transport.h), so the first error
// every rank raises (and every later "stopped after an error" message quoting it) names the rank that
// failed first and says why.
//
// Bounded: one short-lived store client (connect and every call limited by wait_s), at most one wait of
// wait_s per rank of the chain, and any store failure (e.g. the store was hosted by the dead rank) just
// leaves the local error as it is.
#pragma once
#include <string>

#include "common/error.h"
#include "rendezvous/store.h"

namespace phv {

// What one rank publishes on the board: its error, as thrown, and the peer that error blames.
struct FailureReport {
  int blamed = kNoPeer;
  std::string text;
};

// The store value of a report and back: the blamed rank on the first line, the text after it. A value
// that does not have that form reads as a report that blames nobody.
std::string encode_failure_report(const FailureReport& report);
FailureReport decode_failure_report(const std::string& value);

struct FailureBoardOptions {
  std::string prefix;  // store key namespace of this engine (ConnectOptions::store_prefix)
  int rank = 0;
  int size = 1;
  double wait_s = 1.0;  // how long to wait for a blamed rank's report before calling it silent
};

// Publishes `my_error` and follows the blame chain from its peer(). Returns the text to append to it
// (starting with " [", or "" when there is nothing to add). Never throws.
std::string explain_failure(Store& store, const FailureBoardOptions& options, const HvdError& my_error);

}  // namespace phv
