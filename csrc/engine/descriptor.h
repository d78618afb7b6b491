// What ranks must agree on before a named request runs (its "descriptor"), how it travels, and how the
// coordinator compares the descriptors of the ranks of a set.
//
// Terms: a request's *key* is (process set id, name): the same name in two process sets names two
// different tensors, as in Horovod where every process set negotiates on its own. Ranks in messages are
// global ranks.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>
#include "common/types.h"
#include "engine/wire.h"

namespace phv {

// Descriptor kinds beyond OpType: process-set changes are negotiated like collectives so that every rank
// applies them at the same point of the agreed order.
constexpr uint8_t kKindAddSet = 100;
constexpr uint8_t kKindRemoveSet = 101;

struct Key {
  int set = 0;
  std::string name;
  bool operator==(const Key& o) const { return set == o.set && name == o.name; }
};

struct KeyHash {
  size_t operator()(const Key& k) const { return std::hash<std::string>()(k.name) * 31u + static_cast<size_t>(k.set); }
};

struct Desc {
  uint8_t kind = 0;  // OpType value, kKindAddSet or kKindRemoveSet
  DataType dtype = DataType::FLOAT32;
  ReduceOp op = ReduceOp::SUM;
  int set = 0;
  int root = 0;
  int device = -1;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;  // add/remove set: the ranks / the id
  std::string name;
  std::string group_key;  // name of the group's first member; "" when not grouped
  int32_t group_size = 0;

  Key key() const { return Key{set, name}; }
  int64_t count() const;           // elements (product of shape; 1 for a scalar)
  int64_t row_elements() const;    // elements per dim-0 row (product of shape[1:])
  size_t bytes() const;
};

const char* kind_name(uint8_t kind);       // "allreduce", ..., "add_process_set"
std::string device_str(int device);        // "cpu", "cuda:0"

void encode_desc(WireWriter& w, const Desc& d);
void decode_desc(WireReader& r, Desc& d);

// Do allgather/alltoall compare all dims but the first? (Their dim 0 may differ per rank.)
bool dim0_may_differ(uint8_t kind);

// "" when `b` (from rank rb) agrees with `a` (from rank ra); otherwise the error text, e.g.
// "Mismatched allreduce tensor shapes: rank 0 sent [2, 3], rank 1 sent [2, 4]".
std::string compare_descs(const Desc& a, int ra, const Desc& b, int rb);

// Is `mine` the same request as the cached `agreed` (dim 0 compared separately by the caller)?
bool same_request(const Desc& agreed, const Desc& mine);

}  // namespace phv
