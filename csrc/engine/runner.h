// The round-token holder's side of the engine: the requests this rank has taken from the queue
// (pending, incomplete groups, the one join), the RankMessage built from them each round, and the
// execution of the agreed ResponseList (inline results, units through the Executor, process-set changes,
// cache updates), completing or failing each request through the front desk (callers.h).
//
// Touched only by the round-token holder, except check_gpu() (callers, at enqueue) and set_knobs().
#pragma once
#include <atomic>
#include <string>
#include <unordered_map>
#include <vector>
#include "algorithms/tuning.h"
#include "engine/callers.h"
#include "engine/engine.h"
#include "engine/engine_pacing.h"
#include "engine/executor.h"
#include "engine/gpu_setup.h"
#include "engine/messages.h"
#include "engine/process_set.h"
#include "engine/recycling_map.h"
#include "engine/response_cache.h"
#include "engine/timeline.h"
#include "transport/transfer_watch.h"

namespace phv {

class Runner {
 public:
  // sets, cache and timeline are the engine's agreed state (shared with the control round); abort is the
  // engine's interrupt flag, raised when a transfer was interrupted. All must outlive the runner.
  Runner(int rank, int size, const Tuning& tuning, const EngineOptions& options, ProcessSetRegistry& sets,
         ResponseCache& cache, Timeline& timeline, Callers& callers, std::atomic<bool>& abort);

  GpuSetup& gpu() { return gpu_; }
  void set_knobs(int hierarchical_allreduce, int64_t segment_bytes) {
    executor_.set_knobs(hierarchical_allreduce, segment_bytes);
  }

  // Takes the requests enqueued since the last round (leaves `taken` empty).
  void take(std::vector<OpPtr>& taken);
  // Builds this round's message (stop.asked: this rank's user asked to shut down) and the deadline of
  // its exchange. Returns whether this rank reported requests that have not run yet.
  bool build_message(const RoundStop& stop, Deadline& round_deadline);
  const RankMessage& message() const { return msg_; }

  struct Outcome {
    bool waiting = false;      // this rank still has reported requests that did not run
    bool all_waiting = false;  // the coordinator said nobody can progress without an enqueue
    bool shutdown = false;     // every rank stops after this round
  };
  // Runs the agreed list. Throws (after failing the requests concerned) when a unit failed in a way that
  // stops the engine.
  Outcome execute(const ResponseList& resp);

  // The exchange failed: every reported request and the join fail with `message`.
  void fail_reported(ErrorKind kind, const std::string& message);
  // The engine stops: hands every request still held over to `victims` (pending, groups, the join).
  void release_all(std::vector<OpPtr>& victims);
  void fail(const OpPtr& op, ErrorKind kind, const std::string& message);
  // A unit or an exchange failed (the engine stops): the kind its requests get. A transport TIMEOUT
  // becomes PEER_LOST: the streams are broken and the engine is gone, as for the ranks that see our
  // sockets close (HorovodTimeoutError is kept for a request that timed out in a working engine).
  ErrorKind stop_kind(ErrorKind transport_kind);
  // express_hit: the round was an express round; express_miss: an express round missed, then the star ran.
  void count_round(bool express_hit, bool express_miss) {
    ++stats_.rounds;
    stats_.express += express_hit ? 1 : 0;
    stats_.express_missed += express_miss ? 1 : 0;
  }
  void log_stats() const;  // at INFO when the engine stops (tests check fusion and cache hits with it)

  const std::unordered_map<Key, OpPtr, KeyHash>& pending() const { return pending_; }

 private:
  // d's key in tmp_key_, valid until the next call: a key built afresh copies the name, which allocates
  // for names past 15 bytes (the reusable synchronous name is 21), three times per request.
  const Key& key_of(const Desc& d);
  OpPtr find_pending(const Desc& d);
  void run_unit(const ResponseList& resp, size_t begin, size_t end);
  bool refuse_without_gpu(const Desc& first);
  void apply_set_change(const ResponseItem& item, Op* op);
  void update_cache(const ResponseList& resp);
  static std::string describe_unit(const void* runner);  // TransferWatch text

  int rank_;
  const EngineOptions& options_;
  ProcessSetRegistry& sets_;
  ResponseCache& cache_;
  Timeline& timeline_;
  Callers& callers_;
  std::atomic<bool>& abort_;
  Executor executor_;
  GpuSetup gpu_;

  RecyclingMap<Key, OpPtr, KeyHash> pending_;  // by name: the requests submitted and not finished
  std::unordered_map<int64_t, std::vector<OpPtr>> groups_;
  OpPtr join_op_;
  TransferWatch unit_watch_;  // the stall limits of the data plane
  uint64_t unit_seq_ = 0;     // the running unit's op number in its process set
  struct {
    uint64_t rounds = 0, cached = 0, full = 0, errors = 0, units = 0, fused = 0, inlined = 0, express = 0,
             express_missed = 0;
  } stats_;
  RankMessage msg_;
  std::vector<UnitEntry> unit_;
  std::vector<OpPtr> unit_ops_;
  std::vector<OpPtr> finished_;
  Key tmp_key_;  // key_of()'s
};

}  // namespace phv
