// FusionPlanner alone: exact plans (order of the items, which item is fused with the one before it) for
// lists of FULL and CACHED items, without an engine. Names say what each item is: "a" for a float32
// allreduce, "d" for float64, "b" for a broadcast, "g" for a GPU allreduce; the number is its size.
#include <cstdio>
#include <string>
#include <vector>

#include "engine/fusion.h"
#include "tests/check.h"

using namespace phv;
using namespace phv::testing;

namespace {

Desc make_desc(const std::string& name, OpType kind, DataType dtype, int64_t count, int device = -1) {
  Desc d;
  d.kind = desc_kind(kind);
  d.dtype = dtype;
  d.shape = {count};
  d.name = name;
  d.device = device;
  return d;
}

void add_full(ResponseList& list, const Desc& d) {
  ResponseItem& item = list.add();
  item.type = ItemType::FULL;
  item.desc = d;
}

// "name" for an item that runs alone or starts a unit, "+name" for one fused with the item before it.
std::string plan_str(const ResponseList& list, const ResponseCache& cache) {
  std::string out;
  for (size_t i = 0; i < list.n; ++i) {
    const ResponseItem& it = list.items[i];
    const Desc& d = it.type == ItemType::FULL ? it.desc : cache.entry(it.pos).desc;
    out += (i ? " " : "") + std::string(it.fused ? "+" : "") + d.name;
  }
  return out;
}

void expect_plan(const char* what, ResponseList& list, const ResponseCache& cache, int64_t threshold,
                 int64_t max_tensor, const std::string& want) {
  FusionPlanner planner;
  planner.plan(list, cache, threshold, max_tensor);
  std::string got = plan_str(list, cache);
  expect(got == want, std::string(what) + ": " + want, got);
}

// Float32 allreduces of 100, 200, 300 and 400 elements (400 .. 1600 bytes).
ResponseList four_allreduces() {
  ResponseList list;
  list.clear();
  for (int64_t k = 1; k <= 4; ++k)
    add_full(list, make_desc("a" + std::to_string(k * 100), OpType::ALLREDUCE, DataType::FLOAT32, k * 100));
  return list;
}

void test_thresholds() {
  ResponseCache cache(0);
  ResponseList list = four_allreduces();
  expect_plan("everything fits", list, cache, 1 << 20, 0, "a100 +a200 +a300 +a400");
  list = four_allreduces();
  expect_plan("threshold 0 fuses nothing", list, cache, 0, 0, "a100 a200 a300 a400");
  // 400 + 800 = 1200 <= 2000; + 1200 > 2000 closes the bucket; 1200 + 1600 > 2000 closes the next.
  list = four_allreduces();
  expect_plan("buckets close at the threshold", list, cache, 2000, 0, "a100 +a200 a300 a400");
  // An item above the threshold runs alone and does not close the open bucket.
  list.clear();
  add_full(list, make_desc("a100", OpType::ALLREDUCE, DataType::FLOAT32, 100));
  add_full(list, make_desc("a400", OpType::ALLREDUCE, DataType::FLOAT32, 400));
  add_full(list, make_desc("a200", OpType::ALLREDUCE, DataType::FLOAT32, 200));
  expect_plan("items above the threshold run alone", list, cache, 1300, 0, "a100 +a200 a400");
  list = four_allreduces();
  expect_plan("the CPU cap keeps large tensors alone", list, cache, 1 << 20, 1000, "a100 +a200 a300 a400");
}

void test_keys_and_kinds() {
  ResponseCache cache(0);
  ResponseList list;
  list.clear();
  add_full(list, make_desc("a1", OpType::ALLREDUCE, DataType::FLOAT32, 10));
  add_full(list, make_desc("d1", OpType::ALLREDUCE, DataType::FLOAT64, 10));
  add_full(list, make_desc("b1", OpType::BROADCAST, DataType::FLOAT32, 10));
  add_full(list, make_desc("a2", OpType::ALLREDUCE, DataType::FLOAT32, 10));
  add_full(list, make_desc("d2", OpType::ALLREDUCE, DataType::FLOAT64, 10));
  // Buckets in order of first appearance, stably reordered; a broadcast is never fused.
  expect_plan("buckets by dtype, reordered", list, cache, 1 << 20, 0, "a1 +a2 d1 +d2 b1");

  list.clear();
  Desc scaled = make_desc("s1", OpType::ALLREDUCE, DataType::FLOAT32, 10);
  scaled.postscale = 0.5;
  add_full(list, make_desc("a1", OpType::ALLREDUCE, DataType::FLOAT32, 10));
  add_full(list, scaled);
  Desc other_set = make_desc("p1", OpType::ALLREDUCE, DataType::FLOAT32, 10);
  other_set.set = 1;
  add_full(list, other_set);
  add_full(list, make_desc("a2", OpType::ALLREDUCE, DataType::FLOAT32, 10));
  expect_plan("scale factors and sets split buckets", list, cache, 1 << 20, 0, "a1 +a2 s1 p1");

  list.clear();
  add_full(list, make_desc("g1", OpType::ALLREDUCE, DataType::FLOAT32, 1000, 0));
  add_full(list, make_desc("a1", OpType::ALLREDUCE, DataType::FLOAT32, 10));
  add_full(list, make_desc("g2", OpType::ALLREDUCE, DataType::FLOAT32, 1000, 0));
  expect_plan("GPU tensors ignore the CPU cap", list, cache, 1 << 20, 100, "g1 +g2 a1");
}

void test_cached_and_inline_items() {
  ResponseCache cache(4);
  int p0 = cache.put(make_desc("c1", OpType::ALLREDUCE, DataType::FLOAT32, 10), {});
  int p1 = cache.put(make_desc("c2", OpType::ALLREDUCE, DataType::FLOAT32, 10), {});
  ResponseList list;
  list.clear();
  ResponseItem& cached = list.add();
  cached.type = ItemType::CACHED;
  cached.pos = p0;
  add_full(list, make_desc("d1", OpType::ALLREDUCE, DataType::FLOAT64, 10));
  ResponseItem& inlined = list.add();
  inlined.type = ItemType::INLINE;
  inlined.pos = p1;
  add_full(list, make_desc("a1", OpType::ALLREDUCE, DataType::FLOAT32, 10));
  // CACHED items are planned through the cache; INLINE ones are already reduced and stay alone.
  expect_plan("cached items fuse, inline ones do not", list, cache, 1 << 20, 0, "c1 +a1 d1 c2");
  resolve_items(list, cache);
  bool resolved = list.items[0].agreed == &cache.entry(p0).desc && list.items[1].agreed == &list.items[1].desc;
  expect(resolved, "resolve_items points CACHED items at the cache and FULL ones at their descriptor");
}

}  // namespace

int main() {
  test_thresholds();
  test_keys_and_kinds();
  test_cached_and_inline_items();
  return finish("fusion_planner_test");
}
