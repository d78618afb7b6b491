#include "backends/host_backend.h"

#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/direct_copy.h"
#include "backends/reduction_identity.h"
#include "common/reduce.h"

namespace phv {

namespace {

// An out-of-place allreduce from this size up hands its input to the algorithm (the ring reads its
// operands there); below it the input is copied into the output first. In cache, memcpy's string copy
// fills the output without reading it first, and the reductions then hit cache; reading input and
// output apart lost 3-14% at 256 KiB-2 MiB at 2 ranks and won 3-49% from 3 MiB (RESULTS.md, "Out of
// place without the copy"). A local choice: the ring's messages are the same either way.
constexpr size_t kOperandsFromInputBytes = size_t(2) << 20;

}  // namespace

void HostBackend::set_knobs(int allreduce_mode, int64_t segment_bytes) {
  std::lock_guard<std::mutex> lock(knobs_mu_);
  if (allreduce_mode >= -1) pending_mode_ = allreduce_mode;
  if (segment_bytes >= 0) pending_segment_ = segment_bytes;
  knobs_pending_.store(true, std::memory_order_release);
}

void HostBackend::apply_knobs() {
  if (!knobs_pending_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(knobs_mu_);
  if (pending_mode_ >= -1) hierarchy_.allreduce_mode = pending_mode_;
  if (pending_segment_ >= 0) tuning_.segment_bytes = static_cast<size_t>(pending_segment_);
  pending_mode_ = -2;
  pending_segment_ = -1;
  knobs_pending_.store(false, std::memory_order_relaxed);
}

uint8_t* HostBackend::scratch(size_t bytes) {
  if (fusion_.size() < bytes) fusion_.resize(bytes);
  return fusion_.data();
}

const TwoLevel* HostBackend::two_level(const Comm& comm) {
  if (hierarchy_.host_of.empty() || static_cast<size_t>(comm.size()) != hierarchy_.host_of.size()) return nullptr;
  if (two_level_state_ == TwoLevelState::UNKNOWN) {
    bool built = make_two_level(comm, hierarchy_.host_of, &two_level_);
    two_level_state_ = built ? TwoLevelState::BUILT : TwoLevelState::IMPOSSIBLE;
  }
  return two_level_state_ == TwoLevelState::BUILT ? &two_level_ : nullptr;
}

void HostBackend::reduce(const Comm& comm, void* buf, size_t count, DataType dt, ReduceOp op, Deadline deadline,
                         double post, const void* input) {
  const TwoLevel* tl = op == ReduceOp::ADASUM ? nullptr : two_level(comm);
  if (tl != nullptr && prefer_two_level(hierarchy_.allreduce_mode, hierarchy_.model, *tl, count * dtype_size(dt),
                                        OpType::ALLREDUCE, tuning_)) {
    if (input != nullptr) std::memcpy(buf, input, count * dtype_size(dt));
    hierarchical_allreduce(*tl, buf, count, dt, op, tuning_, deadline, post);
  } else {
    phv::allreduce(comm, buf, count, dt, op, tuning_, deadline, post, input);
  }
}

void HostBackend::allreduce(const Comm& comm, const std::vector<BufferEntry>& entries, DataType dt, ReduceOp op,
                            double prescale, double postscale, const CallContext& ctx) {
  apply_knobs();
  if (entries.size() != 1) {
    fused_allreduce(comm, entries, dt, op, prescale, postscale, ctx);
    return;
  }
  // A lone tensor is reduced in its output buffer. Out of place the algorithms read the input themselves
  // (the ring without copying it first), unless a prescale must be applied to a copy of it.
  const BufferEntry& e = entries.front();
  size_t esize = dtype_size(dt);
  uint8_t* buf;
  const void* operands = nullptr;  // out of place: the input, read by the algorithm
  if (e.input != nullptr) {
    buf = static_cast<uint8_t*>(e.output);
    const size_t bytes = e.count * esize;
    const bool apart = !ranges_overlap(e.input, bytes, buf, bytes);
    if (e.input != e.output && prescale == 1.0 && apart && bytes >= kOperandsFromInputBytes) {
      operands = e.input;
    } else if (e.input != e.output && e.count > 0) {
      std::memmove(buf, e.input, bytes);
    }
    if (prescale != 1.0) scale_buffer(buf, e.count, dt, prescale);
  } else {
    buf = scratch(e.count * esize);
    fill_identity(buf, e.count, dt, op);
  }
  ctx.mark(Phase::REDUCE, Edge::BEGIN);
  if (e.count > 0) reduce(comm, buf, e.count, dt, op, ctx.deadline, postscale, operands);
  ctx.mark(Phase::REDUCE, Edge::END);
}

void HostBackend::fused_allreduce(const Comm& comm, const std::vector<BufferEntry>& entries, DataType dt, ReduceOp op,
                                  double prescale, double postscale, const CallContext& ctx) {
  size_t esize = dtype_size(dt);
  size_t total = 0;
  for (const BufferEntry& e : entries) total += e.count * esize;
  uint8_t* buf = scratch(total);
  ctx.mark(Phase::COPY_IN, Edge::BEGIN);
  size_t off = 0;
  for (const BufferEntry& e : entries) {
    if (e.input != nullptr) {
      if (e.count > 0) std::memcpy(buf + off, e.input, e.count * esize);
      if (prescale != 1.0) scale_buffer(buf + off, e.count, dt, prescale);
    } else {
      fill_identity(buf + off, e.count, dt, op);
    }
    off += e.count * esize;
  }
  ctx.mark(Phase::COPY_IN, Edge::END);
  ctx.mark(Phase::REDUCE, Edge::BEGIN);
  if (total > 0 && op == ReduceOp::ADASUM) {
    counts_.clear();  // Adasum's dot products are per tensor: it needs the entries' boundaries
    for (const BufferEntry& e : entries) counts_.push_back(e.count);
    adasum_allreduce(comm, buf, counts_, dt, ctx.deadline, postscale);
  } else if (total > 0) {
    reduce(comm, buf, total / esize, dt, op, ctx.deadline, postscale);
  }
  ctx.mark(Phase::REDUCE, Edge::END);
  ctx.mark(Phase::COPY_OUT, Edge::BEGIN);
  off = 0;
  for (const BufferEntry& e : entries) {
    if (e.output != nullptr && e.count > 0) std::memcpy(e.output, buf + off, e.count * esize);
    off += e.count * esize;
  }
  ctx.mark(Phase::COPY_OUT, Edge::END);
}

void HostBackend::allgatherv(const Comm& comm, const void* send, void* recv, const std::vector<size_t>& bytes_per_rank,
                             const CallContext& ctx) {
  apply_knobs();
  size_t total = 0;
  for (size_t bytes : bytes_per_rank) total += bytes;
  const TwoLevel* tl = two_level(comm);
  if (tl != nullptr &&
      prefer_two_level(hierarchy_.allgather_mode, hierarchy_.model, *tl, total, OpType::ALLGATHER, tuning_)) {
    hierarchical_allgatherv(comm, *tl, hierarchy_.host_of, send, recv, bytes_per_rank, tuning_, ctx.deadline);
  } else {
    phv::allgatherv(comm, send, recv, bytes_per_rank, tuning_, ctx.deadline);
  }
}

void HostBackend::broadcast(const Comm& comm, const void* input, void* buf, size_t bytes, int root,
                            const CallContext& ctx) {
  apply_knobs();
  // Out of place the root sends from its input and copies it into its buf meanwhile (broadcast.cc).
  const bool apart = input != buf && !ranges_overlap(input, bytes, buf, bytes);
  if (comm.rank() == root && input != buf && !apart && bytes > 0) std::memmove(buf, input, bytes);
  if (bytes > 0) phv::broadcast(comm, buf, bytes, root, tuning_, ctx.deadline, apart ? input : nullptr);
}

void HostBackend::alltoallv(const Comm& comm, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                            const std::vector<size_t>& recv_bytes, const CallContext& ctx) {
  apply_knobs();
  phv::alltoallv(comm, send, send_bytes, recv, recv_bytes, ctx.deadline);
}

void HostBackend::reducescatter(const Comm& comm, const void* input, void* output, const std::vector<size_t>& counts,
                                DataType dt, ReduceOp op, double prescale, double postscale, const CallContext& ctx) {
  apply_knobs();
  size_t esize = dtype_size(dt);
  size_t total = 0;
  for (size_t c : counts) total += c;
  if (prescale != 1.0) {
    uint8_t* buf = scratch(total * esize);
    std::memcpy(buf, input, total * esize);
    scale_buffer(buf, total, dt, prescale);
    input = buf;
  }
  if (total > 0) phv::reducescatter(comm, input, output, counts, dt, op, tuning_, ctx.deadline);
  if (postscale != 1.0) scale_buffer(output, counts[static_cast<size_t>(comm.rank())], dt, postscale);
}

void HostBackend::barrier(const Comm& comm, const CallContext& ctx) {
  apply_knobs();
  phv::barrier(comm, ctx.deadline);
}

}  // namespace phv
