// Pipelined ring allreduce: a reduce-scatter followed by an allgather, as one pass of 2(p-1) steps over
// p chunks, each chunk cut into segments (ring_schedule.h; the driver is ring_pipeline.cc).
//
// Copies per element (besides the transport's own): the user buffer is reduced in place. In the
// reduce-scatter half each received segment lands in a scratch slot (W segments of scratch in total) and
// one reduce pass reads slot + buffer and writes the buffer; in the allgather half segments are received
// straight into the buffer; sends read the buffer. So: 0 extra copies, 1 fused read-read-write per
// reduced element, and scratch memory of max_segments_in_flight segments.
// float16/bfloat16 are widened to float32 inside each segment's reduction (common/reduce.cc).
#include "algorithms/algorithms.h"
#include "algorithms/ring_pipeline.h"
#include "common/error.h"

namespace phv {

void ring_allreduce(const Comm& comm, void* buf, size_t count, DataType dt, ReduceOp op, const Tuning& tuning,
                    Deadline deadline) {
  PHV_CHECK_ARG(dtype_size(dt) != 0, "allreduce: unknown dtype ", static_cast<int>(dt));
  PHV_CHECK_ARG(op == ReduceOp::SUM || op == ReduceOp::MIN || op == ReduceOp::MAX || op == ReduceOp::PRODUCT,
                "allreduce: op ", reduce_op_name(op), " is not a kernel op (AVERAGE is SUM + scale)");
  if (comm.size() <= 1 || count == 0) return;
  run_ring(comm, buf, even_chunks(count, comm.size()), dt, op, RingKind::ALLREDUCE, tuning, deadline);
}

}  // namespace phv
