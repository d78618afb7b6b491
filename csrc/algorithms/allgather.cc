// allgatherv: a ring over blocks of different sizes (chunk c = rank c's block), p-1 steps, each block cut
// into segments and pipelined (ring_pipeline.cc). Blocks are received straight into `recv`; the only
// copy is my own block from `send` into place (skipped when send already points there). Between ranks
// that can read each other's memory, blocks of at least Transport::direct_bytes() on average are read
// straight from their owners instead (direct_copy.h).
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/direct_copy.h"
#include "algorithms/ring_pipeline.h"
#include "common/error.h"

namespace phv {

void allgatherv(const Comm& comm, const void* send, void* recv, const std::vector<size_t>& bytes_per_rank,
                const Tuning& tuning, Deadline deadline) {
  const int p = comm.size();
  PHV_CHECK_ARG(bytes_per_rank.size() == static_cast<size_t>(p), "allgather: ", bytes_per_rank.size(),
                " block sizes for ", p, " ranks");
  std::vector<Range> blocks = chunks_from_counts(bytes_per_rank);
  const size_t total = blocks.back().offset + blocks.back().count;
  if (use_direct(comm, total / static_cast<size_t>(p)))
    return direct_allgatherv(comm, send, recv, bytes_per_rank, deadline);
  const Range& mine = blocks[static_cast<size_t>(comm.rank())];
  char* dst = static_cast<char*>(recv) + mine.offset;
  if (mine.count > 0 && dst != send) std::memmove(dst, send, mine.count);
  run_ring(comm, recv, blocks, DataType::UINT8, ReduceOp::SUM, RingKind::ALLGATHER, tuning, deadline);
}

}  // namespace phv
