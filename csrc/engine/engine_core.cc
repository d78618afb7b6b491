// EngineCore, the callers' side: enqueue (validation, naming, duplicate check), poll, wait, process-set
// changes, timeline control and shutdown. The background thread's side is in engine_loop.cc.
#include "engine/engine_core.h"

#include <algorithm>

#include "backends/gpu_backend.h"
#include "common/interrupt.h"
#include "common/logging.h"
#include "common/sum_of_squares.h"
#include "rendezvous/memory_store.h"
#include "engine/validate.h"

namespace phv {

namespace {

// How long shutdown() waits for the background thread: long enough for the round that carries the
// shutdown flag (or a collective already running), short enough that a job never hangs on exit.
double shutdown_bound_s(const EngineOptions& o) { return std::max(1.0, std::min(o.timeout_s, 30.0)) + 1.0; }

}  // namespace

EngineCore::EngineCore(Transport& transport, const Tuning& tuning, const EngineOptions& options)
    : transport_(transport), options_(options), rank_(transport.rank()), size_(transport.size()),
      sets_(&transport, transport.size(), transport.rank()), cache_(options.cache_capacity),
      executor_(tuning, timeline_) {
  PHV_CHECK_ARG(options.cycle_time_ms >= 0, "cycle_time_ms must be >= 0, got ", options.cycle_time_ms);
  PHV_CHECK_ARG(options.timeout_s > 0, "timeout_s must be > 0, got ", options.timeout_s);
  PHV_CHECK_ARG(options.fusion_threshold_bytes >= 0, "fusion_threshold_bytes must be >= 0");
  PHV_CHECK_ARG(options.fusion_max_tensor_bytes >= 0, "fusion_max_tensor_bytes must be >= 0");
  for (const auto& ranks : options.process_sets) sets_.add(sets_.normalise(ranks));
  if (rank_ == 0) {
    coordinator_ = std::make_unique<Coordinator>(size_, sets_, cache_, timeline_, options_, gpu_backend_built());
    msgs_.resize(static_cast<size_t>(size_));
    slots_.assign(static_cast<size_t>(size_), std::vector<uint8_t>(kSlotBytes));
    if (!options.timeline_path.empty()) {
      try {
        timeline_.start(options.timeline_path, options.timeline_mark_cycles);
      } catch (const HvdError& e) {
        // Only rank 0 writes it: failing here would leave the other ranks waiting for us.
        log(LogLevel::ERROR, "timeline disabled: ", e.what());
      }
    }
  }
  resp_buf_.resize(kSlotBytes);
  // The stall inspector's limits, applied to bytes in flight too (transfer_watch.h).
  double warn_s = options.stall_check_disable ? 0 : std::max(0.0, options.stall_check_s);
  double fail_s = options.stall_check_disable ? 0 : std::max(0.0, options.stall_shutdown_s);
  unit_watch_ = TransferWatch{warn_s, fail_s, &EngineCore::describe_unit, this};
  round_watch_ = TransferWatch{warn_s, fail_s, &EngineCore::describe_round, this};
  executor_.set_hierarchy(options.hierarchy);
  next_cycle_ = Clock::now();
  thread_ = std::thread([this] { loop(); });
}

void EngineCore::set_knobs(const EngineKnobs& knobs) {
  PHV_CHECK_ARG(knobs.hierarchical_allreduce <= 1, "hierarchical_allreduce must be -1, 0 or 1");
  if (knobs.cycle_time_ms >= 0) {
    std::lock_guard<std::mutex> lock(mu_);
    options_.cycle_time_ms = knobs.cycle_time_ms;
  }
  if (knobs.fusion_threshold_bytes >= 0) pending_fusion_threshold_.store(knobs.fusion_threshold_bytes);
  executor_.set_knobs(knobs.hierarchical_allreduce, knobs.segment_bytes);
}

EngineCore::~EngineCore() {
  if (thread_.joinable()) shutdown();
}

Handle EngineCore::submit(const OpPtr& op, bool sync) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_ || stop_requested_) {
    throw HvdError(ErrorKind::SHUTDOWN, "rank " + std::to_string(rank_) + ": cannot run " +
                                            kind_name(op->desc.kind) + " '" + op->desc.name + "': " +
                                            (stop_reason_.empty() ? "pyhorovod has been shut down" : stop_reason_));
  }
  if (op->desc.kind == static_cast<uint8_t>(OpType::JOIN)) {
    PHV_CHECK_ARG(!join_in_flight_, "join: this rank already has a join() in flight");
    join_in_flight_ = true;
  } else {
    auto it = in_flight_.find(op->desc.key());
    PHV_CHECK_ARG(it == in_flight_.end(), kind_name(op->desc.kind), ": a request named '", op->desc.name, "'",
                  op->desc.set != 0 ? " in process set " + std::to_string(op->desc.set) : std::string(),
                  " is already in flight on rank ", rank_, "; names must be unique among pending requests");
  }
  op->handle = next_handle_++;
  op->seq = next_seq_++;
  if (op->desc.kind != static_cast<uint8_t>(OpType::JOIN)) in_flight_.emplace(op->desc.key(), op->handle);
  handles_.emplace(op->handle, op);
  // Wake the background thread on the first enqueue of a burst only: it takes the whole queue. A
  // synchronous caller drives the round itself, so waking the thread would only cost a context switch.
  bool first = incoming_.empty();
  incoming_.push_back(op);
  if (first) {
    incoming_since_ = op->enqueued;
    if (!sync) work_cv_.notify_one();
  }
  if (sync) ++callers_waiting_;
  return op->handle;
}

