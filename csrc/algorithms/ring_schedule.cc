#include "algorithms/ring_schedule.h"

namespace phv {

Range even_chunk(size_t count, int p, int c) {
  size_t base = count / static_cast<size_t>(p);
  size_t extra = count % static_cast<size_t>(p);
  size_t uc = static_cast<size_t>(c);
  Range r;
  r.count = base + (uc < extra ? 1 : 0);
  r.offset = uc * base + (uc < extra ? uc : extra);
  return r;
}

std::vector<Range> even_chunks(size_t count, int p) {
  std::vector<Range> out(static_cast<size_t>(p));
  for (int c = 0; c < p; ++c) out[static_cast<size_t>(c)] = even_chunk(count, p, c);
  return out;
}

std::vector<Range> chunks_from_counts(const std::vector<size_t>& counts) {
  std::vector<Range> out(counts.size());
  size_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    out[i].offset = off;
    out[i].count = counts[i];
    off += counts[i];
  }
  return out;
}

static int mod(long a, int p) {
  long m = a % p;
  return static_cast<int>(m < 0 ? m + p : m);
}

int ring_send_chunk(int rank, int p, int step, int shift) { return mod(static_cast<long>(rank) - step - shift, p); }
int ring_recv_chunk(int rank, int p, int step, int shift) { return ring_send_chunk(rank, p, step + 1, shift); }

size_t segment_count(size_t count, size_t seg_elems) {
  if (seg_elems == 0) seg_elems = 1;
  return (count + seg_elems - 1) / seg_elems;
}

Range segment_of(const Range& chunk, size_t seg_elems, size_t k) {
  if (seg_elems == 0) seg_elems = 1;
  Range r;
  r.offset = chunk.offset + k * seg_elems;
  size_t left = chunk.count - k * seg_elems;
  r.count = left < seg_elems ? left : seg_elems;
  return r;
}

static void append_step(std::vector<RingMessage>& out, const std::vector<Range>& chunks, int chunk, int step,
                        size_t seg_elems) {
  const Range& c = chunks[static_cast<size_t>(chunk)];
  size_t n = segment_count(c.count, seg_elems);
  for (size_t k = 0; k < n; ++k) out.push_back(RingMessage{step, chunk, k, segment_of(c, seg_elems, k)});
}

RingPlan make_ring_plan(int rank, int p, const std::vector<Range>& chunks, size_t seg_elems, int shift, int steps) {
  RingPlan plan;
  if (p <= 1) return plan;
  std::vector<size_t> send_begin;  // index of the first send of each step
  for (int t = 0; t < steps; ++t) {
    send_begin.push_back(plan.sends.size());
    append_step(plan.sends, chunks, ring_send_chunk(rank, p, t, shift), t, seg_elems);
    append_step(plan.recvs, chunks, ring_recv_chunk(rank, p, t, shift), t, seg_elems);
  }
  plan.lead = send_begin.size() > 1 ? send_begin[1] : plan.sends.size();
  plan.overwrite_after.assign(plan.recvs.size(), -1);
  if (steps == 2 * (p - 1)) {
    // recv at step t >= p-1 writes chunk r-t-2 = send_chunk(t+1-p): the same segment was read by that send.
    for (size_t j = 0; j < plan.recvs.size(); ++j) {
      const RingMessage& m = plan.recvs[j];
      if (m.step < p - 1) continue;
      int u = m.step + 1 - p;
      plan.overwrite_after[j] = static_cast<long>(send_begin[static_cast<size_t>(u)] + m.segment);
    }
  }
  return plan;
}

}  // namespace phv
