// The engine's pacing state: when the next round should run and whether the engine still runs. Read by
// the background thread and by waiting callers to decide who drives the next round, written by whoever
// holds the round token after each round, and by shutdown(). Guarded by the front desk's mutex
// (callers.h), so that an enqueue and the decision to run a round see each other.
#pragma once
#include <cstdint>
#include <string>
#include "common/error.h"

namespace phv {

// Only ever moves forward.
enum class EngineLife : uint8_t {
  RUNNING,
  STOP_ASKED,  // shutdown() was called: the next round tells the others, then the engine stops
  STOPPED,     // no round runs any more; every request fails with stop_reason
};

struct EnginePacing {
  EngineLife life = EngineLife::RUNNING;
  std::string stop_reason;
  bool thread_exited = false;
  bool self_waiting = false;  // this rank reported requests that have not run yet
  bool all_waiting = false;   // the last round said nobody can progress without an enqueue
  int callers_waiting = 0;    // callers blocked in wait(): they run rounds themselves when they can
  Clock::time_point next_cycle;

  bool running() const { return life == EngineLife::RUNNING; }
  bool stopped() const { return life == EngineLife::STOPPED; }
  bool stop_asked() const { return life == EngineLife::STOP_ASKED; }
  void ask_stop() {
    if (life == EngineLife::RUNNING) life = EngineLife::STOP_ASKED;
  }
};

// The round-token holder's view of stopping, for the round it runs.
struct RoundStop {
  bool asked = false;   // shutdown() had been called when the round began: the message says so
  bool agreed = false;  // the list said every rank stops after this round
};

}  // namespace phv