Handle EngineCore::enqueue(Request request, double timeout_s) {
  OpPtr op = make_op(std::move(request), timeout_s);
  if (op->req.fill_from != nullptr) {
    size_t n = static_cast<size_t>(op->desc.count());
    if (op->req.dtype == DataType::FLOAT32) {
      float* dst = static_cast<float*>(op->req.output);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(op->req.fill_from[i]);
    } else {
      std::copy(op->req.fill_from, op->req.fill_from + n, static_cast<double*>(op->req.output));
    }
  }
  if (op->req.sumsq_in == nullptr) return submit(op);
  // Read before submit: once queued, an in-place allreduce may overwrite the input. Added only once the
  // request is accepted, so a rejected request leaves the caller's sum as it was.
  double sq = sum_of_squares(op->req.input, static_cast<size_t>(op->desc.count()), op->req.dtype);
  Handle h = submit(op);
  *op->req.sumsq_in += sq;
  return h;
}

Result EngineCore::run_sync(Request request, double timeout_s) {
  OpPtr op = make_op(std::move(request), timeout_s);
  Handle handle = submit(op, true);
  std::unique_lock<std::mutex> lock(mu_);
  return wait_locked(lock, handle, true);
}

EngineCore::OpPtr EngineCore::make_op(Request request, double timeout_s) {
  auto op = std::make_shared<Op>();
  op->timeout_s = timeout_s > 0 ? timeout_s : options_.timeout_s;
  if (request.name.empty()) {
    // Like Horovod's "allreduce.noname.N", counted per op type, so ranks that make the same unnamed
    // calls of each type in the same order agree on the names.
    size_t type = static_cast<size_t>(request.type);
    PHV_CHECK_ARG(type < next_auto_name_.size(), "unknown op type ", type);
    std::lock_guard<std::mutex> lock(mu_);
    request.name = std::string(op_type_name(request.type)) + ".noname." + std::to_string(++next_auto_name_[type]);
  }
  if (request.type == OpType::JOIN) {
    PHV_CHECK_ARG(request.process_set == 0, "join: only the global process set (0) is supported, got ",
                  request.process_set);
    op->desc.kind = kDescJoin;
    op->desc.name = request.name;
  } else {
    std::pair<int, int> where = sets_.check_member(request.process_set, op_type_name(request.type));
    op->desc = validate_request(request, where.first);
    op->set_index = where.second;
    if (request.device >= 0 && request.type != OpType::BARRIER) check_gpu(request);
  }
  op->req = std::move(request);
  op->enqueued = Clock::now();
  op->deadline = deadline_after(op->timeout_s);
  return op;
}

