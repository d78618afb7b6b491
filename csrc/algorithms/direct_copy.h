// Internal: single-copy collectives between ranks of one host (transport/cross_memory.h). Instead of
// sending bytes through the shared-memory ring (a copy in, a copy out), a rank publishes a buffer -- a
// 16-byte message {address, length} -- and the peer copies straight between it and its own buffer:
// Transport::write_direct into a published output (allgather, alltoall, part of a broadcast), or
// Transport::read_direct from a published input (reducescatter, the rest of a broadcast).
// Lifetime: the owner returns, and so may change or free the buffer, only after every peer copying from
// or into it has sent it an empty "done" message, so the bytes stay valid and unchanged meanwhile; inputs
// are only ever read, so they are left as they were.
//
// When: Transport::direct_bytes() is the same on every rank, and every size a decision looks at is known to
// both ends of the copy, so both ends always take the same path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/algorithms.h"

namespace phv {

// True when a copy of `bytes` between members of comm goes through read_direct.
bool use_direct(const Comm& comm, size_t bytes);
// The same for a broadcast whose root's share of each reader's buffer (1/p of it) is `share` bytes.
bool use_direct_broadcast(const Comm& comm, size_t share);

// An address range in a peer's memory, as it published it.
struct Published {
  uint64_t addr = 0;
  uint64_t len = 0;
};

// One collective's small messages. Descriptors: post_publish sends ours to a set rank, post_expect receives
// one; done messages: post_done tells a set rank we finished reading it, post_wait_done waits for a reader.
// wait() completes everything posted so far. Buffers live in the object, so it must outlive wait().
class DirectExchange {
 public:
  DirectExchange(const Comm& comm, const char* op, Deadline deadline);
  void post_publish(int to, const void* buf, size_t len);
  void post_expect(int from);
  void post_done(int to);
  void post_wait_done(int from);
  void wait_for(RequestId id) { ids_.push_back(id); }  // another request of the collective, waited with the rest
  void wait();
  // wait(), polling for up to `spin` before sleeping: for the done messages of peers that are copying into
  // our buffer about as much as we copied in `spin` (Transport::set_wait_spin_us; at most kMaxCopySpin).
  void wait_spinning(Clock::duration spin);
  // Copies len bytes at offset `at` of what `from` published (checking its length is `want`) into dst.
  void read(int from, size_t want, size_t at, void* dst, size_t len);
  // The same, the whole published range.
  void read(int from, void* dst, size_t len) { read(from, len, 0, dst, len); }
  // Copies len bytes of src to offset `at` of what `to` published (checking its length is `want`).
  void write(int to, size_t want, size_t at, const void* src, size_t len);
  // The length `from` published (after wait()), unchecked: for a protocol where it carries a decision.
  size_t published_bytes(int from) const;
  // copy_phase (transport/cross_memory.h) of offset `at` of what `from` published, for items of item_bytes.
  size_t phase(int from, size_t want, size_t at, size_t item_bytes) const;

 private:
  Published published(int from, size_t want, size_t at, size_t len) const;  // checked against want
  const Comm& comm_;
  const char* op_;
  Deadline deadline_;
  std::vector<uint8_t> out_, in_;  // 16 bytes per set rank: our descriptor for it, its descriptor for us
  std::vector<RequestId> ids_;
};

// The single-copy variants of algorithms.h's collectives (the same contracts); the callers there decide
// with use_direct().
void direct_allgatherv(const Comm& comm, const void* send, void* recv, const std::vector<size_t>& bytes_per_rank,
                       Deadline deadline);
// src: the root's bytes (buf itself, or its input out of place; see broadcast()); ignored on other ranks.
void direct_broadcast(const Comm& comm, void* buf, size_t bytes, int root, Deadline deadline, const void* src);
void direct_reducescatter(const Comm& comm, const void* input, void* output, const std::vector<size_t>& counts,
                          DataType dt, ReduceOp op, Deadline deadline);

// The single-copy allreduce (direct_allreduce.cc): allreduce()'s contract for SUM, MIN, MAX and PRODUCT
// (input: out of place, not overlapping buf). It is a choice the negotiation makes while the job runs
// (Transport::single_copy_allreduce), for buffers direct_allreduce_eligible() admits: at least
// kDirectAllreduceMinBytes, and blocks of a rank at least the single-copy threshold. Both depend only on
// sizes and facts every rank shares, so every rank takes the same algorithm. Below 8 MiB the ring works
// in cache and single copies lost in the fast state (2 ranks: 0.44x at 2 MiB); from 8 MiB they were even or
// faster (1.04 at 8 MiB, 1.05-1.36 at 32-256 MiB), and 3.5-4.4x faster in the slow state
// (benchmarks/RESULTS.md, "The single-copy allreduce").
constexpr size_t kDirectAllreduceMinBytes = size_t(8) << 20;
bool direct_allreduce_eligible(const Comm& comm, size_t bytes);
bool use_direct_allreduce(const Comm& comm, size_t bytes);  // eligible, and the negotiated mode is on
void direct_allreduce(const Comm& comm, void* buf, size_t count, DataType dt, ReduceOp op, Deadline deadline,
                      double postscale = 1.0, const void* input = nullptr);

// `count` piece-sized scratch buffers whose starts can be moved to any copy phase (transport/cross_memory.h),
// for reading a peer's block piece by piece and reducing it in cache. The memory is the calling thread's,
// kept from call to call (fresh buffers would be zeroed, and their pages faulted in, on every call: 1.15-1.20x
// slower for an 8 MiB allreduce and 1.13x for a 4 MiB reducescatter at 2 ranks, paired), so a thread holds
// one PieceScratch at a time.
// The pieces are this large: big enough that a read costs little per byte, small enough to stay in cache.
constexpr size_t kReducePieceBytes = size_t(1) << 20;
class PieceScratch {
 public:
  PieceScratch(size_t piece, int count);
  char* at(int which, size_t phase) const;  // buffer `which` (< count), starting at copy phase `phase`

 private:
  size_t stride_;
  char* base_;
};

// True when [a, a + an) and [b, b + bn) share a byte.
bool ranges_overlap(const void* a, size_t an, const void* b, size_t bn);

}  // namespace phv
