// The alpha-beta model behind the algorithm knobs (see tuning.h for alpha, beta).
#include "algorithms/tuning.h"

#include <algorithm>
#include <cmath>

namespace phv {

namespace {
constexpr size_t kMinSegment = 4096;            // below this the per-message cost dominates any overlap
constexpr size_t kMaxSegment = size_t(4) << 20;  // above this the pipeline fills too slowly
constexpr size_t kSmallCap = size_t(256) << 10;  // recursive doubling never above this (no pipelining)
}  // namespace

size_t segment_size(const Tuning& tuning, size_t chunk_bytes) {
  if (tuning.segment_bytes > 0) return tuning.segment_bytes;
  // A message costs alpha + s/beta. Choosing s = 4*alpha*beta keeps the latency share at ~20% of a
  // segment's time even with nothing overlapped (with several segments in flight it mostly hides), while
  // a segment still fits comfortably in L2 so that the reduction reads a warm scratch buffer.
  double target = 4.0 * tuning.alpha_s * tuning.beta_bytes_per_s;
  size_t seg = kMinSegment;
  while (seg * 2 <= target && seg * 2 <= kMaxSegment) seg *= 2;  // a power of two: aligned segments
  if (chunk_bytes == 0) return seg;
  // Balance: n segments of nearly equal size rather than full segments plus a sliver, rounded up to 64
  // bytes (a cache line) so segment starts stay aligned.
  size_t n = (chunk_bytes + seg - 1) / seg;
  size_t even = (chunk_bytes + n - 1) / n;
  even = (even + 63) / 64 * 64;
  return std::max<size_t>(even, 64);
}

size_t small_message_threshold(const Tuning& tuning, int world) {
  if (tuning.small_threshold_bytes > 0) return tuning.small_threshold_bytes;
  if (world <= 1) return 0;
  // Recursive doubling over p' = 2^floor(log2 p) ranks takes L = log2 p' rounds, plus 2 fix-up rounds
  // when p is not a power of two; each round moves the whole message M:
  //   T_rd   = L * (alpha + M/beta)
  //   T_ring = 2(p-1) * alpha + 2(p-1)/p * M/beta
  // Equal at M* = alpha*beta * (2(p-1) - L) / (L - 2(p-1)/p); below M* recursive doubling wins. When the
  // denominator is <= 0 (p = 2, 4) it wins at every size in the model, but it neither pipelines nor
  // overlaps the reduction, so cap it.
  int p = world;
  int log2p = 0;
  while ((2 << log2p) <= p) ++log2p;
  double L = log2p + (((p & (p - 1)) != 0) ? 2.0 : 0.0);
  double ring_msgs = 2.0 * (p - 1);
  double ring_share = 2.0 * (p - 1) / p;
  double ab = tuning.alpha_s * tuning.beta_bytes_per_s;
  if (ring_msgs <= L) return 0;
  double m;
  if (L - ring_share <= 0) {
    m = static_cast<double>(kSmallCap);
  } else {
    m = ab * (ring_msgs - L) / (L - ring_share);
  }
  return static_cast<size_t>(std::min<double>(m, static_cast<double>(kSmallCap)));
}

}  // namespace phv
