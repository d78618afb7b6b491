// Tensor fusion: ready allreduces that agree on dtype, reduce op, scale factors, process set and device
// are packed into one buffer (up to HOROVOD_FUSION_THRESHOLD bytes) and reduced in one pass, so that
// 100 small gradients cost one collective's latency instead of 100.
//
// The coordinator plans it (every rank then runs the same units): items are bucketed by fusion key in
// order of first appearance, a bucket closes when the next item would push it past the threshold, and
// the list is stably reordered bucket by bucket; an item is `fused` with the one before it when both are
// in the same bucket. Items larger than the threshold, or any item when the threshold is 0, run alone.
//
// Large CPU tensors run alone too (max_tensor_bytes): fusing saves one collective's latency (2(p-1)
// alphas, ~10-100 us here) but costs two copies of the tensor (into the buffer, out of it), which pass
// that latency near 0.5 MiB at 12.8 GB/s per core; a lone tensor is reduced in place with no copy. With
// the 4.2M-parameter MLP of anchors.md (four 4 MiB weights), 2 ranks: 3.8 ms per gradient allreduce
// instead of 10.2 ms (CPU 4.8 ms instead of 9.7). GPU tensors are always fused (device copies are cheap
// next to a kernel launch and an NCCL call).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>
#include "common/types.h"
#include "engine/messages.h"
#include "engine/response_cache.h"

namespace phv {

class FusionPlanner {
 public:
  // Reorders list.items[0..n) and sets `fused`. CACHED items are read through `cache`.
  // max_tensor_bytes: CPU tensors above it are not fused (0: no cap).
  void plan(ResponseList& list, const ResponseCache& cache, int64_t threshold_bytes, int64_t max_tensor_bytes);

 private:
  struct Bucket {
    const Desc* key;
    int64_t bytes;
    int id;
  };
  std::vector<Bucket> open_;
  std::vector<std::pair<int, int>> order_;  // (bucket id, original index)
  std::vector<ResponseItem> scratch_;
};

bool same_fusion_key(const Desc& a, const Desc& b);

// Points every item's `agreed`/`agreed_dim0s` at its descriptor (FULL) or its cache entry (CACHED).
void resolve_items(ResponseList& list, const ResponseCache& cache);

}  // namespace phv