void EngineCore::check_gpu(const Request& request) {
  // Refused here, per request: NCCL cannot do these, and the engine's fallbacks (identity fill for
  // joined ranks, host-side copies) assume host memory.
  PHV_CHECK_ARG(request.dtype != DataType::INT16, op_type_name(request.type), " '", request.name,
                "': int16 CUDA tensors are not supported (NCCL has no int16)");
  PHV_CHECK_ARG(request.type != OpType::BROADCAST || request.input == request.output, "broadcast '",
                request.name, "': CUDA tensors are broadcast in place (input must equal output)");
  std::lock_guard<std::mutex> lock(gpu_mu_);
  if (gpu_) {
    PHV_CHECK_ARG(request.device == gpu_device_, op_type_name(request.type), " '", request.name, "': rank ",
                  rank_, " runs its CUDA collectives on cuda:", gpu_device_, ", got a tensor on cuda:",
                  request.device, " (one device per process)");
    return;
  }
  if (!gpu_factory_) {
    // Engines without a TcpBackend (C++ tests): a single rank needs no rendezvous, so a private
    // in-memory store will do; several ranks would need the real one.
    PHV_CHECK_ARG(size_ == 1, "this engine has no rendezvous store for the GPU backend");
    gpu_store_ = std::make_unique<MemoryStore>();
    gpu_factory_ = [this](int device) {
      GpuBackendOptions gpu;
      gpu.global_rank = rank_;
      gpu.device = device;
      gpu.timeout_s = options_.timeout_s;
      gpu.tuning = options_.connect.tuning;
      gpu.path = parse_gpu_path_request(options_.gpu_path);
      return make_gpu_backend(*gpu_store_, "phv", gpu);
    };
  }
  // A backend that cannot be made (no CUDA device, a build without NCCL) is not an argument error: the
  // request still goes through negotiation, so a rank that used a CPU tensor is told about the mismatch,
  // and otherwise it fails alone in run_unit() with this message (the engine keeps working).
  try {
    gpu_ = gpu_factory_(request.device);
    gpu_device_ = request.device;
    executor_.set_gpu(gpu_.get());
  } catch (const HvdError& e) {
    gpu_error_ = e.what();
  }
}

bool EngineCore::poll(Handle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = handles_.find(handle);
  PHV_CHECK_ARG(it != handles_.end(), "unknown handle ", handle, " (already waited for?)");
  return it->second->done;
}

Result EngineCore::wait(Handle handle) {
  std::unique_lock<std::mutex> lock(mu_);
  return wait_locked(lock, handle, false);
}

