// What an engine is built from (EngineOptions, fixed at init) and what may change while it runs
// (EngineKnobs). Apart from the public Engine class so that the engine's own parts (the coordinator, the
// core) can take them without depending on the class that assembles them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/hierarchy.h"
#include "backends/backend.h"
#include "common/logging.h"

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
  std::string copy_path_adapt = "auto";        // PYHOROVOD_SHM_DIRECT_ADAPT (engine/copy_path_vote.h)
  std::string allreduce_path_adapt = "auto";   // PYHOROVOD_ALLREDUCE_SINGLE_COPY (engine/copy_path_vote.h)
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

}  // namespace phv
