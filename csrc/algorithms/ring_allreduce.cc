// Pipelined ring allreduce: a reduce-scatter followed by an allgather, as one pass of 2(p-1) steps over
// p chunks, each chunk cut into segments (ring_schedule.h; the driver is ring_pipeline.cc).
//
// Copies, counted per rank for a buffer of M bytes over p ranks (the transport's own included):
//   shared memory (the default between ranks of one host): the sender copies every segment into the
//     shared ring once -- 2(p-1)/p * M bytes; in the reduce-scatter half the receiver reduces straight
//     from the ring into the buffer (a ReduceSink: one read-read-write pass, (p-1)/p * M, no copy), in
//     the allgather half it copies each segment out of the ring into the buffer, (p-1)/p * M. No
//     scratch memory, no other copy.
//   TCP: the kernel copies on both sides (send: buffer -> socket, 2(p-1)/p * M; receive: socket ->
//     scratch slot in the reduce half, socket -> buffer in the allgather half); one fused reduce pass
//     reads slot + buffer and writes the buffer; scratch is max_segments_in_flight segments.
// So: 0 extra copies on either path; the user buffer is reduced in place. Out of place (input given), the
// first step sends from input and each reduction reads input where it would read the buffer: still none.
// float16/bfloat16 are widened to float32 inside each segment's reduction (common/reduce.cc).
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/ring_pipeline.h"
#include "common/error.h"
#include "common/reduce.h"

namespace phv {

void ring_allreduce(const Comm& comm, void* buf, size_t count, DataType dt, ReduceOp op, const Tuning& tuning,
                    Deadline deadline, double postscale, const void* input) {
  PHV_CHECK_ARG(dtype_size(dt) != 0, "allreduce: unknown dtype ", static_cast<int>(dt));
  PHV_CHECK_ARG(op == ReduceOp::SUM || op == ReduceOp::MIN || op == ReduceOp::MAX || op == ReduceOp::PRODUCT,
                "allreduce: op ", reduce_op_name(op), " is not a kernel op (AVERAGE is SUM + scale)");
  if (count == 0) return;
  if (comm.size() <= 1) {
    if (input != nullptr) std::memcpy(buf, input, count * dtype_size(dt));
    if (postscale != 1.0) scale_buffer(buf, count, dt, postscale);
    return;
  }
  run_ring(comm, buf, even_chunks(count, comm.size()), dt, op, RingKind::ALLREDUCE, tuning, deadline, postscale, input);
}

}  // namespace phv