Result EngineCore::wait_locked(std::unique_lock<std::mutex>& lock, Handle handle, bool counted) {
  auto it = handles_.find(handle);
  if (it == handles_.end() && counted) --callers_waiting_;
  PHV_CHECK_ARG(it != handles_.end(), "unknown handle ", handle, " (already waited for?)");
  OpPtr op = it->second;
  // The engine resolves every request by its deadline (a TIMEOUT verdict at worst); the margin only
  // guards against a stuck engine thread, so that no caller ever waits forever.
  Deadline limit = op->deadline + std::chrono::seconds(30) +
                   std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(shutdown_bound_s(options_)));
  // Fast path: rather than hand the request to the background thread and sleep until it is done (two
  // thread wake-ups per request), the caller runs the rounds itself while its request is pending, when
  // the round token is free; whoever holds the token wakes the waiting callers after each round.
  if (!counted) ++callers_waiting_;
  InterruptScope abort_scope(&EngineCore::abort_requested, this);  // for the rounds we drive
  while (!op->done) {
    // A fresh enqueue is news for the other ranks even when the last round found everybody waiting.
    bool can_progress = !all_waiting_ || !incoming_.empty() || Clock::now() >= next_cycle_;
    if (!stopped_ && !stop_requested_ && can_progress && round_mu_.try_lock()) {
      lock.unlock();
      run_round();
      release_token();
      lock.lock();
      continue;
    }
    Deadline until = (stopped_ || can_progress) ? limit : std::min(limit, next_cycle_);
    bool timed_out = done_cv_.wait_until(lock, interrupt_wake(until)) == std::cv_status::timeout;
    if (!op->done && interrupt_due()) {
      lock.unlock();  // the check may take the GIL: a Python thread holding it may be waiting for mu_
      bool stop = interrupt_requested();
      lock.lock();
      if (stop && !op->done) {
        abort_ = true;  // the round-token holder stops the engine at its next check
        --callers_waiting_;
        handles_.erase(handle);
        throw HvdError(ErrorKind::INTERRUPTED, "rank " + std::to_string(rank_) + ": the wait for " + op->label() +
                                                   " was interrupted");
      }
    }
    if (timed_out && !op->done && Clock::now() >= limit) {
      --callers_waiting_;
      handles_.erase(handle);
      throw HvdError(ErrorKind::TIMEOUT, "rank " + std::to_string(rank_) + ": " + op->label() +
                                             " was not resolved by the engine well after its deadline");
    }
  }
  // The background thread left the rounds to us; hand it whatever was enqueued meanwhile.
  if (--callers_waiting_ == 0 && (!incoming_.empty() || waiting_)) work_cv_.notify_one();
  handles_.erase(handle);
  if (op->failed) throw HvdError(op->error_kind, op->error);
  return std::move(op->result);
}

int EngineCore::add_process_set(const std::vector<int>& ranks) {
  PHV_CHECK_ARG(options_.dynamic_process_sets,
                "add_process_set() needs dynamic process sets: set HOROVOD_DYNAMIC_PROCESS_SETS=1 on every rank");
  std::vector<int> sorted = sets_.normalise(ranks);
  auto op = std::make_shared<Op>();
  op->desc.kind = kDescAddProcessSet;
  op->desc.set_ranks = sorted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    op->desc.name = "add_process_set." + std::to_string(++next_set_change_);
  }
  op->timeout_s = options_.timeout_s;
  op->enqueued = Clock::now();
  op->deadline = deadline_after(op->timeout_s);
  return static_cast<int>(wait(submit(op)).value);
}

void EngineCore::remove_process_set(int id) {
  PHV_CHECK_ARG(options_.dynamic_process_sets,
                "remove_process_set() needs dynamic process sets: set HOROVOD_DYNAMIC_PROCESS_SETS=1 on every rank");
  PHV_CHECK_ARG(id != 0, "the global process set (id 0) cannot be removed");
  PHV_CHECK_ARG(sets_.exists(id), "no process set with id ", id);
  auto op = std::make_shared<Op>();
  op->desc.kind = kDescRemoveProcessSet;
  op->desc.removed_set = id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    op->desc.name = "remove_process_set." + std::to_string(++next_set_change_);
  }
  op->timeout_s = options_.timeout_s;
  op->enqueued = Clock::now();
  op->deadline = deadline_after(op->timeout_s);
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
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return true;
    stop_requested_ = true;
    work_cv_.notify_all();
  }
  std::unique_lock<std::mutex> lock(mu_);
  bool exited = exit_cv_.wait_until(lock, deadline_after(shutdown_bound_s(options_)), [&] { return thread_exited_; });
  if (!exited) {
    stopped_ = true;
    if (stop_reason_.empty()) stop_reason_ = "pyhorovod has been shut down (the engine thread did not stop in time)";
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
