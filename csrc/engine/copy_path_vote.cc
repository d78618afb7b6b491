#include "engine/copy_path_vote.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"

namespace phv {

CopyPathVote::Policy CopyPathVote::parse(const std::string& text, const VoteKnob& knob) {
  if (text == "auto") return Policy::AUTO;
  if (text == "off") return Policy::OFF;
  if (text == knob.wide) return Policy::WIDE;
  if (text == knob.narrow) return Policy::NARROW;
  throw_error(ErrorKind::INVALID_ARGUMENT, std::string(knob.name) + " must be auto, off, " + knob.wide + " or " +
                                               knob.narrow + ", not '" + text + "'");
}

void CopyPathVote::record(bool wide, size_t piece_bytes, double seconds) {
  ++calls_[wide ? 1 : 0];
  if (policy_ != Policy::AUTO) return;
  if (!seen_ || wide != mode_) {  // a new run of this mode
    windows_[wide ? 1 : 0].run = 0;
    mode_ = wide;
    seen_ = true;
    fresh_run_ = true;
  }
  if (fresh_run_) {  // its first call found cold buffers: not timed
    fresh_run_ = false;
    return;
  }
  Window& w = windows_[wide ? 1 : 0];
  w.recent[static_cast<size_t>(w.run % kWindow)] =
      seconds * 1e9 / static_cast<double>(std::max<size_t>(piece_bytes, 1));
  ++w.run;
  w.last_call = ++timed_;
  if (w.run % kRefresh != 0) return;  // the figure moves slowly: a percentile every call cost 140 ns
  std::array<double, kWindow> sorted = w.recent;
  const auto n = static_cast<ptrdiff_t>(std::min(w.run, kWindow));
  std::nth_element(sorted.begin(), sorted.begin() + n / 4, sorted.begin() + n);
  w.figure = sorted[static_cast<size_t>(n / 4)];
}

void CopyPathVote::judge() {
  const double ring = windows_[0].figure, single = windows_[1].figure;
  const bool before = prefer_wide_;
  if (prefer_wide_ && ring < kBetter * single) prefer_wide_ = false;
  if (!prefer_wide_ && single < kBetter * ring) prefer_wide_ = true;
  if (prefer_wide_ != before) {
    explore_after_ = kExploreFirst;
  } else if (exploring_) {
    explore_after_ = std::min(2 * explore_after_, kExploreMax);
  }
  exploring_ = false;
}

CopyPathVote::Vote CopyPathVote::poll() {
  switch (policy_) {
    case Policy::OFF: return Vote::NONE;
    case Policy::WIDE:
    case Policy::NARROW: {
      const Vote forced = send(policy_ == Policy::WIDE);
      if (forced == Vote::WIDE) reason_ = std::string("single copies: ") + knob_.name + "=" + knob_.wide;
      if (forced == Vote::NARROW) reason_ = std::string("the ring: ") + knob_.name + "=" + knob_.narrow;
      return forced;
    }
    case Policy::AUTO: break;
  }
  if (!seen_ || windows_[mode_ ? 1 : 0].run < kMinRun) return Vote::NONE;
  const Window& other = windows_[mode_ ? 0 : 1];
  const bool stale = other.last_call < 0 || timed_ - other.last_call > explore_after_;
  if (stale) {
    exploring_ = true;
  } else {
    judge();
  }
  const Vote vote = send(stale ? !mode_ : prefer_wide_);
  if (vote != Vote::NONE) {
    std::ostringstream why;
    why << (vote == Vote::WIDE ? "single copies" : "the ring") << ": ";
    if (stale) {
      why << (mode_ ? "the ring" : "single copies");
      if (other.last_call < 0) why << " not timed yet";
      else why << " not timed for " << explore_after_ << " calls";
    } else {
      why << "ring " << windows_[0].figure << " ns/byte, single copies " << windows_[1].figure << " ns/byte";
    }
    reason_ = why.str();
  }
  return vote;
}

CopyPathVote::Vote CopyPathVote::send(bool wide) {
  if (voted_ == (wide ? 1 : 0)) return Vote::NONE;
  voted_ = wide ? 1 : 0;
  ++votes_;
  return wide ? Vote::WIDE : Vote::NARROW;
}

}  // namespace phv
