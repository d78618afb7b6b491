// CollectiveBackend on CUDA buffers: each call goes to this rank's GpuBackend (NCCL or host-staged),
// which orders itself after ctx.stream and returns once its work is complete (its own timeout, not
// ctx.deadline, bounds it). Barriers carry no data and run on the host backend's transport.
// Holds no state of its own: cheap to make per unit.
#pragma once
#include "backends/collective_backend.h"
#include "backends/gpu_backend.h"

namespace phv {

class GpuCollectiveBackend : public CollectiveBackend {
 public:
  GpuCollectiveBackend(GpuBackend& gpu, CollectiveBackend& host) : gpu_(gpu), host_(host) {}

  // The phase marks: one REDUCE span around the whole call (its copies run inside the GpuBackend).
  void allreduce(const Comm& comm, const std::vector<BufferEntry>& entries, DataType dt, ReduceOp op,
                 double prescale, double postscale, const CallContext& ctx) override;
  void allgatherv(const Comm& comm, const void* send, void* recv, const std::vector<size_t>& bytes_per_rank,
                  const CallContext& ctx) override;
  // In place only (enqueue checks that input == buf).
  void broadcast(const Comm& comm, const void* input, void* buf, size_t bytes, int root,
                 const CallContext& ctx) override;
  void alltoallv(const Comm& comm, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes, const CallContext& ctx) override;
  void reducescatter(const Comm& comm, const void* input, void* output, const std::vector<size_t>& counts,
                     DataType dt, ReduceOp op, double prescale, double postscale, const CallContext& ctx) override;
  void barrier(const Comm& comm, const CallContext& ctx) override { host_.barrier(comm, ctx); }

 private:
  GpuBackend& gpu_;
  CollectiveBackend& host_;
};

}  // namespace phv
