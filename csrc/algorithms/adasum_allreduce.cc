// Adasum allreduce: recursive vector halving with distance doubling (Maleki et al., 2020), the pairwise
// rule of common/adasum.h applied per tensor.
//
// p' = largest power of two <= p, rem = p - p'. Terms: a "level" d = 1, 2, 4, .., p'/2; at level d set
// rank r's partner is r ^ d, the "lower" of the two is the one with bit d clear, and r's "group" is the
// 2d ranks that share r / 2d (the ranks whose vectors have been combined once level d is done).
//
//  1. Fold: rank p' + i (i < rem) sends its whole buffer to rank i, which replaces its own with
//     adasum(own, received) per tensor (whole-tensor dot products, computed locally), and waits.
//  2. Halving, ranks 0..p'-1: each rank owns a range of the buffer, at first all of it. At level d the
//     range is cut in two at its middle; the lower rank keeps the first half and the upper the second;
//     each sends the half it gives up to its partner and receives the partner's copy of the half it keeps.
//     Call the lower rank's values a and the upper's b. Each rank computes a.b, |a|^2, |b|^2 of every
//     tensor over the part of the tensor inside its half; the group sums them (the group's ranks hold,
//     between them, every element of the two vectors being combined: the lower half-group's and the upper
//     half-group's) with small_allreduce, so every rank gets the same whole-tensor values, and combines
//     its half with the coefficients. After log2(p') levels each rank owns 1/p' of the result.
//  3. Gathering, the levels in reverse: partners swap what they own, so both own the range they split.
//  4. Rank i sends the result to rank p' + i.
// Each element of the result is computed on one rank and copied to the others, so every rank ends with
// the same bits. Data moved per rank (ranks 0..p'-1): (p'-1)/p' of the buffer each way in step 2 and
// again in step 3, as a ring allreduce moves; plus the whole buffer twice on folded pairs.
//
// Scratch: the partner's half (at most the whole buffer, when folding) goes to a per-thread buffer that
// grows to the largest message and is kept, so that a training loop does not allocate every step.
#include <algorithm>
#include <vector>

#include "algorithms/algorithms.h"
#include "common/adasum.h"
#include "common/error.h"
#include "common/reduce.h"

