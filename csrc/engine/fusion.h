// Tensor fusion: ready allreduces that agree on dtype, reduce op, scale factors, process set and device
// are packed into one buffer (up to HOROVOD_FUSION_THRESHOLD bytes) and reduced in one pass, so that
// 100 small gradients cost one collective's latency instead of 100.
//
// The coordinator plans it (every rank then runs the same units): items are bucketed by fusion key in
// order of first appearance, a bucket closes when the next item would push it past the threshold, and
// the list is stably reordered bucket by bucket; an item is `fused` with the one before it when both are
// in the same bucket. Items larger than the threshold, or any item when the threshold is 0, run alone.
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
  void plan(ResponseList& list, const ResponseCache& cache, int64_t threshold_bytes);

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

// Fills buf with the identity of op (what a joined rank contributes): 0 for SUM/AVERAGE, 1 for PRODUCT,
// the largest value for MIN (+inf for floats), the lowest for MAX (-inf for floats).
void fill_identity(void* buf, size_t count, DataType dt, ReduceOp op);

// Points every item's `agreed`/`agreed_dim0s` at its descriptor (FULL) or its cache entry (CACHED).
void resolve_items(ResponseList& list, const ResponseCache& cache);

}  // namespace phv
