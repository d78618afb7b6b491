// RecyclingMap: an unordered_map that keeps the node of its last drop() for its next put(). The engine's
// name tables gain and lose one entry per request; a loop of one synchronous request would otherwise
// allocate and free a node in each of them on every call (about 5% of a 4 B allreduce's local work).
#pragma once
#include <unordered_map>
#include <utility>

namespace phv {

template <typename K, typename V, typename Hash>
class RecyclingMap : public std::unordered_map<K, V, Hash> {
  using Base = std::unordered_map<K, V, Hash>;

 public:
  // key -> value, inserted or, when the key is there, assigned; true when it was inserted.
  bool put(const K& key, V value) {
    if (!spare_) return Base::insert_or_assign(key, std::move(value)).second;
    spare_.key() = key;
    spare_.mapped() = std::move(value);
    auto done = Base::insert(std::move(spare_));
    if (done.inserted) return true;
    done.position->second = std::move(done.node.mapped());
    spare_ = std::move(done.node);
    spare_.mapped() = V{};
    return false;
  }

  // Removes the key, if there, keeping its node (with a default value: no reference is held) for put().
  void drop(const K& key) {
    auto node = Base::extract(key);
    if (!node || spare_) return;
    node.mapped() = V{};
    spare_ = std::move(node);
  }

 private:
  typename Base::node_type spare_;
};

}  // namespace phv
