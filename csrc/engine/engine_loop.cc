// EngineCore, the round-token holder's side: the background thread's pacing, one round (take the queue,
// build the message, run the control round, execute the list), and stopping.
#include <algorithm>

#include "common/interrupt.h"
#include "common/logging.h"
#include "engine/engine_core.h"

namespace phv {

namespace {

// How long the background thread leaves a fresh enqueue to its caller: a synchronous caller reaches
// wait() within microseconds and then runs the round itself (no hand-off); an asynchronous burst gets
// its requests into one round (better fusion). Far below a cycle, so no request waits for one.
constexpr auto kCoalesce = std::chrono::microseconds(50);

}  // namespace

void EngineCore::loop() {
  InterruptScope abort_scope(&EngineCore::abort_requested, this);  // the only check of this thread
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(callers_.mutex());
      for (;;) {
        if (pacing_.stopped()) break;
        if (background_due()) break;
        Clock::time_point until = pacing_.next_cycle;
        if (!callers_.queue_empty() && pacing_.callers_waiting == 0) {
          until = std::min(until, callers_.queue_since() + kCoalesce);
        }
        work_cv_.wait_until(lock, until);
      }
      if (pacing_.stopped()) break;
    }
    round_mu_.lock();
    bool run;
    {
      std::lock_guard<std::mutex> lock(callers_.mutex());
      run = !pacing_.stopped() && background_due();  // else a caller drove the rounds meanwhile
    }
    if (run) run_round();
    release_token();
  }
  std::lock_guard<std::mutex> lock(callers_.mutex());
  pacing_.thread_exited = true;
  exit_cv_.notify_all();
}

void EngineCore::release_token() {
  round_mu_.unlock();
  std::lock_guard<std::mutex> lock(callers_.mutex());
  // The token is free: a waiting caller may drive now.
  if (pacing_.callers_waiting > 0) callers_.done_cv().notify_all();
}

bool EngineCore::background_due() const {
  if (!pacing_.running()) return true;
  // Callers blocked in wait() drive the rounds themselves; the background thread then only keeps the
  // cycle (idle rounds, stall checks, timeouts).
  Clock::time_point now = Clock::now();
  if (pacing_.callers_waiting == 0) {
    if (pacing_.self_waiting && !pacing_.all_waiting) return true;
    if (!callers_.queue_empty() && now >= callers_.queue_since() + kCoalesce) return true;
  }
  return now >= pacing_.next_cycle;
}

void EngineCore::run_round() {
  const auto cycle =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(options_.cycle_time_ms));
  {
    std::lock_guard<std::mutex> lock(callers_.mutex());
    round_stop_.asked = !pacing_.running();
    pacing_.next_cycle = Clock::now() + cycle;
    callers_.take_queue(taken_);
  }
  std::string reason;
  int64_t fusion = pending_fusion_threshold_.exchange(-1);
  if (fusion >= 0) round_.set_fusion_threshold(fusion);
  try {
    runner_.take(taken_);
    Deadline deadline;
    bool waiting = runner_.build_message(round_stop_, deadline);
    {
      std::lock_guard<std::mutex> lock(callers_.mutex());
      pacing_.self_waiting = waiting;
    }
    const ResponseList* resp = nullptr;
    try {
      TransferWatchScope watch(&round_watch_);
      resp = &round_.run(runner_.message(), deadline);
    } catch (const HvdError& e) {
      // e.what() comes from the transport: it names our rank and the peer (rank and address).
      std::string msg = "negotiation round " + std::to_string(rounds_) + " failed: " + e.what();
      runner_.fail_reported(runner_.stop_kind(e.kind()), msg);
      throw HvdError(e.kind(), msg);
    }
    ++rounds_;
    runner_.count_round(round_.last_express() == ControlRound::Express::HIT,
                        round_.last_express() == ControlRound::Express::MISS);
    log(LogLevel::TRACE, "engine round ", rounds_, ": ", resp->n, " items, flags ", resp->flags, ", sent bits ",
        runner_.message().bits.size(), " news ", runner_.message().n_news);
    Runner::Outcome outcome = runner_.execute(*resp);
    {
      std::lock_guard<std::mutex> lock(callers_.mutex());
      pacing_.all_waiting = outcome.all_waiting;
      pacing_.self_waiting = outcome.waiting;
      // The next idle round is due a cycle after this round's work ended, not after it began. A round is
      // an exchange every rank takes part in, so an idle round started here pairs with the peers' next
      // round, which is the one their next request rides. Counted from the start, a collective longer than
      // the cycle (a 16 MiB alltoall, 1.7 ms) had the background thread start an idle round the moment a
      // synchronous caller returned, and every call then took two rounds, the first spent waiting for a
      // peer still busy (benchmarks/RESULTS.md, "The cycle counted from the end of a round").
      pacing_.next_cycle = Clock::now() + cycle;
    }
    if (outcome.shutdown) round_stop_.agreed = true;
    if (rank_ == 0) timeline_.flush();
    if (!round_stop_.agreed) return;
    reason = "pyhorovod has been shut down (" + resp->shutdown_reason + ")";
  } catch (const std::exception& e) {
    reason = std::string("the engine on rank ") + std::to_string(rank_) + " stopped after an error: " + e.what();
  }
  // The requests that failed carry their own error kind; the rest were simply not run.
  runner_.log_stats();
  stop_all(ErrorKind::SHUTDOWN, reason);
}

void EngineCore::stop_all(ErrorKind kind, const std::string& reason) {
  std::vector<OpPtr> victims;
  runner_.release_all(victims);
  {
    std::lock_guard<std::mutex> lock(callers_.mutex());
    pacing_.life = EngineLife::STOPPED;
    pacing_.stop_reason = reason;
    callers_.drain_queue(victims);
  }
  for (OpPtr& op : victims) {
    if (op->done) continue;
    runner_.fail(op, kind, "rank " + std::to_string(rank_) + ": " + op->label() + " was not run: " + reason);
  }
  if (rank_ == 0) timeline_.flush();
  std::lock_guard<std::mutex> lock(callers_.mutex());
  work_cv_.notify_all();  // the background thread exits once it sees the engine stopped
}

bool EngineCore::abort_requested(void* core) { return static_cast<EngineCore*>(core)->abort_.load(); }

std::string EngineCore::describe_round(const void* core) {
  // Names the requests this rank waits to run: those of the round, then those enqueued since it began.
  const EngineCore& e = *static_cast<const EngineCore*>(core);
  std::string out =
      "negotiation round " + std::to_string(e.rounds_) +
      (e.round_.express_on() ? " (the express exchange, then perhaps the exchange with the coordinator, rank 0"
                             : " (the exchange with the coordinator, rank 0");
  int shown = 0;
  auto add = [&](const OpPtr& op) {
    if (op->held || shown > 3) return;
    out += shown == 3 ? ", ..." : (shown ? ", " : ", for ") + op->label();
    ++shown;
  };
  for (const auto& kv : e.runner_.pending()) add(kv.second);
  std::lock_guard<std::mutex> lock(e.callers_.mutex());  // (the caller, the round-token holder, holds no lock)
  for (const OpPtr& op : e.callers_.queued()) add(op);
  return out + ")";
}

}  // namespace phv
