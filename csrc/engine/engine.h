// The background engine: one thread per process owns the request queue, negotiates with the other ranks
// which named requests are ready everywhere, fuses small allreduces, runs collectives on the backend and
// completes handles. See design.md section 3.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include "algorithms/hierarchy.h"
#include "backends/backend.h"
#include "common/logging.h"
#include "engine/request.h"

namespace phv {

struct EngineOptions {
  ConnectOptions connect;
  int cross_rank = 0;
  int cross_size = 1;
  int64_t fusion_threshold_bytes = 128 << 20;  // HOROVOD_FUSION_THRESHOLD; 0 disables fusion
  // PYHOROVOD_FUSION_MAX_TENSOR_BYTES: a CPU tensor larger than this is reduced alone, in place, instead
  // of being copied into and out of the fusion buffer (fusion.h says why); 0: no cap (Horovod's rule).
  int64_t fusion_max_tensor_bytes = 1 << 20;
  double cycle_time_ms = 1.0;                  // HOROVOD_CYCLE_TIME
  int cache_capacity = 1024;                   // HOROVOD_CACHE_CAPACITY; 0 disables the response cache
  double stall_check_s = 60;                   // HOROVOD_STALL_CHECK_TIME_SECONDS
  double stall_shutdown_s = 0;                 // HOROVOD_STALL_SHUTDOWN_TIME_SECONDS; 0: never
  bool stall_check_disable = false;            // HOROVOD_STALL_CHECK_DISABLE
  std::string timeline_path;                   // HOROVOD_TIMELINE ("" off)
  bool timeline_mark_cycles = false;           // HOROVOD_TIMELINE_MARK_CYCLES
  double timeout_s = 1800;                     // PYHOROVOD_TIMEOUT_SECONDS: default per-collective deadline
  bool dynamic_process_sets = false;           // HOROVOD_DYNAMIC_PROCESS_SETS
  std::vector<std::vector<int>> process_sets;  // static process sets registered at init (ids 1, 2, ...)
  LogLevel log_level = LogLevel::WARNING;      // HOROVOD_LOG_LEVEL
  std::string gpu_path = "auto";               // PYHOROVOD_GPU_PATH: auto, nccl or staged (gpu_path.h)
  // Two-level collectives (algorithms/hierarchy.h): 1 on, 0 off, -1 chosen per size by the model.
  int hierarchical_allreduce = -1;             // HOROVOD_HIERARCHICAL_ALLREDUCE
  int hierarchical_allgather = -1;             // HOROVOD_HIERARCHICAL_ALLGATHER
  std::string host_name;                       // ranks with equal names share a host ("": gethostname())
  // Filled by Engine at init (engine/hierarchy_setup.h) from the three fields above; the engine core
  // takes it as given (its C++ tests set a layout directly).
  Hierarchy hierarchy;
};

// Knobs that may change while the engine runs (autotune). Negative: unchanged. Every rank must set the
// same values at the same point of its request sequence (e.g. right after a broadcast of them); they
// apply to the requests submitted after the call.
struct EngineKnobs {
  int64_t fusion_threshold_bytes = -1;
  double cycle_time_ms = -1;
  int hierarchical_allreduce = -2;  // -1 automatic, 0 off, 1 on; below -1: unchanged
  int64_t segment_bytes = -1;       // 0: from the model
};

using Handle = int64_t;

class Engine {
 public:
  explicit Engine(const EngineOptions& options);  // collective: connects and starts the thread
  ~Engine();                                      // shutdown() if still running

  // Returns at once. Throws HvdError(INVALID_ARGUMENT) for bad arguments or a name already in flight.
  Handle enqueue(Request request, double timeout_s /* <=0: options.timeout_s */);
  bool poll(Handle handle);
  // Waits (caller must not hold the GIL). Throws the request's error. Releases the handle. Wait and
  // run_sync give up with INTERRUPTED when the calling thread's interrupt check says stop (interrupt.h).
  Result wait(Handle handle);
  // enqueue() + wait() for a caller that waits right away (same checks and errors; caller must not
  // hold the GIL): the calling thread runs the negotiation round, the background thread is not woken.
  Result run_sync(Request request, double timeout_s /* <=0: options.timeout_s */);

  int add_process_set(const std::vector<int>& ranks);  // collective over all ranks; returns id
  void remove_process_set(int id);                      // collective over all ranks
  std::vector<int> process_set_ranks(int id) const;
  std::vector<int> process_set_ids() const;

  void start_timeline(const std::string& path, bool mark_cycles);
  void stop_timeline();
  void set_knobs(const EngineKnobs& knobs);
  const Hierarchy& hierarchy() const;  // the host layout and fitted model found at init

  // Stops the thread after the ranks agree (or after a timeout); pending handles fail with SHUTDOWN.
  void shutdown();
  // True once an interrupt check of a waiting caller said stop (EngineCore::interrupted): the engine is
  // stopping or stopped, and only shutdown() is left to call.
  bool interrupted() const;

  // The highest number n of an automatic name "<prefix>n" that another rank made and this rank never
  // submitted, learnt from that request's failure (0: none); see engine/auto_name.h.
  int64_t auto_name_floor(const std::string& prefix) const;

  int rank() const;
  int size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace phv
