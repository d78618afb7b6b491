// Single-copy allgather, broadcast and reducescatter (direct_copy.h); alltoall mixes single copies into its
// pairwise exchange block by block (alltoall.cc).
//  - allgather: every rank publishes its output to every peer and writes its own block straight into
//    every peer's output, starting with its right neighbour (so the p writers of a round do not all
//    write to rank 0). (p-1)/p of the output is copied once per rank, where the ring copies it twice.
//    Writing rather than reading: the kernel pins the far side's pages one by one, and an output the
//    engine allocated is on huge pages where a caller's input (a torch tensor, say) is often on 4 KiB
//    ones, which made reads of it 2-3x slower (benchmarks/RESULTS.md, "Where CMA's speed comes from").
//  - broadcast: the root publishes its buffer to every other rank, and every other rank publishes its
//    own. Each reader reads all but the last 1/p of the buffer while the root writes that last part
//    straight into the reader's buffer (process_vm_writev): otherwise the root would sit idle while the
//    readers copy, and at 2 ranks one core would do all the work. Each side then tells the other it is
//    done. One copy per byte, where the chain copies twice per hop. A root that also copies a large buffer
//    into its own output (out of place) writes nothing: readers then read it all, and each side copies once.
//  - reducescatter: every rank publishes block q of its input to rank q; rank r builds block r in its
//    output in rank order 0, 1, .., p-1 (the same order on every rank: the result does not depend on who
//    reduces): rank 0's block read straight into the output, the others' read piece by piece into a
//    cache-sized scratch and reduced from there; its own block reduced from its input without a copy.
#include "algorithms/direct_copy.h"

#include <algorithm>
#include <cstring>

#include "algorithms/ring_schedule.h"
#include "common/byte_codec.h"
#include "common/error.h"
#include "common/reduce.h"
#include "common/stream_copy.h"
#include "transport/cross_memory.h"

namespace phv {
namespace {

constexpr size_t kDescriptorBytes = 16;  // {address u64, length u64}, little-endian
// An out-of-place broadcast's root writes no share of the readers' buffers from this size up (it copies
// the whole buffer into its own output instead). At 2 ranks that gained 13-30% at 16-64 MiB, went both
// ways at 8 MiB (0.80-1.25) and lost 10-52% at 2-4 MiB, where numpy's inputs are on small pages, which
// the readers' reads then crawl through (RESULTS.md, "Out of place without the copy").
constexpr size_t kRootCopiesAloneBytes = size_t(16) << 20;
// The longest wait_spinning() polls: past it a wake-up (50-70 us) costs under 1% of the wait.
constexpr Clock::duration kMaxCopySpin = std::chrono::milliseconds(10);

}  // namespace

bool use_direct(const Comm& comm, size_t bytes) {
  const size_t t = comm.transport->direct_bytes();
  return comm.size() > 1 && t > 0 && bytes >= t;
}

bool use_direct_broadcast(const Comm& comm, size_t share) {
  const size_t t = comm.transport->broadcast_direct_bytes();
  return comm.size() > 1 && t > 0 && share >= t;
}

PieceScratch::PieceScratch(size_t piece, int count) : stride_(piece + kCopyLineBytes) {
  thread_local std::vector<char> area;
  const size_t bytes = static_cast<size_t>(count) * stride_;
  if (area.size() < bytes) area.resize(bytes);
  base_ = area.data();
}

char* PieceScratch::at(int which, size_t phase) const {
  return at_copy_phase(base_ + static_cast<size_t>(which) * stride_, phase);
}

bool ranges_overlap(const void* a, size_t an, const void* b, size_t bn) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

DirectExchange::DirectExchange(const Comm& comm, const char* op, Deadline deadline)
    : comm_(comm),
      op_(op),
      deadline_(deadline),
      out_(kDescriptorBytes * static_cast<size_t>(comm.size())),
      in_(kDescriptorBytes * static_cast<size_t>(comm.size())) {}

void DirectExchange::post_publish(int to, const void* buf, size_t len) {
  uint8_t* d = out_.data() + kDescriptorBytes * static_cast<size_t>(to);
  store_le<uint64_t>(d, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(buf)));
  store_le<uint64_t>(d + 8, len);
  ids_.push_back(comm_.transport->post_send(comm_.global(to), d, kDescriptorBytes));
}

