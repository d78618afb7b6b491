// Interruptible blocking waits. A thread that blocks in the core (a collective, a store wait, the
// connection set-up) may want to be told to stop early: the Python bindings want to run signal handlers
// (Ctrl-C raises KeyboardInterrupt) while a call waits with the GIL released, and the engine wants its
// round-token holder to stop once a caller gave up. An *interrupt check* is a function installed on the
// calling thread for the extent of an InterruptScope; scopes nest, and every check of the thread's chain
// is consulted. Every blocking point of the core sleeps at most kInterruptSliceMs at a time when a check
// is installed (interrupt_poll_ms) and then asks interrupt_requested(); when that says yes, the point
// throws HvdError(INTERRUPTED) -- in the transport, after closing its connections, as any failure does.
//
// Cost: opening a scope is two pointer stores; the blocking points ask only when they are about to sleep
// (a clock read), and each check runs at most every kInterruptCheckMs, so a wait shorter than that never
// runs one.
#pragma once
#include "common/types.h"

namespace phv {

constexpr int kInterruptSliceMs = 100;  // the longest a blocking wait sleeps between checks
constexpr int kInterruptCheckMs = 80;   // a check runs at most this often (below the slice: once per slice)

// Returns true when the waiting thread should stop. Called on that thread, with no core lock held.
using InterruptCheck = bool (*)(void* context);

class InterruptScope {
 public:
  InterruptScope(InterruptCheck check, void* context);
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  friend bool interrupt_requested();
  friend bool interrupt_due();
  InterruptCheck check_;
  void* context_;
  InterruptScope* outer_;
  Clock::time_point next_check_{};  // zero until the first question (interrupt.cc)
  bool fired_ = false;  // sticky: once a check said stop, the scope stays interrupted
};

// Suspends this thread's checks for its extent: bounded clean-up after a failure (publishing the error
// for the peers) that an interrupt which already fired must not cut short.
class InterruptMask {
 public:
  InterruptMask();
  ~InterruptMask();
  InterruptMask(const InterruptMask&) = delete;
  InterruptMask& operator=(const InterruptMask&) = delete;

 private:
  InterruptScope* saved_;
};

// True when this thread has an interrupt check (waits that could otherwise block in one piece must
// then wake every kInterruptSliceMs).
bool interrupt_installed();

// True when a check of this thread's scopes says stop (now or earlier in the same scope).
bool interrupt_requested();

// True when interrupt_requested() would run a check now (or has said stop): cheap, so that a waiter can
// drop its locks before the check runs (a check may take the GIL).
bool interrupt_due();

// A poll()/wait timeout in milliseconds, capped at kInterruptSliceMs when this thread has a check.
int interrupt_poll_ms(int timeout_ms);

// The latest time a wait that wants to end at `until` may sleep to (until itself without a check).
Clock::time_point interrupt_wake(Clock::time_point until);

}  // namespace phv
