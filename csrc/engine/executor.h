// Runs one agreed unit (a single request, or several fused allreduces) on this rank's Comm of the set,
// through a CollectiveBackend (backends/collective_backend.h): the HostBackend for host buffers, the
// GpuBackend (behind GpuCollectiveBackend) for CUDA ones (device >= 0). The executor turns the unit into
// the backend's call (AVERAGE = SUM then a postscale of 1/size; reducescatter's split of rows), gives
// allgather/alltoall their engine-allocated outputs, and fills each request's Result; the backend moves
// and reduces the bytes and picks the algorithms.
//
// A rank that has joined and lacks some of the unit's requests (entry.op == nullptr) contributes the
// reduction's identity for them and discards the result (host only: the coordinator refuses CUDA
// requests while ranks have joined).
//
// Outputs: allgather/alltoall write into host memory from the output pool (Result.output), or device
// memory from GpuBackend::allocate (Result.device_output): no extra copies. The alltoall splits (host
// int64s) are exchanged through the host backend first, whatever the tensors' device.
// The copies of the allreduce itself are each backend's (host_backend.h, gpu_backend.h).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>
#include "algorithms/hierarchy.h"
#include "algorithms/tuning.h"
#include "backends/collective_backend.h"
#include "backends/gpu_backend.h"
#include "backends/host_backend.h"
#include "engine/copy_path_vote.h"
#include "engine/op.h"
#include "engine/process_set.h"
#include "engine/timeline.h"

namespace phv {

struct UnitEntry {
  const Desc* agreed = nullptr;
  const std::vector<int64_t>* dim0s = nullptr;
  Op* op = nullptr;  // nullptr: this rank joined and contributes the identity
};

ReduceOp effective_op(ReduceOp op);                 // AVERAGE -> SUM: the 1/size is a postscale
double effective_postscale(const Desc& d, int size);  // d.postscale, divided by size for AVERAGE
std::vector<int64_t> with_dim0(const std::vector<int64_t>& shape, int64_t dim0);

// An alltoall's transfer: every rank first learns how many rows each peer sends it, then bytes per peer
// follow from the rows of row_bytes each. When the negotiation agreed that every member splits evenly
// (even_dim0s: the members' dim 0s, in set order), member r sends dim0s[r] / n rows to each rank and
// nothing is exchanged; otherwise the ranks exchange one int64 per pair through `host` first.
struct AlltoallPlan {
  std::vector<size_t> send_bytes, recv_bytes;
  std::vector<int64_t> recv_splits;
  int64_t rows = 0;  // rows received in all
};
AlltoallPlan plan_alltoall(CollectiveBackend& host, const Comm& comm, const Request& req, size_t row_bytes,
                           const std::vector<int64_t>* even_dim0s, Deadline deadline);

class Executor {
 public:
  Executor(const Tuning& tuning, Timeline& timeline, CopyPathVote::Policy copy_path = CopyPathVote::Policy::AUTO,
           CopyPathVote::Policy allreduce_path = CopyPathVote::Policy::AUTO)
      : host_(tuning), timeline_(timeline), copy_path_(copy_path), allreduce_path_(allreduce_path, kAllreduceKnob) {}

  // Throws HvdError from the backend (the caller adds the request context).
  void run(const Comm& comm, const std::vector<UnitEntry>& unit, Deadline deadline);
  // Published once by the first CUDA enqueue (another thread), before any CUDA unit can run.
  void set_gpu(GpuBackend* gpu) { gpu_.store(gpu, std::memory_order_release); }
  // Before the first unit: the host layout and the flat/two-level model (algorithms/hierarchy.h).
  void set_hierarchy(const Hierarchy& hierarchy) { host_.set_hierarchy(hierarchy); }
  // From any thread: knobs the next unit uses (autotune). mode < -1 / segment_bytes < 0: unchanged.
  // Every rank must set the same values before it submits the requests they should apply to.
  void set_knobs(int allreduce_mode, int64_t segment_bytes) { host_.set_knobs(allreduce_mode, segment_bytes); }
  // The engine thread's: the timings of the calls whose copy path the mode decides, and this rank's vote.
  CopyPathVote& copy_path() { return copy_path_; }
  const CopyPathVote& copy_path() const { return copy_path_; }
  // The same for the allreduces that may run as single copies (algorithms/direct_allreduce.cc).
  CopyPathVote& allreduce_path() { return allreduce_path_; }
  const CopyPathVote& allreduce_path() const { return allreduce_path_; }

 private:
  // gpu: the unit's GpuBackend when its buffers are CUDA ones (outputs are allocated there), else null.
  void dispatch(CollectiveBackend& backend, GpuBackend* gpu, const Comm& comm, const std::vector<UnitEntry>& unit,
                Deadline deadline);
  void allreduce(CollectiveBackend& backend, const Comm& comm, const std::vector<UnitEntry>& unit,
                 const CallContext& ctx);
  // These three return the mean bytes a rank sends each other one (the size the copy path depends on).
  size_t allgather(CollectiveBackend& backend, GpuBackend* gpu, const Comm& comm, const UnitEntry& e,
                   const CallContext& ctx);
  size_t alltoall(CollectiveBackend& backend, GpuBackend* gpu, const Comm& comm, const UnitEntry& e,
                  const CallContext& ctx);
  size_t reducescatter(CollectiveBackend& backend, const Comm& comm, const UnitEntry& e, const CallContext& ctx);

  HostBackend host_;
  Timeline& timeline_;
  CopyPathVote copy_path_;  // times the calls whose copy path the negotiation's mode decides
  CopyPathVote allreduce_path_;  // times the allreduces whose algorithm the negotiation's mode decides
  std::vector<BufferEntry> entries_;  // reused by every allreduce unit: no allocation per cycle
  std::atomic<GpuBackend*> gpu_{nullptr};
};

}  // namespace phv
