// The alpha-beta model behind the algorithm knobs (see tuning.h for alpha, beta).
#include "algorithms/tuning.h"

#include <algorithm>
#include <cmath>

namespace phv {

namespace {
constexpr size_t kMinSegment = 4096;            // below this the per-message cost dominates any overlap
constexpr size_t kMaxSegment = size_t(4) << 20;  // above this the pipeline fills too slowly
constexpr size_t kSmallCap = size_t(1) << 20;  // recursive doubling never above this (no pipelining)
}  // namespace

size_t segment_size(const Tuning& tuning, size_t chunk_bytes, bool shared_memory) {
  if (tuning.segment_bytes > 0) return tuning.segment_bytes;
  // A message costs alpha + s/beta; s = 8*alpha*beta keeps the latency share near 11% even with nothing
  // overlapped (with several segments in flight it mostly hides). Over TCP that is 512 KiB: 128 KiB to
  // 1 MiB measured within noise of each other (CPU per call within 8%, RESULTS.md), smaller
  // costs system calls, larger ones push the scratch slots out of L2. Through shared memory
  // (alpha_shm_s) it is 256 KiB, which with 4 in flight fills the 1 MiB ring: 64 KiB segments starved
  // the pipeline, 1 MiB ones were 14% slower.
  const double alpha = shared_memory ? tuning.alpha_shm_s : tuning.alpha_s;
  double target = 8.0 * alpha * tuning.beta_bytes_per_s;
  // The power of two nearest to the target (geometrically): aligned segments.
  size_t seg = kMinSegment;
  while (seg * 2 <= kMaxSegment && seg * 2 * std::sqrt(0.5) <= target) seg *= 2;
  if (chunk_bytes == 0) return seg;
  // Balance: n segments of nearly equal size rather than full segments plus a sliver, rounded up to 64
  // bytes (a cache line) so segment starts stay aligned.
  size_t n = (chunk_bytes + seg - 1) / seg;
  size_t even = (chunk_bytes + n - 1) / n;
  even = (even + 63) / 64 * 64;
  return std::max<size_t>(even, 64);
}

size_t small_message_threshold(const Tuning& tuning, int world, bool shared_memory) {
  if (tuning.small_threshold_bytes > 0) return tuning.small_threshold_bytes;
  if (world <= 1) return 0;
  // Recursive doubling over p' = 2^floor(log2 p) ranks takes log2 p' rounds, plus 2 fix-up rounds when
  // p is not a power of two; each round moves the whole message M, and every round but the last fix-up
  // reduces all of M with nothing to overlap. The ring moves 2(p-1)/p * M in 2(p-1) messages and reduces
  // (p-1)/p * M, overlapped with the transfers (so its reduce term is an upper bound):
  //   T_rd   = L*alpha + L*M/beta + R*M/gamma              (L rounds, R reducing rounds)
  //   T_ring = 2(p-1)*alpha + 2(p-1)/p*M/beta + (p-1)/p*M/gamma
  // Equal at M* = (2(p-1) - L)*alpha / ((L - 2(p-1)/p)/beta + (R - (p-1)/p)/gamma); recursive doubling
  // wins below. At p = 2: M* = 2*alpha*gamma. Measured crossovers (RESULTS.md): p=2 shared
  // memory ~64 KiB, TCP ~256 KiB; p=4 ~32-64 KiB and ~128 KiB -- the defaults of tuning.h reproduce them.
  const int p = world;
  int log2p = 0;
  while ((2 << log2p) <= p) ++log2p;
  const bool pow2 = (p & (p - 1)) == 0;
  const double L = log2p + (pow2 ? 0.0 : 2.0);
  const double R = log2p + (pow2 ? 0.0 : 1.0);
  const double alpha = shared_memory ? tuning.alpha_shm_s : tuning.alpha_s;
  const double num = (2.0 * (p - 1) - L) * alpha;
  const double den = (L - 2.0 * (p - 1) / p) / tuning.beta_bytes_per_s +
                     (R - static_cast<double>(p - 1) / p) / tuning.gamma_bytes_per_s;
  if (num <= 0) return 0;
  double m = den <= 0 ? static_cast<double>(kSmallCap) : num / den;
  return static_cast<size_t>(std::min<double>(m, static_cast<double>(kSmallCap)));
}

}  // namespace phv
