// The engine over an already connected Transport: what phv::Engine runs on top of a TcpBackend, and what
// the C++ tests run with an in-memory transport (threads as ranks).
//
// Threads: callers enqueue/poll/wait; rounds are run by whoever holds the round token. A round = build
// this rank's RankMessage, one gather + broadcast with the coordinator (global rank 0), execute the
// agreed list. The background thread starts a round at once when something was enqueued, or when this
// rank has requests the others have not all submitted yet and the last round did not say "all waiting"
// (it then blocks in the transport until the others' next round, so no sleep ever delays a ready
// request); otherwise it sleeps until an enqueue or cycle_time_ms after the last round began. A caller
// of wait() whose request is pending takes the token itself when it is free and runs the rounds on its
// own thread: a synchronous request then costs no thread hand-off at all (the lone small allreduce's
// fast path; see also inline_reduce.h).
//
// Failures: a mismatch or timeout fails only its request (on every rank). A transport failure leaves the
// byte streams in an unknown state, so the engine stops: the failed requests get the error with our rank,
// the op, name and sequence; everything else pending, and every later call, fails with SHUTDOWN quoting
// that first error.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>
#include "algorithms/tuning.h"
#include "backends/gpu_backend.h"
#include "engine/engine_options.h"
#include "engine/executor.h"
#include "engine/handle.h"
#include "engine/messages.h"
#include "engine/negotiation.h"
#include "engine/op.h"
#include "engine/process_set.h"
#include "engine/response_cache.h"
#include "engine/timeline.h"
#include "transport/transfer_watch.h"

namespace phv {

// Makes this rank's GPU backend for a CUDA device (Engine: make_gpu_backend over the TcpBackend's store).
using GpuFactory = std::function<std::unique_ptr<GpuBackend>(int device)>;

class EngineCore {
 public:
  // transport must outlive the core (or, after a shutdown that timed out, be leaked with it).
  EngineCore(Transport& transport, const Tuning& tuning, const EngineOptions& options);
  ~EngineCore();

  Handle enqueue(Request request, double timeout_s);
  bool poll(Handle handle);
  Result wait(Handle handle);
  // enqueue + wait in one step (the synchronous fast path): the background thread is not woken (the
  // caller runs the rounds itself) and the op never waits for a burst to gather. Same checks, names,
  // negotiation and errors as enqueue() followed by wait().
  Result run_sync(Request request, double timeout_s);
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
  int64_t auto_name_floor(const std::string& prefix) const;  // see Engine::auto_name_floor
  int rank() const { return rank_; }
  int size() const { return size_; }
  // True once a caller's interrupt check said stop (common/interrupt.h): the engine then stops, as after
  // a transport failure -- the round-token holder within an interrupt slice -- so the caller's side
  // (pyhorovod) shuts it down and may init() afresh.
  bool interrupted() const { return abort_.load(); }
  // Set once, before the first enqueue. Without it, CUDA requests are refused at enqueue.
  void set_gpu_factory(GpuFactory factory) { gpu_factory_ = std::move(factory); }

 private:
  using OpPtr = std::shared_ptr<Op>;

  void check_gpu(const Request& request);  // enqueue of a CUDA request: argument checks, makes the backend
  OpPtr make_op(Request request, double timeout_s);  // enqueue's validation and naming
  // Under no lock; checks duplicates and the stopped state. sync: the caller waits right away (counted
  // in callers_waiting_ already, so nobody wakes the background thread for it).
  Handle submit(const OpPtr& op, bool sync = false);
  Result wait_locked(std::unique_lock<std::mutex>& lock, Handle handle, bool counted);
  void loop();
  bool background_due() const;     // under mu_: should the background thread run a round now?
  void run_round();                // holding round_mu_: one negotiation round and its execution
  void release_token();            // unlocks round_mu_ and wakes the callers that may want it
  void take_incoming();
  void build_message(Deadline& round_deadline);
  void exchange(Deadline deadline);
  void drive(Deadline deadline);
  void execute();
  void run_unit(size_t begin, size_t end);
  void apply_set_change(const ResponseItem& item, Op* op);
  void complete(const OpPtr& op);
  void fail(const OpPtr& op, ErrorKind kind, const std::string& message);
  void stop_all(ErrorKind kind, const std::string& reason);
  OpPtr find_pending(const Desc& d);
  void note_foreign_failure(const std::string& name);  // an error for a request this rank never made
  // A unit or an exchange failed (the engine stops): the kind its requests get. A transport TIMEOUT
  // becomes PEER_LOST: the streams are broken and the engine is gone, as for the ranks that see our
  // sockets close (HorovodTimeoutError is kept for a request that timed out in a working engine).
  ErrorKind stop_kind(ErrorKind transport_kind);
  static bool abort_requested(void* core);            // the interrupt check of the round-token holder
  static std::string describe_unit(const void* core);  // TransferWatch texts
  static std::string describe_round(const void* core);

