#include "engine/response_cache.h"

namespace phv {

ResponseCache::ResponseCache(int capacity) : capacity_(capacity < 0 ? 0 : capacity) {
  entries_.reserve(static_cast<size_t>(capacity_));
}

bool ResponseCache::cacheable(const Desc& d) { return d.group_size == 0 && d.kind <= kDescBarrier; }

int ResponseCache::lookup(const Key& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? -1 : it->second;
}

bool ResponseCache::hit(int pos, const Desc& mine, int my_index) const {
  const CacheEntry& e = entries_[static_cast<size_t>(pos)];
  if (!e.valid || !same_request(e.desc, mine)) return false;
  if (dim0_may_differ(e.desc.kind)) {
    if (my_index < 0 || static_cast<size_t>(my_index) >= e.dim0s.size()) return false;
    return !mine.shape.empty() && mine.shape[0] == e.dim0s[static_cast<size_t>(my_index)];
  }
  return true;
}

int ResponseCache::put(const Desc& desc, const std::vector<int64_t>& dim0s) {
  if (capacity_ == 0) return -1;
  Key key = desc.key();
  int pos = lookup(key);
  if (pos < 0) {
    if (entries_.size() < static_cast<size_t>(capacity_)) {
      pos = static_cast<int>(entries_.size());
      entries_.emplace_back();
    } else {
      // Free positions (from erase_set) first, else the least recently used.
      uint64_t oldest = UINT64_MAX;
      for (size_t i = 0; i < entries_.size(); ++i) {
        uint64_t age = entries_[i].valid ? entries_[i].last_used : 0;
        if (age < oldest) {
          oldest = age;
          pos = static_cast<int>(i);
        }
        if (!entries_[i].valid) break;
      }
      CacheEntry& victim = entries_[static_cast<size_t>(pos)];
      if (victim.valid) index_.erase(victim.desc.key());
    }
    entries_[static_cast<size_t>(pos)].generation++;
    index_[key] = pos;
  }
  CacheEntry& e = entries_[static_cast<size_t>(pos)];
  e.desc = desc;
  e.dim0s = dim0s;
  e.valid = true;
  e.last_used = ++clock_;
  return pos;
}

void ResponseCache::erase_set(int set) {
  for (auto& e : entries_) {
    if (e.valid && e.desc.set == set) {
      index_.erase(e.desc.key());
      e.valid = false;
      e.generation++;
    }
  }
}

}  // namespace phv
