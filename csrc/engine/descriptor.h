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

// What a descriptor asks the ranks to agree on: a collective, whose kind is its OpType code, or a change of
// the process sets, negotiated like a collective so that every rank applies it at the same point of the
// agreed order. Unscoped, so that code comparing a kind with an OpType code keeps working; one byte on the
// wire.
enum DescKind : uint8_t {
  kDescAllreduce = static_cast<uint8_t>(OpType::ALLREDUCE),
  kDescAllgather = static_cast<uint8_t>(OpType::ALLGATHER),
  kDescBroadcast = static_cast<uint8_t>(OpType::BROADCAST),
  kDescAlltoall = static_cast<uint8_t>(OpType::ALLTOALL),
  kDescReducescatter = static_cast<uint8_t>(OpType::REDUCESCATTER),
  kDescBarrier = static_cast<uint8_t>(OpType::BARRIER),
  kDescJoin = static_cast<uint8_t>(OpType::JOIN),
  kDescAddProcessSet = 100,
  kDescRemoveProcessSet = 101,
};

constexpr DescKind desc_kind(OpType type) { return static_cast<DescKind>(type); }
constexpr bool is_set_change(DescKind kind) { return kind == kDescAddProcessSet || kind == kDescRemoveProcessSet; }

struct Key {
  int set = 0;
  std::string name;
  bool operator==(const Key& o) const { return set == o.set && name == o.name; }
};

struct KeyHash {
  size_t operator()(const Key& k) const { return std::hash<std::string>()(k.name) * 31u + static_cast<size_t>(k.set); }
};

struct Desc {
  DescKind kind = kDescAllreduce;
  DataType dtype = DataType::FLOAT32;
  ReduceOp op = ReduceOp::SUM;
  int set = 0;
  int root = 0;
  int device = -1;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;
  std::string name;
  std::string group_key;  // name of the group's first member; "" when not grouped
  int32_t group_size = 0;
  std::vector<int> set_ranks;  // kDescAddProcessSet: the new set's global ranks, ascending
  int removed_set = 0;         // kDescRemoveProcessSet: the id of the set to remove
  // Alltoall. In a rank's own descriptor: its splits are not dim 0 / n rows to each of the n ranks. In the
  // agreed one: some member's are not. When no member's are, every rank knows what it receives from the
  // agreed dim 0s alone, and the exchange of split counts before the data is skipped (engine/executor.h).
  bool uneven_splits = false;

  Key key() const { return Key{set, name}; }
  int64_t count() const;           // elements (product of shape; 1 for a scalar)
  int64_t row_elements() const;    // elements per dim-0 row (product of shape[1:])
  size_t bytes() const;
};

// Horovod's split of a reducescatter: every rank gets dim0 / n rows, the first dim0 % n ranks one more.
inline int64_t reducescatter_rows(int64_t dim0, int n, int r) { return dim0 / n + (r < dim0 % n ? 1 : 0); }

const char* kind_name(DescKind kind);      // "allreduce", ..., "add_process_set"
std::string device_str(int device);        // "cpu", "cuda:0"

void encode_desc(WireWriter& w, const Desc& d);
void decode_desc(WireReader& r, Desc& d);

// Do allgather/alltoall compare all dims but the first? (Their dim 0 may differ per rank.)
bool dim0_may_differ(DescKind kind);

// "" when `b` (from rank rb) agrees with `a` (from rank ra); otherwise the error text, e.g.
// "Mismatched allreduce tensor shapes: rank 0 sent [2, 3], rank 1 sent [2, 4]".
std::string compare_descs(const Desc& a, int ra, const Desc& b, int rb);

// Is `mine` the same request as the cached `agreed` (dim 0 compared separately by the caller)?
bool same_request(const Desc& agreed, const Desc& mine);

}  // namespace phv
