// Knobs of the algorithms and the alpha-beta(-gamma) model that picks them.
//   alpha: per-message latency (s); beta: bandwidth (bytes/s); gamma: reduction throughput (bytes/s of
//   the reduced buffer, when the reduction does not overlap communication).
//   Ring allreduce of M bytes over p ranks: T = 2(p-1)*alpha + 2(p-1)/p * M/beta (+ pipeline fill).
// Defaults fitted to this project's 2-core test machine (benchmarks/RESULTS.md).
#pragma once
#include <cstddef>

namespace phv {

struct Tuning {
  double alpha_s = 20e-6;              // one loopback TCP hop, wake-ups included (fit of the crossovers)
  double alpha_shm_s = 8e-6;           // one hop through a shared-memory ring (peers spin, then sleep)
  double beta_bytes_per_s = 4e9;       // one loopback TCP stream, with headroom
  double gamma_bytes_per_s = 5e9;      // reduce_into of a buffer that is not in cache
  size_t segment_bytes = 0;            // 0: from the model (segment_size()); PYHOROVOD_SEGMENT_BYTES overrides
  size_t small_threshold_bytes = 0;    // 0: from the model; below it allreduce uses small_allreduce
  int max_segments_in_flight = 4;      // per direction in the ring pipeline
};

// Segment size for a ring pass where each chunk has chunk_bytes: large enough that alpha is amortised
// (segment/beta >> alpha), small enough that the pipeline fills quickly. Honours tuning.segment_bytes.
// shared_memory: the links are shared-memory rings (alpha_shm_s, else alpha_s).
size_t segment_size(const Tuning& tuning, size_t chunk_bytes, bool shared_memory = false);

// Message size (whole buffer) below which the latency-optimal algorithm (recursive doubling) wins over
// the ring. shared_memory: every link of the group is a shared-memory ring (alpha_shm_s, else alpha_s).
size_t small_message_threshold(const Tuning& tuning, int world, bool shared_memory = false);

}  // namespace phv
