#include "backends/gpu_collective_backend.h"

#include "common/error.h"

namespace phv {

void GpuCollectiveBackend::allreduce(const Comm& comm, const std::vector<BufferEntry>& entries, DataType dt,
                                     ReduceOp op, double prescale, double postscale, const CallContext& ctx) {
  ctx.mark(Phase::REDUCE, Edge::BEGIN);
  gpu_.allreduce(comm, entries, dt, op, prescale, postscale, ctx.stream);
  ctx.mark(Phase::REDUCE, Edge::END);
}

void GpuCollectiveBackend::allgatherv(const Comm& comm, const void* send, void* recv,
                                      const std::vector<size_t>& bytes_per_rank, const CallContext& ctx) {
  gpu_.allgatherv(comm, send, recv, bytes_per_rank, ctx.stream);
}

void GpuCollectiveBackend::broadcast(const Comm& comm, const void* input, void* buf, size_t bytes, int root,
                                     const CallContext& ctx) {
  if (input != buf) throw_error(ErrorKind::INTERNAL, "a CUDA broadcast reached the backend out of place");
  gpu_.broadcast(comm, buf, bytes, root, ctx.stream);
}

void GpuCollectiveBackend::alltoallv(const Comm& comm, const void* send, const std::vector<size_t>& send_bytes,
                                     void* recv, const std::vector<size_t>& recv_bytes, const CallContext& ctx) {
  gpu_.alltoallv(comm, send, send_bytes, recv, recv_bytes, ctx.stream);
}

void GpuCollectiveBackend::reducescatter(const Comm& comm, const void* input, void* output,
                                         const std::vector<size_t>& counts, DataType dt, ReduceOp op, double prescale,
                                         double postscale, const CallContext& ctx) {
  gpu_.reducescatter(comm, input, output, counts, dt, op, prescale, postscale, ctx.stream);
}

}  // namespace phv
