// The response cache: after a request has been negotiated once, every rank remembers the agreed
// descriptor at a bit position. When the same request (same key, same descriptor) comes again, a rank
// reports only that bit, and the coordinator ANDs the bits of the ranks of the set: steady state costs
// one small bit vector per rank per round instead of names and shapes (HOROVOD_CACHE_CAPACITY).
//
// Every rank applies the same insertions, touches and evictions in the same order (the agreed response
// order), so bit positions mean the same tensor on every rank without ever being exchanged. Eviction
// is least-recently-used by a logical clock (ties impossible), hence deterministic.
//
// A position's `generation` grows whenever it is given to another key, so state kept about a position
// across rounds (the coordinator's stall tracking) can tell a reused position from the old one.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>
#include "engine/descriptor.h"

namespace phv {

struct CacheEntry {
  Desc desc;                  // as agreed (dim 0 of allgather/alltoall: that of the lowest member)
  std::vector<int64_t> dim0s; // allgather, alltoall: dim 0 of every member, in set order
  uint64_t last_used = 0;
  uint64_t generation = 0;
  bool valid = false;
};

class ResponseCache {
 public:
  explicit ResponseCache(int capacity);

  int capacity() const { return capacity_; }
  bool enabled() const { return capacity_ > 0; }
  // Can a descriptor of this kind be cached at all? (Grouped requests and internal kinds are not.)
  static bool cacheable(const Desc& d);

  int lookup(const Key& key) const;  // bit position, or -1
  const CacheEntry& entry(int pos) const { return entries_[static_cast<size_t>(pos)]; }
  bool valid(int pos) const {
    return pos >= 0 && static_cast<size_t>(pos) < entries_.size() && entries_[static_cast<size_t>(pos)].valid;
  }
  // Would `mine` (from the member at set index my_index) be answered by the entry at pos?
  bool hit(int pos, const Desc& mine, int my_index) const;

  // Inserts or refreshes the agreed response for desc.key(); returns its position.
  int put(const Desc& desc, const std::vector<int64_t>& dim0s);
  void touch(int pos) { entries_[static_cast<size_t>(pos)].last_used = ++clock_; }
  void erase_set(int set);  // a removed process set's entries become free positions

 private:
  int capacity_;
  uint64_t clock_ = 0;
  std::vector<CacheEntry> entries_;
  std::unordered_map<Key, int, KeyHash> index_;
};

}  // namespace phv