namespace phv {
namespace {

struct Range {
  size_t lo, hi;  // elements [lo, hi) of the fused buffer
};

// Tensor t occupies elements [starts[t], starts[t + 1]).
std::vector<size_t> tensor_starts(const std::vector<size_t>& counts) {
  std::vector<size_t> starts(counts.size() + 1, 0);
  for (size_t t = 0; t < counts.size(); ++t) starts[t + 1] = starts[t] + counts[t];
  return starts;
}

// Adds, per tensor, the dot products of mine/theirs over the elements of `r` (theirs[0] is element r.lo).
// sums holds 3 doubles per tensor: a.b, |a|^2, |b|^2, where a is the lower rank's piece.
void partial_dots(const char* mine, const char* theirs, Range r, const std::vector<size_t>& starts, DataType dt,
                  bool i_am_lower, std::vector<double>& sums) {
  const size_t esize = dtype_size(dt);
  for (size_t t = 0; t + 1 < starts.size(); ++t) {
    size_t lo = std::max(starts[t], r.lo), hi = std::min(starts[t + 1], r.hi);
    if (lo >= hi) continue;
    AdasumDots d;
    adasum_dots(mine + lo * esize, theirs + (lo - r.lo) * esize, hi - lo, dt, d);
    sums[3 * t] += d.ab;
    sums[3 * t + 1] += i_am_lower ? d.aa : d.bb;
    sums[3 * t + 2] += i_am_lower ? d.bb : d.aa;
  }
}

// mine[r] becomes adasum(a, b) per tensor, from whole-tensor sums (partial_dots' layout).
void combine(char* mine, const char* theirs, Range r, const std::vector<size_t>& starts, DataType dt, bool i_am_lower,
             const std::vector<double>& sums) {
  const size_t esize = dtype_size(dt);
  for (size_t t = 0; t + 1 < starts.size(); ++t) {
    size_t lo = std::max(starts[t], r.lo), hi = std::min(starts[t + 1], r.hi);
    if (lo >= hi) continue;
    AdasumDots whole{sums[3 * t], sums[3 * t + 1], sums[3 * t + 2]};
    double ca, cb;
    adasum_coefficients(whole, ca, cb);
    adasum_combine_into(mine + lo * esize, theirs + (lo - r.lo) * esize, hi - lo, dt, i_am_lower ? ca : cb,
                        i_am_lower ? cb : ca);
  }
}

// Sends and/or receives (null pointer: that direction is skipped) and waits for both.
void exchange(const Comm& comm, int partner, const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
              Deadline deadline) {
  Transport* tr = comm.transport;
  std::vector<RequestId> ids;
  if (recv != nullptr) ids.push_back(tr->post_recv(comm.global(partner), recv, recv_bytes));
  if (send != nullptr) ids.push_back(tr->post_send(comm.global(partner), send, send_bytes));
  tr->wait_all(ids, deadline);
}

char* scratch(size_t bytes) {
  static thread_local std::vector<char> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

}  // namespace

void adasum_allreduce(const Comm& comm, void* buf_v, const std::vector<size_t>& counts, DataType dt, Deadline deadline,
                      double postscale) {
  PHV_CHECK_ARG(adasum_dtype(dt),
                "allreduce: Adasum is defined for float16, bfloat16, float32 and float64 "
                "tensors, not ",
                dtype_name(dt));
  const std::vector<size_t> starts = tensor_starts(counts);
  const size_t n = starts.back(), esize = dtype_size(dt);
  char* buf = static_cast<char*>(buf_v);
  const int p = comm.size(), r = comm.rank();
  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  const int rem = p - p2;

  if (p > 1 && n > 0) {
    if (r >= p2) {  // folded: hand the vector over, get the result at the end
      exchange(comm, r - p2, buf, n * esize, nullptr, 0, deadline);
      exchange(comm, r - p2, nullptr, 0, buf, n * esize, deadline);
    } else {
      char* theirs = scratch((r < rem ? n : (n + 1) / 2) * esize);
      if (r < rem) {
        exchange(comm, r + p2, nullptr, 0, theirs, n * esize, deadline);
        std::vector<double> sums(3 * counts.size(), 0.0);
        partial_dots(buf, theirs, Range{0, n}, starts, dt, true, sums);
        combine(buf, theirs, Range{0, n}, starts, dt, true, sums);
      }
      std::vector<Range> owned{Range{0, n}};  // owned[k]: the range owned before level 2^k
      for (int d = 1; d < p2; d *= 2) {
        const Range cur = owned.back();
        const size_t mid = cur.lo + (cur.hi - cur.lo) / 2;
        const bool lower = (r & d) == 0;
        const Range keep = lower ? Range{cur.lo, mid} : Range{mid, cur.hi};
        const Range give = lower ? Range{mid, cur.hi} : Range{cur.lo, mid};
        exchange(comm, r ^ d, buf + give.lo * esize, (give.hi - give.lo) * esize, theirs, (keep.hi - keep.lo) * esize,
                 deadline);
        std::vector<double> sums(3 * counts.size(), 0.0);
        partial_dots(buf, theirs, keep, starts, dt, lower, sums);
        Comm group{comm.transport, {}, r % (2 * d)};
        for (int g = r - r % (2 * d); g < r - r % (2 * d) + 2 * d; ++g) group.members.push_back(comm.global(g));
        small_allreduce(group, sums.data(), sums.size(), DataType::FLOAT64, ReduceOp::SUM, deadline);
        combine(buf, theirs, keep, starts, dt, lower, sums);
        owned.push_back(keep);
      }
      for (int d = p2 / 2; d >= 1; d /= 2) {  // gather: swap owned ranges with the level's partner
        const Range mine = owned.back();
        owned.pop_back();
        const Range parent = owned.back();
        const Range other = (r & d) == 0 ? Range{mine.hi, parent.hi} : Range{parent.lo, mine.lo};
        exchange(comm, r ^ d, buf + mine.lo * esize, (mine.hi - mine.lo) * esize, buf + other.lo * esize,
                 (other.hi - other.lo) * esize, deadline);
      }
      if (r < rem) exchange(comm, r + p2, buf, n * esize, nullptr, 0, deadline);
    }
  }
  if (postscale != 1.0) scale_buffer(buf, n, dt, postscale);
}

}  // namespace phv
