// Warnings that a stranger can trigger at will (one per refused connection) are rate-limited: in each
// window of `interval_s`, the first `burst` lines are logged; the rest are only counted, and one summary
// line with the count and the latest message follows when the window ends (at the next warn() or
// flush() after it).
#pragma once
#include <cstddef>
#include <string>

#include "common/types.h"

namespace phv {

class LogThrottle {
 public:
  LogThrottle(std::string prefix, size_t burst, double interval_s)
      : prefix_(std::move(prefix)), burst_(burst), interval_(seconds_to_duration(interval_s)) {}

  void warn(const std::string& text);
  // Call now and then: emits a due summary.
  void flush(Deadline now);
  // Emits any pending summary, due or not, e.g. before the owner goes away.
  void flush_pending(Deadline now);
  size_t suppressed_total() const { return suppressed_total_; }

 private:
  void end_window(Deadline now);  // logs the summary of the window, if any, and starts the next one

  std::string prefix_;
  size_t burst_;
  Clock::duration interval_;
  Deadline window_start_{};
  size_t logged_ = 0;      // lines logged in the current window
  size_t suppressed_ = 0;  // lines counted but not logged in the current window
  size_t suppressed_total_ = 0;
  std::string latest_;
};

}  // namespace phv