void DirectExchange::post_expect(int from) {
  uint8_t* d = in_.data() + kDescriptorBytes * static_cast<size_t>(from);
  ids_.push_back(comm_.transport->post_recv(comm_.global(from), d, kDescriptorBytes));
}

void DirectExchange::post_done(int to) { ids_.push_back(comm_.transport->post_send(comm_.global(to), nullptr, 0)); }

void DirectExchange::post_wait_done(int from) {
  ids_.push_back(comm_.transport->post_recv(comm_.global(from), nullptr, 0));
}

void DirectExchange::wait_spinning(Clock::duration spin) {
  struct Spin {  // the transport's own setting again however wait() ends
    Transport& t;
    ~Spin() { t.set_wait_spin_us(0); }
  } scope{*comm_.transport};
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::min<Clock::duration>(spin, kMaxCopySpin));
  scope.t.set_wait_spin_us(static_cast<long>(us.count()));
  wait();
}

void DirectExchange::wait() {
  comm_.transport->wait_all(ids_, deadline_);
  ids_.clear();
}

Published DirectExchange::published(int from, size_t want, size_t at, size_t len) const {
  const uint8_t* d = in_.data() + kDescriptorBytes * static_cast<size_t>(from);
  const Published p{load_le<uint64_t>(d), load_le<uint64_t>(d + 8)};
  if (p.len != want || at + len > want)
    throw_peer_error(ErrorKind::INTERNAL, comm_.global(from), "rank ", comm_.transport->rank(), ": ", op_, ": ",
                     comm_.transport->describe_peer(comm_.global(from)), " published ", p.len, " bytes where ", want,
                     " were expected (ranks disagree on the sizes)");
  return p;
}

void DirectExchange::read(int from, size_t want, size_t at, void* dst, size_t len) {
  comm_.transport->read_direct(comm_.global(from), published(from, want, at, len).addr + at, dst, len, op_);
}

void DirectExchange::write(int to, size_t want, size_t at, const void* src, size_t len) {
  comm_.transport->write_direct(comm_.global(to), published(to, want, at, len).addr + at, src, len, op_);
}

size_t DirectExchange::published_bytes(int from) const {
  return load_le<uint64_t>(in_.data() + kDescriptorBytes * static_cast<size_t>(from) + 8);
}

size_t DirectExchange::phase(int from, size_t want, size_t at, size_t item_bytes) const {
  return copy_phase(published(from, want, at, 0).addr + at, item_bytes);
}

void direct_allgatherv(const Comm& comm, const void* send, void* recv, const std::vector<size_t>& bytes_per_rank,
                       Deadline deadline) {
  const int p = comm.size(), r = comm.rank();
  std::vector<Range> blocks = chunks_from_counts(bytes_per_rank);
  const Range& mine = blocks[static_cast<size_t>(r)];
  char* out = static_cast<char*>(recv);
  const size_t total = blocks.back().offset + blocks.back().count;
  // Peers write the other blocks of recv while we still read `send`: write from a copy if send lies there.
  std::vector<char> copy;
  if (send != out + mine.offset && ranges_overlap(send, mine.count, recv, total)) {
    copy.assign(static_cast<const char*>(send), static_cast<const char*>(send) + mine.count);
    send = copy.data();
  }
  DirectExchange x(comm, "allgather", deadline);
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    x.post_expect(q);
    x.post_publish(q, recv, total);
  }
  // Our own block while the descriptors travel: peers may already be writing to us (large: streamed).
  comm.transport->start_posted();
  const Clock::time_point copying = Clock::now();
  if (mine.count > 0 && out + mine.offset != send) copy_streaming(out + mine.offset, send, mine.count);
  x.wait();
  for (int s = 1; s < p; ++s) {
    const int q = (r + s) % p;
    x.write(q, total, mine.offset, send, mine.count);
    x.post_done(q);
  }
  for (int q = 0; q < p; ++q) {
    if (q != r) x.post_wait_done(q);  // until then peers may still be writing to us
  }
  x.wait_spinning(Clock::now() - copying);
}

