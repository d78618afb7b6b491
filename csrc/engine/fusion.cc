#include "engine/fusion.h"

#include <algorithm>
#include <cstring>

#include "common/reduce.h"

namespace phv {

namespace {

const Desc& desc_of(const ResponseItem& it, const ResponseCache& cache) {
  return it.type == ItemType::CACHED || it.type == ItemType::INLINE ? cache.entry(it.pos).desc : it.desc;
}

}  // namespace

bool same_fusion_key(const Desc& a, const Desc& b) {
  return a.dtype == b.dtype && a.op == b.op && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.set == b.set && a.device == b.device;
}

void FusionPlanner::plan(ResponseList& list, const ResponseCache& cache, int64_t threshold_bytes,
                         int64_t max_tensor_bytes) {
  open_.clear();
  order_.clear();
  int next_id = 0;
  bool in_order = true;
  for (size_t i = 0; i < list.n; ++i) {
    ResponseItem& it = list.items[i];
    it.fused = false;
    int id = -1;
    if (it.type == ItemType::CACHED || it.type == ItemType::FULL) {  // INLINE items are already reduced
      const Desc& d = desc_of(it, cache);
      int64_t bytes = static_cast<int64_t>(d.bytes());
      bool capped = max_tensor_bytes > 0 && d.device < 0 && bytes > max_tensor_bytes;
      if (d.kind == kDescAllreduce && bytes <= threshold_bytes && !capped) {
        for (Bucket& b : open_) {
          if (same_fusion_key(*b.key, d)) {
            if (b.bytes + bytes <= threshold_bytes) {
              b.bytes += bytes;
              id = b.id;
            } else {
              b = Bucket{&d, bytes, next_id++};  // this bucket is full: the item opens the next one
              id = b.id;
            }
            break;
          }
        }
        if (id < 0) {
          open_.push_back(Bucket{&d, bytes, next_id++});
          id = open_.back().id;
        }
      }
    }
    if (id < 0) id = next_id++;
    if (!order_.empty() && id < order_.back().first) in_order = false;
    order_.emplace_back(id, static_cast<int>(i));
  }
  if (!in_order) {
    std::stable_sort(order_.begin(), order_.end(),
                     [](const std::pair<int, int>& a, const std::pair<int, int>& b) { return a.first < b.first; });
    if (scratch_.size() < list.n) scratch_.resize(list.n);
    for (size_t i = 0; i < list.n; ++i) scratch_[i] = std::move(list.items[static_cast<size_t>(order_[i].second)]);
    for (size_t i = 0; i < list.n; ++i) list.items[i] = std::move(scratch_[i]);
  }
  for (size_t i = 1; i < list.n; ++i) list.items[i].fused = order_[i].first == order_[i - 1].first;
}

void resolve_items(ResponseList& list, const ResponseCache& cache) {
  for (size_t i = 0; i < list.n; ++i) {
    ResponseItem& it = list.items[i];
    if (it.type == ItemType::CACHED || it.type == ItemType::INLINE) {
      const CacheEntry& e = cache.entry(it.pos);
      it.agreed = &e.desc;
      it.agreed_dim0s = &e.dim0s;
    } else {
      it.agreed = &it.desc;
      it.agreed_dim0s = &it.dim0s;
    }
  }
}

}  // namespace phv
