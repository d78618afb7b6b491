#include "common/interrupt.h"

#include <algorithm>

namespace phv {

namespace {
thread_local InterruptScope* t_innermost = nullptr;
constexpr auto kCheckEvery = std::chrono::milliseconds(kInterruptCheckMs);
}  // namespace

// The clock starts at the first question (the first time the thread is about to sleep), and the first
// check runs kInterruptCheckMs later: a call that never sleeps that long (every small collective) never
// pays for a check, nor for a clock read when the scope opens.
InterruptScope::InterruptScope(InterruptCheck check, void* context)
    : check_(check), context_(context), outer_(t_innermost) {
  t_innermost = this;
}

namespace {
// True when the scope's next check is due at `now`; starts the scope's clock on the first call.
bool check_due(Clock::time_point& next_check, Clock::time_point now) {
  if (next_check == Clock::time_point{}) {
    next_check = now + kCheckEvery;
    return false;
  }
  return now >= next_check;
}
}  // namespace

InterruptScope::~InterruptScope() { t_innermost = outer_; }

InterruptMask::InterruptMask() : saved_(t_innermost) { t_innermost = nullptr; }
InterruptMask::~InterruptMask() { t_innermost = saved_; }

bool interrupt_requested() {
  InterruptScope* scope = t_innermost;
  if (scope == nullptr) return false;
  Clock::time_point now = Clock::now();
  for (; scope != nullptr; scope = scope->outer_) {
    if (scope->fired_) return true;
    if (!check_due(scope->next_check_, now)) continue;
    scope->next_check_ = now + kCheckEvery;
    if (scope->check_(scope->context_)) {
      scope->fired_ = true;
      return true;
    }
  }
  return false;
}

bool interrupt_due() {
  InterruptScope* scope = t_innermost;
  if (scope == nullptr) return false;
  Clock::time_point now = Clock::now();
  for (; scope != nullptr; scope = scope->outer_)
    if (scope->fired_ || check_due(scope->next_check_, now)) return true;
  return false;
}

bool interrupt_installed() { return t_innermost != nullptr; }

int interrupt_poll_ms(int timeout_ms) {
  return t_innermost == nullptr ? timeout_ms : std::min(timeout_ms, kInterruptSliceMs);
}

Clock::time_point interrupt_wake(Clock::time_point until) {
  if (t_innermost == nullptr) return until;
  return std::min(until, Clock::now() + std::chrono::milliseconds(kInterruptSliceMs));
}

}  // namespace phv
