// Which copy path the pieces just below the single-copy threshold take, chosen while the job runs; and, with
// a second instance, which algorithm a large allreduce takes (the end of this comment).
//
// Terms. A *piece* is the block one rank sends another in an allgather, alltoall or reducescatter over
// shared memory. Pieces of at least Transport::direct_bytes() go as one copy between the two ranks'
// buffers (algorithms/direct_copy.h); smaller ones through the two-copy ring. The *wide* mode lowers that
// threshold to kWideDirectBytes (transport/cross_memory.h), so the pieces in between -- *eligible* ones --
// go as single copies too.
//
// Why. On a host whose cores hand cache lines to each other slowly at times (a virtual machine whose
// vCPUs the hypervisor moves; benchmarks/RESULTS.md, "The slow state, found on the host"), the ring, which
// moves lines one core has just written to the other in both directions every call, slows 4x for
// seconds to minutes, while a single copy slows little. In the fast state the ring is 20-80% faster. No
// fixed threshold is right in both states, so each rank times its eligible calls in the mode they ran in
// and votes for the faster one.
//
// Agreement. Every rank must take the same path for a piece, so the mode is the negotiation's: a rank's
// vote rides in its RankMessage (kRankVoteWide / kRankVoteNarrow) only when its preference changes, the
// coordinator keeps each rank's last vote, and every star response says the mode (kRespWideCopies): wide
// while more than half the ranks voted for it. Every rank applies the mode before it runs the response's
// items (control_round.cc), so a mode never changes under a running collective.
//
// Choosing. For each mode, a rank's figure is the 25th percentile of the time per byte of its latest
// kWindow calls in that mode (its own wall time of each): a burst of preempted calls, common where ranks
// share cores, moves it little, while a slow state moves every call. A run of a mode is judged after
// kMinRun timed calls (the first call after a switch is not timed: its buffers are cold). A rank asks
// for the other mode when its figure is at least 20% lower, or to time it again -- to *explore* it -- when
// explore_after calls have passed since it last ran (so that a changed state is noticed). An exploration
// that changes nothing doubles explore_after (up to kExploreMax), so a steady state pays for it less and
// less: at 256 calls and a mode 50% slower, 6% on those calls; from 16384 calls on, 0.1%.
//
// The allreduce. A like trade holds between the ring allreduce and the single-copy one
// (algorithms/direct_allreduce.cc): in the slow state single copies ran 3.5-4.4x faster than the ring, in
// the fast state 1.0-1.6x from 8 MiB, while below 8 MiB the ring, working in cache, wins (benchmarks/
// RESULTS.md, "The single-copy allreduce"). Which is faster depends on the host, its state and the sizes, so
// a rank measures rather than assumes. A
// second CopyPathVote times the allreduces direct_allreduce_eligible() admits; its votes ride in their own
// flags (kRankVoteSingleAllreduce / kRankVoteRingAllreduce) and the mode in kRespSingleCopyAllreduce, with
// the same majority rule. There "wide" means the single-copy allreduce and "narrow" the ring.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace phv {

// The knob that sets a vote's policy, and its words for the two modes (wide, narrow).
struct VoteKnob {
  const char* name;
  const char* wide;
  const char* narrow;
};
constexpr VoteKnob kCopyPathKnob{"PYHOROVOD_SHM_DIRECT_ADAPT", "wide", "narrow"};
constexpr VoteKnob kAllreduceKnob{"PYHOROVOD_ALLREDUCE_SINGLE_COPY", "single", "ring"};

class CopyPathVote {
 public:
  // auto: measure and vote; off: never vote (the coordinator counts such a rank as narrow); wide /
  // narrow: vote so once, at the first round (for tests and for forcing a mode on every rank).
  enum class Policy : uint8_t { AUTO, OFF, WIDE, NARROW };
  enum class Vote : uint8_t { NONE, WIDE, NARROW };

  static constexpr int kWindow = 64;               // calls a mode's figure is taken over
  static constexpr int kMinRun = 32;               // timed calls of a run before it is judged
  static constexpr int kRefresh = 8;               // timed calls between two computations of a figure
  static constexpr double kBetter = 0.8;           // the other mode's figure, at most this share
  static constexpr int64_t kExploreFirst = 256;    // timed calls before the other mode is timed again
  static constexpr int64_t kExploreMax = 16384;

  explicit CopyPathVote(Policy policy = Policy::AUTO, const VoteKnob& knob = kCopyPathKnob)
      : policy_(policy), knob_(knob) {}
  // Parses the knob's value (auto, off, or its words for wide and narrow); throws INVALID_ARGUMENT otherwise.
  static Policy parse(const std::string& text, const VoteKnob& knob = kCopyPathKnob);

  // One eligible call: it ran in mode `wide`, its pieces averaged piece_bytes, it took `seconds`.
  void record(bool wide, size_t piece_bytes, double seconds);
  // The vote to send with this round's message, or NONE when this rank's preference has not changed.
  Vote poll();

  uint64_t calls(bool wide) const { return calls_[wide ? 1 : 0]; }  // eligible calls run in each mode
  uint64_t votes() const { return votes_; }                          // votes sent
  int64_t explore_after() const { return explore_after_; }
  const std::string& reason() const { return reason_; }               // why the last AUTO vote

 private:
  struct Window {
    std::array<double, kWindow> recent{};  // ns per byte, a ring of the run's latest calls
    int run = 0;                           // timed calls in the current run of this mode
    int64_t last_call = -1;                // timed_ at its latest call (-1: never timed)
    double figure = 0;                     // the 25th percentile of recent, every kRefresh calls
  };
  Vote send(bool wide);
  void judge();  // updates prefer_wide_ from both figures, only for a clear gain

  Policy policy_;
  VoteKnob knob_;
  std::array<Window, 2> windows_{};  // [wide]
  int64_t timed_ = 0;                // timed calls, both modes
  bool mode_ = false;                // the mode of the latest call
  bool seen_ = false;                // a call was recorded
  bool fresh_run_ = true;            // the next call is the first since the mode changed (not timed)
  bool prefer_wide_ = false;         // the mode this rank finds faster
  bool exploring_ = false;           // it asked to time the other mode again, and has not judged it yet
  int64_t explore_after_ = kExploreFirst;
  int voted_ = -1;                   // the last vote sent: -1 none, 0 narrow, 1 wide
  std::array<uint64_t, 2> calls_{};
  uint64_t votes_ = 0;
  std::string reason_;
};

}  // namespace phv
