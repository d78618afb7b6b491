// Single-copy allreduce between ranks of one host (direct_copy.h): a reducescatter and an allgather made of
// single copies, fused into one exchange of descriptors.
//
// The buffer is cut into p blocks; rank r owns block r. Every rank publishes, to each peer q, block q of its
// operands (for q to read) and block q of its output (for q to write into); in place they are one range.
//  1. Rank r builds block r of its output: it reads block r of every peer's operands piece by piece into a
//     cache-sized scratch and reduces in rank order 0, 1, .., p-1, the order direct_reducescatter uses, so
//     the result does not depend on which rank reduced a block and equals allgather(reducescatter(x)).
//     AVERAGE's 1/size (postscale) is applied to each finished piece while it is in cache.
//  2. It writes each finished piece straight into block r of every peer's output while the piece is still
//     in cache (1.17-1.26x faster at 64-256 MiB than writing the whole block afterwards, paired), and, at
//     the end, tells every peer it is done with its memory.
// Why it is safe without a step between: only rank r reads the peers' block r and only rank r writes it;
// rank r writes a piece of a peer's block r only after it read that piece from every peer, and no rank
// touches its own block q (q != r). A rank returns when every peer has said it is done, so its memory is
// no longer in use.
//
// Copies per rank for M bytes: (p-1)/p M read in, (p-1)/p M written out, both by the kernel (CMA), and no
// cache line goes back and forth between cores: the ring over shared memory copies 3(p-1)/p M and hands
// every segment's lines from one core to another. That hand-off is what this host's slow state slows
// (benchmarks/RESULTS.md, "The large allreduce in the slow state"), so the negotiation chooses between
// the two while the job runs (engine/copy_path_vote.h).
#include <algorithm>
#include <cstring>

#include "algorithms/direct_copy.h"
#include "algorithms/ring_schedule.h"
#include "common/error.h"
#include "common/reduce.h"
#include "transport/cross_memory.h"

namespace phv {

bool use_direct_allreduce(const Comm& comm, size_t bytes) {
  return comm.transport->single_copy_allreduce() && direct_allreduce_eligible(comm, bytes);
}

bool direct_allreduce_eligible(const Comm& comm, size_t bytes) {
  const size_t t = comm.transport->direct_bytes_in(false);
  return comm.size() > 1 && t > 0 && bytes >= kDirectAllreduceMinBytes && bytes / static_cast<size_t>(comm.size()) >= t;
}

void direct_allreduce(const Comm& comm, void* buf, size_t count, DataType dt, ReduceOp op, Deadline deadline,
                      double postscale, const void* input) {
  PHV_CHECK_ARG(op == ReduceOp::SUM || op == ReduceOp::MIN || op == ReduceOp::MAX || op == ReduceOp::PRODUCT,
                "allreduce: single copies reduce with sum, min, max or product, not op ", static_cast<int>(op));
  const int p = comm.size(), r = comm.rank();
  const size_t esize = dtype_size(dt);
  char* out = static_cast<char*>(buf);
  const char* src = input != nullptr ? static_cast<const char*>(input) : out;
  const std::vector<Range> blocks = even_chunks(count, p);
  auto bytes_of = [&](int q) { return blocks[static_cast<size_t>(q)].count * esize; };
  auto offset_of = [&](int q) { return blocks[static_cast<size_t>(q)].offset * esize; };
  // reads: block q of our operands, published to q; writes: block q of our output (the same range in place,
  // sent all the same: in place or not is each rank's own affair -- a rank that joined reduces in place --
  // so the messages must not depend on it).
  DirectExchange reads(comm, "allreduce", deadline), writes(comm, "allreduce", deadline);
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    reads.post_expect(q);
    reads.post_publish(q, src + offset_of(q), bytes_of(q));
    writes.post_expect(q);
    writes.post_publish(q, out + offset_of(q), bytes_of(q));
  }
  reads.wait();
  writes.wait();
  const Clock::time_point copying = Clock::now();
  const size_t mine = bytes_of(r);
  char* block = out + offset_of(r);
  const char* own = src + offset_of(r);
  const size_t piece = std::max(esize, kReducePieceBytes / esize * esize);
  enum { kFirst, kSecond, kSaved, kBuffers };  // the scratch buffers
  const PieceScratch scratch(std::min(piece, mine), kBuffers);
  for (size_t at = 0; at < mine; at += piece) {
    const size_t n = std::min(piece, mine - at), items = n / esize;
    // In place, ranks after 1 overwrite their own piece before they reach it in rank order: keep it.
    const char* own_piece = own + at;
    if (input == nullptr && r >= 2) {
      char* s = scratch.at(kSaved, copy_phase(reinterpret_cast<uintptr_t>(own_piece), esize));
      std::memcpy(s, own_piece, n);
      own_piece = s;
    }
    auto operand = [&](int q, int which) -> const char* {
      if (q == r) return own_piece;
      char* s = scratch.at(which, reads.phase(q, mine, at, esize));
      reads.read(q, mine, at, s, n);
      return s;
    };
    const char* a = operand(0, kFirst);
    const char* b = operand(1, kSecond);
    reduce_to(block + at, a, b, items, dt, op);
    for (int q = 2; q < p; ++q) reduce_into(block + at, operand(q, kFirst), items, dt, op);
    if (postscale != 1.0) scale_buffer(block + at, items, dt, postscale);
    // The finished piece, still in cache, into every peer's output: starting with the right neighbour, so
    // that the writers spread over the ranks.
    for (int s = 1; s < p; ++s) writes.write((r + s) % p, mine, at, block + at, n);
  }
  for (int q = 0; q < p; ++q) {
    if (q != r) writes.post_done(q);
  }
  for (int q = 0; q < p; ++q) {
    if (q != r) writes.post_wait_done(q);  // until then the peer may still be reading or writing our memory
  }
  writes.wait_spinning(Clock::now() - copying);  // peers copy about as much as we did
}

}  // namespace phv
