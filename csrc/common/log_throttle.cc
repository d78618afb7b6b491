#include "common/log_throttle.h"

#include "common/logging.h"

namespace phv {

void LogThrottle::flush(Deadline now) {
  if (now - window_start_ >= interval_) end_window(now);
}

void LogThrottle::flush_pending(Deadline now) {
  if (now - window_start_ >= interval_ || suppressed_ > 0) end_window(now);
}

void LogThrottle::end_window(Deadline now) {
  if (suppressed_ > 0) {
    double secs = std::chrono::duration<double>(now - window_start_).count();
    log(LogLevel::WARNING, prefix_, ": ", suppressed_, " more like this in the last ", static_cast<int>(secs + 0.5),
        " s (latest: ", latest_, ")");
  }
  window_start_ = now;
  logged_ = suppressed_ = 0;
}

void LogThrottle::warn(const std::string& text) {
  flush(Clock::now());
  if (logged_ < burst_) {
    ++logged_;
    log(LogLevel::WARNING, prefix_, ": ", text);
    return;
  }
  ++suppressed_;
  ++suppressed_total_;
  latest_ = text;
}

}  // namespace phv
