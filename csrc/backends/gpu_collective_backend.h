// CollectiveBackend on CUDA buffers: each call goes to this rank's GpuBackend (NCCL or host-staged),
// which orders itself after ctx.stream and returns once its work is complete (its own timeout, not
// ctx.deadline, bounds it). Barriers carry no data and run on the host backend's transport.
// Holds no state of its own: cheap to make per unit.
#pragma once
#include "backends/collective_backend.h"
#include "backends/gpu_backend.h"
#include "common/enforce.h"
#include "common/error.h"

namespace phv {

class GpuCollectiveBackend : public CollectiveBackend {
 public:
  GpuCollectiveBackend(GpuBackend& gpu, CollectiveBackend& host) : gpu_(gpu), host_(host) {}

  // The phase marks: one REDUCE span around the whole call (its copies run inside the GpuBackend).
  void allreduce(const Comm& comm, const std::vector<BufferEntry>& entries, DataType dt, ReduceOp op, double prescale,
                 double postscale, const CallContext& ctx) override {
    ctx.mark(Phase::REDUCE, Edge::BEGIN);
    gpu_.allreduce(comm, entries, dt, op, prescale, postscale, ctx.stream);
    ctx.mark(Phase::REDUCE, Edge::END);
  }
  void allgatherv(const Comm& comm, const void* send, void* recv, const std::vector<size_t>& bytes_per_rank,
                  const CallContext& ctx) override {
    gpu_.allgatherv(comm, send, recv, bytes_per_rank, ctx.stream);
  }
  // In place only (enqueue checks that input == buf).
  void broadcast(const Comm& comm, const void* input, void* buf, size_t bytes, int root,
                 const CallContext& ctx) override {
    PHV_ENFORCE(input == buf, "a CUDA broadcast reached the backend out of place");
    gpu_.broadcast(comm, buf, bytes, root, ctx.stream);
  }
  void alltoallv(const Comm& comm, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes, const CallContext& ctx) override {
    gpu_.alltoallv(comm, send, send_bytes, recv, recv_bytes, ctx.stream);
  }
  void reducescatter(const Comm& comm, const void* input, void* output, const std::vector<size_t>& counts, DataType dt,
                     ReduceOp op, double prescale, double postscale, const CallContext& ctx) override {
    gpu_.reducescatter(comm, input, output, counts, dt, op, prescale, postscale, ctx.stream);
  }
  void barrier(const Comm& comm, const CallContext& ctx) override { host_.barrier(comm, ctx); }

 private:
  GpuBackend& gpu_;
  CollectiveBackend& host_;
};

}  // namespace phv
