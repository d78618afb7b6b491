// Knobs of the algorithms and the alpha-beta model that picks them.
//   alpha: per-message latency (s); beta: bandwidth (bytes/s).
//   Ring allreduce of M bytes over p ranks: T = 2(p-1)*alpha + 2(p-1)/p * M/beta (+ pipeline fill).
#pragma once
#include <cstddef>

namespace phv {

struct Tuning {
  double alpha_s = 30e-6;              // one loopback TCP hop, receiver sleeping (anchors.md)
  double beta_bytes_per_s = 4e9;       // one loopback TCP stream, with headroom
  size_t segment_bytes = 0;            // 0: from the model (segment_size()); PYHOROVOD_SEGMENT_BYTES overrides
  size_t small_threshold_bytes = 0;    // 0: from the model; below it allreduce uses small_allreduce
  int max_segments_in_flight = 4;      // per direction in the ring pipeline
};

// Segment size for a ring pass where each chunk has chunk_bytes: large enough that alpha is amortised
// (segment/beta >> alpha), small enough that the pipeline fills quickly. Honours tuning.segment_bytes.
size_t segment_size(const Tuning& tuning, size_t chunk_bytes);

// Message size (whole buffer) below which the latency-optimal algorithm wins.
size_t small_message_threshold(const Tuning& tuning, int world);

}  // namespace phv
