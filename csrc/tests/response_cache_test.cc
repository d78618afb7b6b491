// ResponseCache alone: positions, hits, least-recently-used eviction, freed positions of a removed
// process set and generations, with exact expected positions.
#include <string>
#include <vector>

#include "engine/response_cache.h"
#include "tests/check.h"

using namespace phv;
using namespace phv::testing;

namespace {

Desc allreduce(const std::string& name, int64_t count, int set = 0) {
  Desc d;
  d.kind = desc_kind(OpType::ALLREDUCE);
  d.shape = {count};
  d.name = name;
  d.set = set;
  return d;
}

void test_positions_and_hits() {
  ResponseCache cache(3);
  expect(cache.enabled() && cache.capacity() == 3, "capacity 3 is enabled");
  int a = cache.put(allreduce("a", 4), {});
  int b = cache.put(allreduce("b", 4), {});
  expect(a == 0 && b == 1, "positions are handed out in order", std::to_string(a) + ", " + std::to_string(b));
  expect(cache.lookup(Key{0, "a"}) == 0 && cache.lookup(Key{0, "c"}) == -1, "lookup by key");
  expect(cache.lookup(Key{1, "a"}) == -1, "the same name in another set is another key");
  expect(cache.hit(a, allreduce("a", 4), 0), "the same request hits");
  expect(!cache.hit(a, allreduce("a", 5), 0), "a changed shape misses");
  expect(cache.put(allreduce("a", 4), {}) == 0, "putting a cached key again keeps its position");
  expect(!cache.valid(2) && !cache.valid(-1) && !cache.valid(99), "unused positions are not valid");

  Desc gather;
  gather.kind = desc_kind(OpType::ALLGATHER);
  gather.shape = {3, 2};
  gather.name = "g";
  int g = cache.put(gather, {3, 5});
  Desc mine = gather;
  mine.shape = {5, 2};
  expect(cache.hit(g, mine, 1) && !cache.hit(g, mine, 0) && !cache.hit(g, mine, 2),
         "allgather hits only with this member's own dim 0");
  Desc scatter = gather;
  scatter.kind = desc_kind(OpType::ALLTOALL);
  scatter.name = "t";
  int t = cache.put(scatter, {3, 5});
  Desc mine_t = scatter;
  mine_t.shape = {5, 2};
  expect(cache.hit(t, mine_t, 1) && !cache.hit(t, mine_t, 0), "alltoall hits only with this member's own dim 0");
  // Agreed even splits skip the exchange of split counts: uneven splits of mine must miss them. Agreed
  // uneven ones exchange, which is right for even splits too.
  mine_t.uneven_splits = true;
  expect(!cache.hit(t, mine_t, 1), "uneven splits miss an entry agreed with even splits");
  scatter.uneven_splits = true;
  int tu = cache.put(scatter, {3, 5});
  expect(tu == t && cache.hit(t, mine_t, 1), "uneven splits hit an entry agreed with uneven splits");
  mine_t.uneven_splits = false;
  expect(cache.hit(t, mine_t, 1), "even splits hit an entry agreed with uneven splits");
}

void test_eviction() {
  ResponseCache cache(3);
  cache.put(allreduce("a", 1), {});  // 0
  cache.put(allreduce("b", 1), {});  // 1
  cache.put(allreduce("c", 1), {});  // 2
  uint64_t gen_b = cache.entry(1).generation;
  cache.touch(0);  // a is now the most recently used: b is the oldest
  int d = cache.put(allreduce("d", 1), {});
  expect(d == 1, "the least recently used entry is evicted", "position " + std::to_string(d));
  expect(cache.lookup(Key{0, "b"}) == -1 && cache.lookup(Key{0, "d"}) == 1, "the evicted key is gone");
  expect(cache.entry(1).generation == gen_b + 1, "a reused position gets a new generation");
  int e = cache.put(allreduce("e", 1), {});
  expect(e == 2, "next the oldest is c", "position " + std::to_string(e));
  cache.put(allreduce("a", 1), {});  // refreshes a
  int f = cache.put(allreduce("f", 1), {});
  expect(f == 1, "refreshing counts as a use", "position " + std::to_string(f));
}

void test_erase_set_and_cacheable() {
  ResponseCache cache(3);
  cache.put(allreduce("a", 1, 0), {});  // 0
  cache.put(allreduce("x", 1, 2), {});  // 1
  cache.put(allreduce("y", 1, 2), {});  // 2
  cache.erase_set(2);
  expect(!cache.valid(1) && !cache.valid(2) && cache.valid(0), "a removed set's entries are freed");
  expect(cache.lookup(Key{2, "x"}) == -1, "a removed set's keys are gone");
  cache.touch(0);
  int b = cache.put(allreduce("b", 1), {});
  expect(b == 1, "freed positions are reused before any eviction", "position " + std::to_string(b));
  expect(cache.valid(0), "no valid entry was evicted while a position was free");

  ResponseCache off(0);
  expect(!off.enabled() && off.put(allreduce("a", 1), {}) == -1, "capacity 0 caches nothing");
  Desc grouped = allreduce("g", 1);
  grouped.group_size = 2;
  Desc set_change;
  set_change.kind = kDescAddProcessSet;
  expect(ResponseCache::cacheable(allreduce("a", 1)) && !ResponseCache::cacheable(grouped) &&
             !ResponseCache::cacheable(set_change),
         "grouped requests and process-set changes are not cacheable");
}

}  // namespace

int main() {
  test_positions_and_hits();
  test_eviction();
  test_erase_set_and_cacheable();
  return finish("response_cache_test");
}
