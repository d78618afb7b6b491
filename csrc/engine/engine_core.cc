// EngineCore, the callers' side: enqueue (validation, naming through the front desk), wait (which may
// drive rounds itself), process-set changes, timeline control and shutdown. The background thread's side
// is in engine_loop.cc.
#include "engine/engine_core.h"

#include <algorithm>

#include "backends/gpu_backend.h"
#include "common/interrupt.h"
#include "common/logging.h"
#include "engine/validate.h"

namespace phv {

namespace {

// How long shutdown() waits for the background thread: long enough for the round that carries the
// shutdown flag (or a collective already running), short enough that a job never hangs on exit.
double shutdown_bound_s(const EngineOptions& o) { return std::max(1.0, std::min(o.timeout_s, 30.0)) + 1.0; }

}  // namespace

EngineCore::EngineCore(Transport& transport, const Tuning& tuning, const EngineOptions& options)
    : options_(options),
      rank_(transport.rank()),
      size_(transport.size()),
      callers_(transport.rank()),
      sets_(&transport, transport.size(), transport.rank()),
      cache_(options.cache_capacity),
      round_(transport, sets_, cache_, timeline_, options_, gpu_backend_built()),
      runner_(rank_, size_, tuning, options_, sets_, cache_, timeline_, callers_, abort_) {
  PHV_CHECK_ARG(options.cycle_time_ms >= 0, "cycle_time_ms must be >= 0, got ", options.cycle_time_ms);
  PHV_CHECK_ARG(options.timeout_s > 0, "timeout_s must be > 0, got ", options.timeout_s);
  PHV_CHECK_ARG(options.fusion_threshold_bytes >= 0, "fusion_threshold_bytes must be >= 0");
  PHV_CHECK_ARG(options.fusion_max_tensor_bytes >= 0, "fusion_max_tensor_bytes must be >= 0");
  for (const auto& ranks : options.process_sets) sets_.add(sets_.normalise(ranks));
  if (rank_ == 0 && !options.timeline_path.empty()) {
    try {
      timeline_.start(options.timeline_path, options.timeline_mark_cycles);
    } catch (const HvdError& e) {
      // Only rank 0 writes it: failing here would leave the other ranks waiting for us.
      log(LogLevel::ERROR, "timeline disabled: ", e.what());
    }
  }
  // The stall inspector's limits, applied to bytes in flight too (transfer_watch.h).
  double warn_s = options.stall_check_disable ? 0 : std::max(0.0, options.stall_check_s);
  double fail_s = options.stall_check_disable ? 0 : std::max(0.0, options.stall_shutdown_s);
  round_watch_ = TransferWatch{warn_s, fail_s, &EngineCore::describe_round, this};
  pacing_.next_cycle = Clock::now();
  thread_ = std::thread([this] { loop(); });
}

void EngineCore::set_knobs(const EngineKnobs& knobs) {
  PHV_CHECK_ARG(knobs.hierarchical_allreduce <= 1, "hierarchical_allreduce must be -1, 0 or 1");
  if (knobs.cycle_time_ms >= 0) {
    std::lock_guard<std::mutex> lock(callers_.mutex());
    options_.cycle_time_ms = knobs.cycle_time_ms;
  }
  if (knobs.fusion_threshold_bytes >= 0) pending_fusion_threshold_.store(knobs.fusion_threshold_bytes);
  runner_.set_knobs(knobs.hierarchical_allreduce, knobs.segment_bytes);
}

EngineCore::~EngineCore() {
  if (thread_.joinable()) shutdown();
}

Handle EngineCore::submit(const OpPtr& op, Caller caller) {
  std::lock_guard<std::mutex> lock(callers_.mutex());
  return submit_locked(op, caller);
}

Handle EngineCore::submit_locked(const OpPtr& op, Caller caller) {
  if (!pacing_.running()) {
    throw HvdError(ErrorKind::SHUTDOWN,
                   "rank " + std::to_string(rank_) + ": cannot run " + kind_name(op->desc.kind) + " '" + op->desc.name +
                       "': " + (pacing_.stop_reason.empty() ? "pyhorovod has been shut down" : pacing_.stop_reason));
  }
  callers_.admit(op, caller != Caller::WAITS_NOW);
  // Wake the background thread on the first enqueue of a burst only: it takes the whole queue. A
  // synchronous caller drives the round itself, so waking the thread would only cost a context switch.
  const bool waits_now = caller == Caller::WAITS_NOW;
  if (callers_.queue(op) && !waits_now) work_cv_.notify_one();
  if (waits_now) ++pacing_.callers_waiting;
  return op->handle;
}

Handle EngineCore::enqueue(Request request, double timeout_s) {
  OpPtr op = make_op(std::move(request), timeout_s);
  const NormTap& tap = op->req.norm_tap;
  if (tap.sumsq_in == nullptr && tap.fill_from == nullptr) return submit(op);
  double input_sumsq =
      tap.before_queue(op->req.input, op->req.output, static_cast<size_t>(op->desc.count()), op->req.dtype);
  Handle h = submit(op);
  tap.accepted(input_sumsq);
  return h;
}

Result EngineCore::run_sync(Request request, double timeout_s) {
  OpPtr op = make_op(std::move(request), timeout_s);
  std::unique_lock<std::mutex> lock(callers_.mutex());
  submit_locked(op, Caller::WAITS_NOW);
  return wait_locked(lock, op, Caller::WAITS_NOW);
}

std::shared_ptr<PreparedRequest> EngineCore::prepare(Request request, double timeout_s) {
  PHV_CHECK_ARG(!request.name.empty(), "a prepared ", op_type_name(request.type), " needs a name");
  auto prepared = std::make_shared<PreparedRequest>();
  prepared->blueprint = *make_op(std::move(request), timeout_s);
  return prepared;
}

Result EngineCore::run_prepared(PreparedRequest& prepared, const void* input, void* output) {
  OpPtr op;
  const bool owner = !prepared.in_use.exchange(true, std::memory_order_acquire);
  struct Release {
    std::atomic<bool>* flag;
    ~Release() {
      if (flag) flag->store(false, std::memory_order_release);
    }
  } release{owner ? &prepared.in_use : nullptr};
  if (owner && prepared.reusable && prepared.reusable.use_count() == 1) {
    // The engine's last writes to it (done under the callers' mutex) come before its last reference
    // was dropped; the fence pairs with that drop.
    std::atomic_thread_fence(std::memory_order_acquire);
    op = prepared.reusable;
    op->restart();
  } else {
    op = std::make_shared<Op>(prepared.blueprint);
    if (owner) prepared.reusable = op;
  }
  op->req.input = input;
  op->req.output = output;
  // One clock read for both (each read costs about 25 ns here, a tenth of the engine's work per call).
  op->enqueued = Clock::now();
  op->deadline = op->enqueued + seconds_to_duration(op->timeout_s);
  std::unique_lock<std::mutex> lock(callers_.mutex());
  submit_locked(op, Caller::WAITS_NOW);
  return wait_locked(lock, op, Caller::WAITS_NOW);
}

OpPtr EngineCore::make_op(Request request, double timeout_s) {
  auto op = std::make_shared<Op>();
  op->timeout_s = timeout_s > 0 ? timeout_s : options_.timeout_s;
  if (request.name.empty()) request.name = callers_.auto_name(request.type);
  if (request.type == OpType::JOIN) {
    PHV_CHECK_ARG(request.process_set == 0, "join: only the global process set (0) is supported, got ",
                  request.process_set);
    op->desc.kind = kDescJoin;
    op->desc.name = request.name;
  } else {
    std::pair<int, int> where = sets_.check_member(request.process_set, op_type_name(request.type));
    op->desc = validate_request(request, where.first);
    op->set_index = where.second;
    if (request.device >= 0 && request.type != OpType::BARRIER) runner_.gpu().check(request);
  }
  op->req = std::move(request);
  op->enqueued = Clock::now();
  op->deadline = deadline_after(op->timeout_s);
  return op;
}

Result EngineCore::wait(Handle handle) {
  std::unique_lock<std::mutex> lock(callers_.mutex());
  OpPtr op = callers_.find(handle);
  PHV_CHECK_ARG(op != nullptr, "unknown handle ", handle, " (already waited for?)");
  return wait_locked(lock, op, Caller::WILL_WAIT_LATER);
}

Result EngineCore::wait_locked(std::unique_lock<std::mutex>& lock, const OpPtr& op, Caller caller) {
  const bool counted = caller == Caller::WAITS_NOW;
  const Handle handle = op->handle;
  // The engine resolves every request by its deadline (a TIMEOUT verdict at worst); the margin only
  // guards against a stuck engine thread, so that no caller ever waits forever.
  Deadline limit = op->deadline + std::chrono::seconds(30) + seconds_to_duration(shutdown_bound_s(options_));
  // Fast path: rather than hand the request to the background thread and sleep until it is done (two
  // thread wake-ups per request), the caller runs the rounds itself while its request is pending, when
  // the round token is free; whoever holds the token wakes the waiting callers after each round.
  if (!counted) ++pacing_.callers_waiting;
  InterruptScope abort_scope(&EngineCore::abort_requested, this);  // for the rounds we drive
  while (!op->done) {
    // A fresh enqueue is news for the other ranks even when the last round found everybody waiting.
    bool can_progress = !pacing_.all_waiting || !callers_.queue_empty() || Clock::now() >= pacing_.next_cycle;
    if (pacing_.running() && can_progress && round_mu_.try_lock()) {
      lock.unlock();
      run_round();
      // release_token(), with the one lock we take anyway: other waiting callers may drive now.
      round_mu_.unlock();
      lock.lock();
      callers_.done_cv().notify_all();
      continue;
    }
    Deadline until = (pacing_.stopped() || can_progress) ? limit : std::min(limit, pacing_.next_cycle);
    bool timed_out = callers_.done_cv().wait_until(lock, interrupt_wake(until)) == std::cv_status::timeout;
    if (!op->done && interrupt_due()) {
      lock.unlock();  // the check may take the GIL: a Python thread holding it may be waiting for the mutex
      bool stop = interrupt_requested();
      lock.lock();
      if (stop && !op->done) {
        abort_ = true;  // the round-token holder stops the engine at its next check
        --pacing_.callers_waiting;
        callers_.forget(handle);
        throw HvdError(ErrorKind::INTERRUPTED,
                       "rank " + std::to_string(rank_) + ": the wait for " + op->label() + " was interrupted");
      }
    }
    if (timed_out && !op->done && Clock::now() >= limit) {
      --pacing_.callers_waiting;
      callers_.forget(handle);
      throw HvdError(ErrorKind::TIMEOUT, "rank " + std::to_string(rank_) + ": " + op->label() +
                                             " was not resolved by the engine well after its deadline");
    }
  }
  // The background thread left the rounds to us; hand it whatever was enqueued meanwhile.
  if (--pacing_.callers_waiting == 0 && (!callers_.queue_empty() || pacing_.self_waiting)) work_cv_.notify_one();
  callers_.forget(handle);
  if (op->failed) throw HvdError(op->error_kind, op->error);
  return std::move(op->result);
}

OpPtr EngineCore::make_set_change(const std::string& what) {
  auto op = std::make_shared<Op>();
  op->desc.name = callers_.set_change_name(what);
  op->timeout_s = options_.timeout_s;
  op->enqueued = Clock::now();
  op->deadline = deadline_after(op->timeout_s);
  return op;
}

int EngineCore::add_process_set(const std::vector<int>& ranks) {
  PHV_CHECK_ARG(options_.dynamic_process_sets,
                "add_process_set() needs dynamic process sets: set HOROVOD_DYNAMIC_PROCESS_SETS=1 on every rank");
  std::vector<int> sorted = sets_.normalise(ranks);
  OpPtr op = make_set_change("add_process_set");
  op->desc.kind = kDescAddProcessSet;
  op->desc.set_ranks = sorted;
  return static_cast<int>(wait(submit(op)).value);
}

void EngineCore::remove_process_set(int id) {
  PHV_CHECK_ARG(options_.dynamic_process_sets,
                "remove_process_set() needs dynamic process sets: set HOROVOD_DYNAMIC_PROCESS_SETS=1 on every rank");
  PHV_CHECK_ARG(id != 0, "the global process set (id 0) cannot be removed");
  PHV_CHECK_ARG(sets_.exists(id), "no process set with id ", id);
  OpPtr op = make_set_change("remove_process_set");
  op->desc.kind = kDescRemoveProcessSet;
  op->desc.removed_set = id;
  wait(submit(op));
}

void EngineCore::start_timeline(const std::string& path, bool mark_cycles) {
  PHV_CHECK_ARG(!path.empty(), "start_timeline: empty path");
  if (rank_ == 0) timeline_.start(path, mark_cycles);  // the coordinator alone writes the trace
}

void EngineCore::stop_timeline() {
  if (rank_ == 0) timeline_.stop();
}

bool EngineCore::shutdown() {
  {
    std::lock_guard<std::mutex> lock(callers_.mutex());
    if (!thread_.joinable()) return true;
    pacing_.ask_stop();
    work_cv_.notify_all();
  }
  std::unique_lock<std::mutex> lock(callers_.mutex());
  bool exited =
      exit_cv_.wait_until(lock, deadline_after(shutdown_bound_s(options_)), [&] { return pacing_.thread_exited; });
  if (!exited) {
    pacing_.life = EngineLife::STOPPED;
    if (pacing_.stop_reason.empty()) {
      pacing_.stop_reason = "pyhorovod has been shut down (the engine thread did not stop in time)";
    }
    lock.unlock();
    log(LogLevel::WARNING, "engine thread did not stop within ", shutdown_bound_s(options_),
        " s of shutdown(); abandoning it (a peer is probably unresponsive)");
    thread_.detach();
    return false;
  }
  lock.unlock();
  thread_.join();
  timeline_.stop();
  return true;
}

}  // namespace phv