void direct_broadcast(const Comm& comm, void* buf, size_t bytes, int root, Deadline deadline, const void* src) {
  const int p = comm.size(), r = comm.rank();
  char* b = static_cast<char*>(buf);
  DirectExchange x(comm, "broadcast", deadline);
  const Clock::time_point copying = Clock::now();
  // The root writes the last `share` bytes of each reader, which reads the first `head`: 1/p each, or,
  // when the root also copies a large buffer into its own output (out of place), none, so that the root
  // and the readers each copy the buffer once. The root publishes `head` as its buffer's length.
  const size_t share_if_in_place = bytes / static_cast<size_t>(p);
  if (r == root) {
    const char* from = static_cast<const char*>(src);
    const bool root_copies = from != b && bytes >= kRootCopiesAloneBytes;
    const size_t share = root_copies ? 0 : share_if_in_place, head = bytes - share;
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      x.post_expect(q);
      x.post_publish(q, from, head);  // the readers read from where the bytes are
    }
    x.wait();
    for (int s = 1; s < p; ++s) {
      const int q = (root + s) % p;
      if (share > 0) x.write(q, bytes, head, from + head, share);
      x.post_done(q);
    }
    if (from != b) {  // out of place: our own copy while the readers read
      comm.transport->start_posted();
      std::memcpy(b, from, bytes);
    }
    for (int q = 0; q < p; ++q) {
      if (q != r) x.post_wait_done(q);
    }
    x.wait_spinning(Clock::now() - copying);  // the readers read as much as we wrote
    return;
  }
  x.post_expect(root);
  x.post_publish(root, buf, bytes);
  x.wait();
  const size_t head = x.published_bytes(root);
  if (head != bytes && head != bytes - share_if_in_place)
    throw_peer_error(ErrorKind::INTERNAL, comm.global(root), "rank ", comm.transport->rank(),
                     ": broadcast: ", comm.transport->describe_peer(comm.global(root)), " published ", head,
                     " bytes to read of ", bytes, " (ranks disagree on the size)");
  x.read(root, head, 0, b, head);
  x.post_done(root);
  x.post_wait_done(root);  // until then the root may still be writing our last part
  x.wait_spinning(Clock::now() - copying);
}

void direct_reducescatter(const Comm& comm, const void* input, void* output, const std::vector<size_t>& counts,
                          DataType dt, ReduceOp op, Deadline deadline) {
  const int p = comm.size(), r = comm.rank();
  const size_t esize = dtype_size(dt);
  std::vector<Range> blocks = chunks_from_counts(counts);
  const size_t total = (blocks.back().offset + blocks.back().count) * esize;
  const Range& mine = blocks[static_cast<size_t>(r)];
  const size_t my_bytes = mine.count * esize;
  // Peers read our input while we write our output: publish a copy if they overlap (placed like the
  // input within its line, so that the peers' reads run as they would from the input).
  std::vector<char> copy;
  const char* in = static_cast<const char*>(input);
  if (ranges_overlap(input, total, output, my_bytes)) {
    copy.resize(total + kCopyLineBytes);
    char* c = at_copy_phase(copy.data(), copy_phase(reinterpret_cast<uintptr_t>(in), esize));
    std::memcpy(c, in, total);
    in = c;
  }
  DirectExchange x(comm, "reducescatter", deadline);
  const Clock::time_point copying = Clock::now();
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    const Range& b = blocks[static_cast<size_t>(q)];
    x.post_expect(q);
    x.post_publish(q, in + b.offset * esize, b.count * esize);
  }
  x.wait();
  char* out = static_cast<char*>(output);
  const char* own = in + mine.offset * esize;
  if (my_bytes > 0) {
    if (r == 0) std::memcpy(out, own, my_bytes);
    else x.read(0, out, my_bytes);
    const size_t piece = std::max(esize, kReducePieceBytes / esize * esize);
    // Each piece lands where its source lies within a 64-byte line: the kernel's copy between unlike
    // offsets runs at a fraction of its speed (transport/cross_memory.h).
    const PieceScratch scratch(std::min(piece, my_bytes), 1);
    for (int q = 1; q < p; ++q) {
      if (q == r) {
        reduce_into(out, own, mine.count, dt, op);
        continue;
      }
      for (size_t at = 0; at < my_bytes; at += piece) {
        const size_t n = std::min(piece, my_bytes - at);
        char* s = scratch.at(0, x.phase(q, my_bytes, at, esize));
        x.read(q, my_bytes, at, s, n);
        reduce_into(out + at, s, n / esize, dt, op);
      }
    }
  }
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    x.post_wait_done(q);
    x.post_done(q);
  }
  x.wait_spinning(Clock::now() - copying);  // peers read from us about as much as we read from them
}

}  // namespace phv
