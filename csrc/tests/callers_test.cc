// The engine's front desk (engine/callers.h) alone, without an engine or threads: automatic names,
// handles and request numbers, the duplicate-name and single-join checks, the queue, completion and the
// automatic-name floor learnt from other ranks' failures; and RecyclingMap, the kind of table its names
// are kept in.
#include <memory>
#include <string>
#include <vector>

#include "engine/callers.h"
#include "engine/recycling_map.h"
#include "tests/check.h"

using namespace phv;
using namespace phv::testing;

namespace {

OpPtr make_op(const std::string& name, OpType type = OpType::ALLREDUCE, int set = 0) {
  auto op = std::make_shared<Op>();
  op->desc.kind = desc_kind(type);
  op->desc.name = name;
  op->desc.set = set;
  op->enqueued = Clock::now();
  return op;
}

void test_names() {
  Callers desk(0);
  std::string a1 = desk.auto_name(OpType::ALLREDUCE);
  std::string b1 = desk.auto_name(OpType::BROADCAST);
  std::string a2 = desk.auto_name(OpType::ALLREDUCE);
  expect(a1 == "allreduce.noname.1" && a2 == "allreduce.noname.2", "automatic names count per op type", a1 + " " + a2);
  expect(b1 == "broadcast.noname.1", "each op type has its own count", b1);
  expect(desk.set_change_name("add_process_set") == "add_process_set.1" &&
             desk.set_change_name("remove_process_set") == "remove_process_set.2",
         "process-set changes share one count");
}

void test_admission() {
  Callers desk(3);
  std::lock_guard<std::mutex> lock(desk.mutex());
  OpPtr x = make_op("x");
  desk.admit(x);
  expect(x->handle == 1 && x->seq == 1, "the first request gets handle 1, request #1");
  expect_error("a second 'x' in flight is refused", ErrorKind::INVALID_ARGUMENT, {"'x'", "already in flight on rank 3"},
               [&] { desk.admit(make_op("x")); });
  OpPtr other_set = make_op("x", OpType::ALLREDUCE, 1);
  desk.admit(other_set);
  expect(other_set->handle == 2, "the same name in another process set is another request");
  OpPtr join = make_op("join.noname.1", OpType::JOIN);
  desk.admit(join);
  expect_error("a second join in flight is refused", ErrorKind::INVALID_ARGUMENT, {"already has a join()"},
               [&] { desk.admit(make_op("join.noname.2", OpType::JOIN)); });
  expect(desk.find(x->handle) == x && desk.find(99) == nullptr, "handles find their request");

  expect(desk.queue(x) && !desk.queue(other_set), "the first request queued starts a burst");
  std::vector<OpPtr> taken;
  desk.take_queue(taken);
  expect(taken.size() == 2 && desk.queue_empty(), "taking the queue empties it");
}

void test_completion() {
  Callers desk(0);
  OpPtr x = make_op("x");
  OpPtr join = make_op("j", OpType::JOIN);
  {
    std::lock_guard<std::mutex> lock(desk.mutex());
    desk.admit(x);
    desk.admit(join);
  }
  expect(!desk.poll(x->handle), "poll: not done yet");
  desk.complete_all({x});
  desk.complete(join);
  expect(desk.poll(x->handle) && x->done, "poll: done once completed");
  {
    std::lock_guard<std::mutex> lock(desk.mutex());
    OpPtr again = make_op("x");
    desk.admit(again);  // throws if the name were still in flight
    desk.admit(make_op("j2", OpType::JOIN));
    desk.forget(x->handle);
  }
  expect(desk.find(x->handle) == nullptr, "a completed name and the join are free again; a forgotten handle is gone");
  expect_error("poll of an unknown handle", ErrorKind::INVALID_ARGUMENT, {"unknown handle"},
               [&] { desk.poll(x->handle); });

  desk.note_foreign_failure("allreduce.noname.7");
  desk.note_foreign_failure("allreduce.noname.4");
  desk.note_foreign_failure("grad.w");
  expect(desk.auto_name_floor("allreduce.noname.") == 7, "the floor is the highest foreign number",
         std::to_string(desk.auto_name_floor("allreduce.noname.")));
  expect(desk.auto_name_floor("broadcast.noname.") == 0, "no floor without a foreign failure");
}

}  // namespace

void test_recycling_map() {
  RecyclingMap<Key, OpPtr, KeyHash> table;
  OpPtr a = make_op("a"), b = make_op("b");
  expect(table.put(Key{0, "a"}, a) && table.size() == 1, "put inserts a new key");
  expect(!table.put(Key{0, "a"}, b) && table.at(Key{0, "a"}) == b, "put on a present key assigns its value");
  const void* node = &*table.find(Key{0, "a"});
  table.drop(Key{0, "a"});
  expect(table.empty() && b.use_count() == 1, "drop removes the key and holds no reference to its value");
  table.drop(Key{0, "missing"});
  expect(table.empty(), "dropping an absent key changes nothing");
  expect(table.put(Key{2, "a long name that does not fit a short string"}, a), "put after drop inserts");
  expect(&*table.find(Key{2, "a long name that does not fit a short string"}) == node,
         "the dropped node is the one put reuses");
  expect(
      table.find(Key{0, "a"}) == table.end() && table.at(Key{2, "a long name that does not fit a short string"}) == a,
      "the reused node holds the new key and value only");
  expect(table.put(Key{0, "b"}, b) && table.size() == 2, "with no spare node put allocates as usual");
  table.drop(Key{2, "a long name that does not fit a short string"});  // a spare node again
  expect(!table.put(Key{0, "b"}, a) && table.at(Key{0, "b"}) == a && table.size() == 1,
         "a present key with a spare node: the value is assigned, nothing inserted");
  expect(table.put(Key{0, "c"}, b) && &*table.find(Key{0, "c"}) == node && table.size() == 2,
         "the spare node is kept for the next new key");
}

int main() {
  test_names();
  test_admission();
  test_completion();
  test_recycling_map();
  return finish("callers_test");
}
