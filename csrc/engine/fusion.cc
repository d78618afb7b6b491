#include "engine/fusion.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/reduce.h"

namespace phv {

namespace {

const Desc& desc_of(const ResponseItem& it, const ResponseCache& cache) {
  return it.type == ItemType::CACHED || it.type == ItemType::INLINE ? cache.entry(it.pos).desc : it.desc;
}

template <typename T>
void fill(void* buf, size_t count, T value) {
  T* p = static_cast<T*>(buf);
  std::fill(p, p + count, value);
}

template <typename T>
T identity_int(ReduceOp op) {
  if (op == ReduceOp::PRODUCT) return T(1);
  if (op == ReduceOp::MIN) return std::numeric_limits<T>::max();
  if (op == ReduceOp::MAX) return std::numeric_limits<T>::lowest();
  return T(0);
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

void fill_identity(void* buf, size_t count, DataType dt, ReduceOp op) {
  switch (dt) {
    case DataType::UINT8: fill<uint8_t>(buf, count, identity_int<uint8_t>(op)); break;
    case DataType::INT8: fill<int8_t>(buf, count, identity_int<int8_t>(op)); break;
    case DataType::INT16: fill<int16_t>(buf, count, identity_int<int16_t>(op)); break;
    case DataType::INT32: fill<int32_t>(buf, count, identity_int<int32_t>(op)); break;
    case DataType::INT64: fill<int64_t>(buf, count, identity_int<int64_t>(op)); break;
    case DataType::BOOL:  // MIN/PRODUCT are logical and (identity true); SUM/MAX logical or (false)
      fill<uint8_t>(buf, count, (op == ReduceOp::MIN || op == ReduceOp::PRODUCT) ? 1 : 0);
      break;
    case DataType::FLOAT32: {
      float inf = std::numeric_limits<float>::infinity();
      fill<float>(buf, count, op == ReduceOp::PRODUCT ? 1.f : op == ReduceOp::MIN ? inf : op == ReduceOp::MAX ? -inf : 0.f);
      break;
    }
    case DataType::FLOAT64: {
      double inf = std::numeric_limits<double>::infinity();
      fill<double>(buf, count, op == ReduceOp::PRODUCT ? 1.0 : op == ReduceOp::MIN ? inf : op == ReduceOp::MAX ? -inf : 0.0);
      break;
    }
    case DataType::FLOAT16:  // 0x3C00 = 1.0, 0x7C00 = +inf, 0xFC00 = -inf
      fill<uint16_t>(buf, count, op == ReduceOp::PRODUCT ? 0x3C00 : op == ReduceOp::MIN ? 0x7C00 : op == ReduceOp::MAX ? 0xFC00 : 0);
      break;
    case DataType::BFLOAT16:  // 0x3F80 = 1.0, 0x7F80 = +inf, 0xFF80 = -inf
      fill<uint16_t>(buf, count, op == ReduceOp::PRODUCT ? 0x3F80 : op == ReduceOp::MIN ? 0x7F80 : op == ReduceOp::MAX ? 0xFF80 : 0);
      break;
  }
}

}  // namespace phv
