// The engine over an already connected Transport: what phv::Engine runs on top of a TcpBackend, and what
// the C++ tests run with an in-memory transport (threads as ranks).
//
// Three rooms, each owning its state: the front desk (callers.h: handles, names, the queue), one control
// round (control_round.h: the exchange with the coordinator) and the runner (runner.h: pending requests,
// the message, execution). The core keeps the background thread, the round token, the pacing state
// (engine_pacing.h) and stopping, plus the agreed state the round and the runner share (process sets,
// response cache, timeline).
//
// Threads: callers enqueue/poll/wait; rounds are run by whoever holds the round token. A round = build
// this rank's RankMessage, one gather + broadcast with the coordinator (global rank 0), execute the
// agreed list. The background thread starts a round at once when something was enqueued, or when this
// rank has requests the others have not all submitted yet and the last round did not say "all waiting"
// (it then blocks in the transport until the others' next round, so no sleep ever delays a ready
// request); otherwise it sleeps until an enqueue or cycle_time_ms after the last round ended (its
// exchange and the work it agreed). A caller of wait() whose request is pending takes the token itself
// when it is free and runs the rounds on its own thread: a synchronous request then costs no thread
// hand-off at all (the lone small allreduce's fast path; see also inline_reduce.h).
//
// Failures: a mismatch or timeout fails only its request (on every rank). A transport failure leaves the
// byte streams in an unknown state, so the engine stops: the failed requests get the error with our rank,
// the op, name and sequence; everything else pending, and every later call, fails with SHUTDOWN quoting
// that first error.
#pragma once
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include "algorithms/tuning.h"
#include "engine/callers.h"
#include "engine/control_round.h"
#include "engine/engine_options.h"
#include "engine/engine_pacing.h"
#include "engine/gpu_setup.h"
#include "engine/prepared_request.h"
#include "engine/process_set.h"
#include "engine/response_cache.h"
#include "engine/runner.h"
#include "engine/timeline.h"
#include "transport/transfer_watch.h"

namespace phv {

class EngineCore {
 public:
  // transport must outlive the core (or, after a shutdown that timed out, be leaked with it).
  EngineCore(Transport& transport, const Tuning& tuning, const EngineOptions& options);
  ~EngineCore();

  Handle enqueue(Request request, double timeout_s);
  bool poll(Handle handle) { return callers_.poll(handle); }
  Result wait(Handle handle);
  // enqueue + wait in one step (the synchronous fast path): the background thread is not woken (the
  // caller runs the rounds itself) and the op never waits for a burst to gather. Same checks, names,
  // negotiation and errors as enqueue() followed by wait().
  Result run_sync(Request request, double timeout_s);
  // A request checked once (the same checks as enqueue(); it must be named: automatic names are per
  // call) and run many times by run_prepared(), which is run_sync() with this call's buffers.
  std::shared_ptr<PreparedRequest> prepare(Request request, double timeout_s);
  Result run_prepared(PreparedRequest& prepared, const void* input, void* output);
  int add_process_set(const std::vector<int>& ranks);
  void remove_process_set(int id);
  std::vector<int> process_set_ranks(int id) const { return sets_.ranks(id); }
  std::vector<int> process_set_ids() const { return sets_.ids(); }
  void start_timeline(const std::string& path, bool mark_cycles);
  void stop_timeline();
  void set_knobs(const EngineKnobs& knobs);  // any thread; see EngineKnobs
  const Hierarchy& hierarchy() const { return options_.hierarchy; }  // as set up at init
  // Returns true when the background thread has exited (false: it is stuck past the bound; the caller
  // must then leak this object rather than destroy it).
  bool shutdown();
  int64_t auto_name_floor(const std::string& prefix) const { return callers_.auto_name_floor(prefix); }
  int rank() const { return rank_; }
  int size() const { return size_; }
  // True once a caller's interrupt check said stop (common/interrupt.h): the engine then stops, as after
  // a transport failure -- the round-token holder within an interrupt slice -- so the caller's side
  // (pyhorovod) shuts it down and may init() afresh.
  bool interrupted() const { return abort_.load(); }
  // Set once, before the first enqueue. Without it, CUDA requests are refused at enqueue.
  void set_gpu_factory(GpuFactory factory) { runner_.gpu().set_factory(std::move(factory)); }

 private:
  OpPtr make_op(Request request, double timeout_s);  // enqueue's validation and naming
  OpPtr make_set_change(const std::string& what);    // add/remove_process_set's request
  // Whether the calling thread is already counted in callers_waiting: run_sync counts itself when it
  // submits, so nobody wakes the background thread for a request its caller waits on right away.
  enum class Caller { WILL_WAIT_LATER, WAITS_NOW };
  // Under no lock; checks duplicates and the stopped state.
  Handle submit(const OpPtr& op, Caller caller = Caller::WILL_WAIT_LATER);
  Handle submit_locked(const OpPtr& op, Caller caller);  // submit() with the callers' mutex held
  Result wait_locked(std::unique_lock<std::mutex>& lock, const OpPtr& op, Caller caller);
  void loop();
  bool background_due() const;  // under the mutex: should the background thread run a round now?
  void run_round();             // holding round_mu_: one negotiation round and its execution
  void release_token();         // unlocks round_mu_ and wakes the callers that may want it
  void stop_all(ErrorKind kind, const std::string& reason);
  static bool abort_requested(void* core);            // the interrupt check of the round-token holder
  static std::string describe_round(const void* core);  // TransferWatch text

  EngineOptions options_;
  int rank_;
  int size_;
  std::atomic<bool> abort_{false};  // a caller was interrupted: whoever drives a round stops the engine
  std::atomic<int64_t> pending_fusion_threshold_{-1};  // set_knobs(): the coordinator takes it next round

  // The front desk, and under its mutex the pacing state and the background thread's wake-ups.
  Callers callers_;
  EnginePacing pacing_;
  std::condition_variable work_cv_;  // the background thread waits for enqueues
  std::condition_variable exit_cv_;  // shutdown() waits for the background thread

  // The agreed state: the same on every rank after every round (process sets have their own lock: read
  // by callers, changed by the round-token holder).
  ProcessSetRegistry sets_;
  ResponseCache cache_;
  Timeline timeline_;

  // The round token: whoever holds it (the background thread, or a caller of wait() whose request is
  // pending) runs rounds; everything below is touched only by the holder.
  std::mutex round_mu_;
  ControlRound round_;
  Runner runner_;
  std::vector<OpPtr> taken_;
  TransferWatch round_watch_;  // the stall limits of the exchanges
  RoundStop round_stop_;
  uint64_t rounds_ = 0;

  std::thread thread_;
};

}  // namespace phv
