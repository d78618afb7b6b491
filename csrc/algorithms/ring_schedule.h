// Which piece of the buffer moves at which step of a ring pass. Pure functions: no I/O, no state.
//
// Terms. p ranks form a ring; rank r sends to its right neighbour r+1 and receives from its left
// neighbour r-1 (mod p). The buffer is cut into p CHUNKS (chunk c is the block that rank c owns at the
// end of a reduce-scatter); each chunk is cut into SEGMENTS of at most seg_elems elements, the unit of one
// message. A ring pass has STEPS; at step t rank r sends one whole chunk (segment by segment) and
// receives one whole chunk, so every link carries the same amount at every step.
//
// Chunk numbering (shift = 1 for reduce-scatter and allreduce, 0 for allgather):
//   send_chunk(r, t) = r - t - shift (mod p),   recv_chunk(r, t) = send_chunk(r, t + 1) = r - t - 1 - shift.
// So what arrives at step t is exactly what leaves at step t + 1 (after being reduced into, for a
// reduce-scatter). Reduce-scatter (shift 1, p-1 steps): the last chunk received, at t = p-2, is chunk r,
// which then holds the full reduction. Allgather (shift 0, p-1 steps): rank r first sends its own chunk.
// Allreduce is the 2(p-1) steps of one pass with shift 1: steps 0..p-2 reduce, steps p-1..2p-3 copy
// (for t >= p-1 the formula equals the allgather's at step t-(p-1)).
//
// Message order on a link is the concatenation, step by step, of the segments of the step's chunk. Since
// recv_chunk(t) = send_chunk(t+1), the send list is the first step's segments followed by the receive
// list: send j (j >= lead) forwards receive j - lead, where lead = number of segments sent at step 0.
#pragma once
#include <cstddef>
#include <vector>

namespace phv {

struct Range {
  size_t offset = 0;  // in elements
  size_t count = 0;
};

// count elements split into p chunks as evenly as possible, the first count % p chunks one larger.
Range even_chunk(size_t count, int p, int c);
std::vector<Range> even_chunks(size_t count, int p);
// Consecutive chunks of the given sizes (reducescatter / allgatherv blocks).
std::vector<Range> chunks_from_counts(const std::vector<size_t>& counts);

int ring_send_chunk(int rank, int p, int step, int shift);
int ring_recv_chunk(int rank, int p, int step, int shift);

// Number of segments of a chunk of `count` elements (0 for an empty chunk) and segment k of it.
size_t segment_count(size_t count, size_t seg_elems);
Range segment_of(const Range& chunk, size_t seg_elems, size_t k);

struct RingMessage {
  int step = 0;
  int chunk = 0;
  size_t segment = 0;  // index within the chunk
  Range range;         // absolute element range in the buffer
};

struct RingPlan {
  std::vector<RingMessage> sends;  // in link order, to the right neighbour
  std::vector<RingMessage> recvs;  // in link order, from the left neighbour
  size_t lead = 0;                 // send j >= lead forwards recv j - lead
  // For allreduce only (steps == 2(p-1)): recv j of the copy phase lands on the region that send
  // overwrite_after[j] read during the reduce phase; -1 where nothing earlier read it.
  std::vector<long> overwrite_after;
};

// The messages of rank `rank` for `steps` steps (p-1 or 2(p-1)) with the given chunk shift.
RingPlan make_ring_plan(int rank, int p, const std::vector<Range>& chunks, size_t seg_elems, int shift, int steps);

}  // namespace phv
