// Runs one agreed unit (a single request, or several fused allreduces) on this rank's Comm of the set:
// copies into and out of the fusion buffer, applies prescale/postscale (AVERAGE = SUM then 1/size),
// calls the algorithm, and fills each request's Result. Never writes to an out-of-place request's input.
// A fused Adasum unit passes the requests' element counts to adasum_allreduce, whose dot products are
// per request (per tensor), not over the fusion buffer.
//
// A rank that has joined and lacks some of the unit's requests (entry.op == nullptr) contributes the
// reduction's identity for them and discards the result.
//
// CUDA units (device >= 0) go to the GpuBackend (gpu_backend.h) instead, which orders itself after each
// request's producer stream and returns when its work is complete. Their copies: a fused allreduce does
// k device-to-device copies into the backend's fusion buffer and k out; allgather/alltoall write into
// device memory from GpuBackend::allocate that the Result owns (Result.device_output): no host copies.
// The alltoall splits (host int64s) are exchanged over the host transport first.
//
// Copies: a lone allreduce copies input -> output once when out of place, then reduces in place; a
// fused unit copies every input in and every result out (2 copies of each tensor).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>
#include "algorithms/hierarchy.h"
#include "algorithms/tuning.h"
#include "backends/gpu_backend.h"
#include "engine/op.h"
#include "engine/process_set.h"
#include "engine/timeline.h"

namespace phv {

struct UnitEntry {
  const Desc* agreed = nullptr;
  const std::vector<int64_t>* dim0s = nullptr;
  Op* op = nullptr;  // nullptr: this rank joined and contributes the identity
};

// Shared by the host and the CUDA path (executor.cc, executor_gpu.cc).
ReduceOp effective_op(ReduceOp op);                 // AVERAGE -> SUM: the 1/size is a postscale
double effective_postscale(const Desc& d, int size);  // d.postscale, divided by size for AVERAGE
std::vector<int64_t> with_dim0(const std::vector<int64_t>& shape, int64_t dim0);

// An alltoall's transfer: every rank first learns how many rows each peer sends it (one int64 per pair,
// over the host transport), then bytes per peer follow from the rows of row_bytes each.
struct AlltoallPlan {
  std::vector<size_t> send_bytes, recv_bytes;
  std::vector<int64_t> recv_splits;
  int64_t rows = 0;  // rows received in all
};
AlltoallPlan plan_alltoall(const Comm& comm, const Request& req, size_t row_bytes, Deadline deadline);

class Executor {
 public:
  Executor(const Tuning& tuning, Timeline& timeline) : tuning_(tuning), timeline_(timeline) {}

  // Throws HvdError from the algorithms (the caller adds the request context).
  void run(const Comm& comm, const std::vector<UnitEntry>& unit, Deadline deadline);
  // Published once by the first CUDA enqueue (another thread), before any CUDA unit can run.
  void set_gpu(GpuBackend* gpu) { gpu_.store(gpu, std::memory_order_release); }
  // Before the first unit: the host layout and the flat/two-level model (algorithms/hierarchy.h).
  void set_hierarchy(const Hierarchy& hierarchy) { hierarchy_ = hierarchy; }
  // From any thread: knobs the next unit uses (autotune). mode < -1 / segment_bytes < 0: unchanged.
  // Every rank must set the same values before it submits the requests they should apply to.
  void set_knobs(int allreduce_mode, int64_t segment_bytes);

 private:
  void allreduce(const Comm& comm, const std::vector<UnitEntry>& unit, Deadline deadline);
  void allgather(const Comm& comm, const UnitEntry& e, Deadline deadline);
  void broadcast(const Comm& comm, const UnitEntry& e, Deadline deadline);
  void alltoall(const Comm& comm, const UnitEntry& e, Deadline deadline);
  void reducescatter(const Comm& comm, const UnitEntry& e, Deadline deadline);
  void run_gpu(GpuBackend& gpu, const Comm& comm, const std::vector<UnitEntry>& unit, Deadline deadline);
  uint8_t* scratch(size_t bytes);
  void apply_knobs();
  const TwoLevel* two_level(const Comm& comm);  // nullptr: comm is not the whole job, or one host
  // allreduce() or hierarchical_allreduce(), by the hierarchy's mode and the model.
  void reduce(const Comm& comm, void* buf, size_t count, DataType dt, ReduceOp op, Deadline deadline, double post);
  void spans(const std::vector<UnitEntry>& unit, const std::string& name, bool begin);

  Tuning tuning_;
  Timeline& timeline_;
  std::vector<uint8_t> fusion_;  // grows to the largest unit, never shrinks: no allocation per cycle
  std::vector<size_t> sizes_;
  std::vector<size_t> counts_;  // elements per request of a fused Adasum unit
  std::atomic<GpuBackend*> gpu_{nullptr};
  Hierarchy hierarchy_;
  TwoLevel two_level_;
  int two_level_state_ = 0;  // 0 not built yet, 1 built, -1 not possible
  std::mutex knobs_mu_;
  std::atomic<bool> knobs_pending_{false};
  int pending_mode_ = -2;
  int64_t pending_segment_ = -1;
};

}  // namespace phv