  Transport& transport_;
  EngineOptions options_;
  int rank_;
  int size_;

  // Shared with callers, under mu_.
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // engine thread waits for enqueues
  std::condition_variable done_cv_;  // callers wait for completions
  std::vector<OpPtr> incoming_;
  Clock::time_point incoming_since_;  // when incoming_ last became non-empty
  std::unordered_map<Handle, OpPtr> handles_;
  std::unordered_map<Key, Handle, KeyHash> in_flight_;  // duplicate-name check
  Handle next_handle_ = 1;
  int64_t next_seq_ = 1;
  std::array<int64_t, 8> next_auto_name_{};  // per OpType
  std::unordered_map<std::string, int64_t> auto_name_floor_;  // by prefix: see engine/auto_name.h
  int64_t next_set_change_ = 0;
  bool join_in_flight_ = false;
  bool stop_requested_ = false;
  bool stopped_ = false;
  std::string stop_reason_;
  bool thread_exited_ = false;
  std::condition_variable exit_cv_;
  bool all_waiting_ = false;       // the last round said nobody can progress without an enqueue
  bool waiting_ = false;           // this rank reported requests that have not run yet
  int callers_waiting_ = 0;        // callers blocked in wait(): they run rounds themselves when they can
  Clock::time_point next_cycle_;
  std::atomic<bool> abort_{false};
  std::atomic<int64_t> pending_fusion_threshold_{-1};  // set_knobs(): the coordinator takes it next round  // a caller was interrupted: whoever drives a round stops the engine

  // The round token: whoever holds it (the background thread, or a caller of wait() whose request is
  // pending) runs rounds; everything below is touched only by the holder.
  std::mutex round_mu_;

  ProcessSetRegistry sets_;  // has its own lock (read by callers, changed by the round token holder)
  ResponseCache cache_;
  Timeline timeline_;
  Executor executor_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unordered_map<Key, OpPtr, KeyHash> pending_;
  std::unordered_map<int64_t, std::vector<OpPtr>> groups_;
  OpPtr join_op_;
  std::vector<OpPtr> taken_;
  TransferWatch unit_watch_, round_watch_;  // stall limits of the data plane and of the exchanges
  uint64_t unit_seq_ = 0;                   // the running unit's op number in its process set
  bool stop_req_seen_ = false;     // stop_requested_ as of this round
  bool stop_after_round_ = false;
  uint64_t round_ = 0;
  struct {
    uint64_t rounds = 0, cached = 0, full = 0, errors = 0, units = 0, fused = 0, inlined = 0;
  } stats_;  // logged at INFO when the thread stops (tests check fusion and cache hits with it)
  RankMessage msg_;
  std::vector<RankMessage> msgs_;            // coordinator: every rank's message
  std::vector<std::vector<uint8_t>> slots_;  // coordinator: receive buffers per rank
  std::vector<uint8_t> send_buf_;
  std::vector<uint8_t> resp_buf_;
  ResponseList resp_;
  std::vector<RequestId> completed_;
  std::vector<UnitEntry> unit_;
  std::vector<OpPtr> unit_ops_;
  std::vector<OpPtr> finished_;
  Key tmp_key_;

  // The GPU backend: created on the caller's thread by the first CUDA enqueue (a local step: no
  // communication, so a failure refuses only that request), for that request's device; used by the
  // executor on the round token holder's thread (published through mu_ by the submit that follows).
  GpuFactory gpu_factory_;
  std::unique_ptr<Store> gpu_store_;  // only without a factory (single-rank C++ tests)
  std::mutex gpu_mu_;
  std::unique_ptr<GpuBackend> gpu_;
  int gpu_device_ = -1;
  std::string gpu_error_;  // why the last attempt to make it failed

  std::thread thread_;
};

}  // namespace phv
