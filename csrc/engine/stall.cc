#include "engine/stall.h"

#include <algorithm>
#include <sstream>

#include "common/logging.h"

namespace phv {

namespace {
std::string ranks_list(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  return out.str();
}
}  // namespace

StallInspector::StallInspector(double check_s, double shutdown_s, bool disabled)
    : check_s_(check_s), shutdown_s_(shutdown_s), disabled_(disabled || (check_s <= 0 && shutdown_s <= 0)) {
  double horizon = check_s_ > 0 ? check_s_ : shutdown_s_;
  if (shutdown_s_ > 0) horizon = std::min(horizon, shutdown_s_);
  // A few checks per horizon: a stall is reported at most ~25% late, and the check stays off the
  // per-round fast path.
  interval_s_ = std::max(0.05, horizon / 4);
  next_check_ = deadline_after(interval_s_);
}

bool StallInspector::due(Clock::time_point now) {
  if (disabled_ || now < next_check_) return false;
  next_check_ = now + seconds_to_duration(interval_s_);
  warn_lines_.clear();
  shutdown_reason_.clear();
  seen_.clear();
  return true;
}

void StallInspector::consider(const Key& key, DescKind kind, double waited_s, const std::vector<int>& missing) {
  if (disabled_ || missing.empty()) return;
  seen_.push_back(key);
  std::ostringstream what;
  what << kind_name(kind) << " '" << key.name << "'";
  if (key.set != 0) what << " (process set " << key.set << ")";
  what << " waited " << static_cast<int64_t>(waited_s * 10) / 10.0 << " s for ranks [" << ranks_list(missing) << "]";
  if (shutdown_s_ > 0 && waited_s >= shutdown_s_ && shutdown_reason_.empty()) {
    shutdown_reason_ = "stalled request exceeded HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=" + std::to_string(shutdown_s_) +
                       ": " + what.str();
  }
  if (check_s_ <= 0 || waited_s < check_s_) return;
  auto it = last_warned_.find(key);
  Clock::time_point now = Clock::now();
  if (it != last_warned_.end() && std::chrono::duration<double>(now - it->second).count() < check_s_) {
    return;  // warned recently: repeat at most once per check period
  }
  last_warned_[key] = now;
  warn_lines_.push_back(what.str());
}

std::string StallInspector::conclude(Clock::time_point now) {
  // Forget tensors that are no longer waiting, so the map stays as small as the set of stalls.
  for (auto it = last_warned_.begin(); it != last_warned_.end();) {
    if (std::find(seen_.begin(), seen_.end(), it->first) == seen_.end()) {
      it = last_warned_.erase(it);
    } else {
      ++it;
    }
  }
  if (!warn_lines_.empty()) {
    std::ostringstream out;
    out << "Stalled ops: one or more tensors were submitted by a subset of ranks and have waited for the "
           "remaining ranks for more than "
        << check_s_
        << " s. This usually means that ranks submit different tensors, or that some ranks skip a "
           "collective, which will deadlock. Waiting:";
    for (const auto& line : warn_lines_) out << "\n  " << line;
    log(LogLevel::WARNING, out.str());
  }
  return shutdown_reason_;
}

}  // namespace phv
