// Reducescatter: the reduce phase of the ring (p-1 steps, shift 1) over blocks of uneven size, pipelined
// by segments (ring_pipeline.cc); chunk r ends at rank r.
//
// Copies: the input is const, so it is first copied into a work buffer that the ring reduces in place
// (1 extra copy of the input, and memory of one input), then block r is copied to output (1 copy of 1/p).
// Why not reduce in the scratch slots and forward from there: a slot would then stay busy until its
// segment had been forwarded, which waits for the whole previous step's sends -- with many segments per
// block every rank fills its slots with data it cannot forward yet and the ring deadlocks.
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/direct_copy.h"
#include "algorithms/ring_pipeline.h"
#include "common/error.h"

namespace phv {

void reducescatter(const Comm& comm, const void* input, void* output, const std::vector<size_t>& counts, DataType dt,
                   ReduceOp op, const Tuning& tuning, Deadline deadline) {
  const int p = comm.size();
  const size_t esize = dtype_size(dt);
  PHV_CHECK_ARG(esize != 0, "reducescatter: unknown dtype ", static_cast<int>(dt));
  PHV_CHECK_ARG(op == ReduceOp::SUM || op == ReduceOp::MIN || op == ReduceOp::MAX || op == ReduceOp::PRODUCT,
                "reducescatter: op ", reduce_op_name(op), " is not a kernel op (AVERAGE is SUM + scale)");
  PHV_CHECK_ARG(counts.size() == static_cast<size_t>(p), "reducescatter: ", counts.size(), " counts for ", p, " ranks");
  std::vector<Range> blocks = chunks_from_counts(counts);
  const Range& mine = blocks[static_cast<size_t>(comm.rank())];
  const size_t total = blocks.empty() ? 0 : blocks.back().offset + blocks.back().count;
  if (p == 1) {
    if (total > 0 && output != input) std::memmove(output, input, total * esize);
    return;
  }
  if (total == 0) return;
  if (use_direct(comm, total * esize / static_cast<size_t>(p)))
    return direct_reducescatter(comm, input, output, counts, dt, op, deadline);
  std::vector<char> work(static_cast<const char*>(input), static_cast<const char*>(input) + total * esize);
  run_ring(comm, work.data(), blocks, dt, op, RingKind::REDUCE_SCATTER, tuning, deadline);
  if (mine.count > 0) std::memcpy(output, work.data() + mine.offset * esize, mine.count * esize);
}

}  // namespace phv
