// Descriptors of process-set changes (their own kinds and fields, the wire layout they always had) and the
// internal checks' messages (file and line of the check).
#include <cstdint>
#include <string>
#include <vector>

#include "common/enforce.h"
#include "engine/descriptor.h"
#include "engine/wire.h"
#include "tests/check.h"

namespace {
using namespace phv;
using phv::testing::expect;
using phv::testing::expect_error;

Desc round_trip(const Desc& d, std::vector<uint8_t>& bytes) {
  WireWriter w(bytes);
  encode_desc(w, d);
  WireReader r(bytes.data(), bytes.size());
  Desc out;
  decode_desc(r, out);
  return out;
}

void set_changes_travel_in_the_place_of_a_shape() {
  Desc add;
  add.kind = kDescAddProcessSet;
  add.name = "add_process_set.1";
  add.set_ranks = {0, 2, 3};
  // The same descriptor as it was written when the ranks rode in the shape: the bytes must not change.
  Desc as_shape = add;
  as_shape.kind = kDescAllreduce;
  as_shape.set_ranks.clear();
  as_shape.shape = {0, 2, 3};
  std::vector<uint8_t> bytes, reference;
  Desc back = round_trip(add, bytes);
  round_trip(as_shape, reference);
  reference[0] = kDescAddProcessSet;
  expect(bytes == reference, "add_process_set: the wire bytes are those of a shape holding the ranks");
  expect(back.kind == kDescAddProcessSet && back.set_ranks == add.set_ranks && back.shape.empty(),
         "add_process_set: kind and ranks survive the wire");

  Desc remove;
  remove.kind = kDescRemoveProcessSet;
  remove.name = "remove_process_set.2";
  remove.removed_set = 7;
  back = round_trip(remove, bytes);
  expect(back.kind == kDescRemoveProcessSet && back.removed_set == 7 && back.set_ranks.empty(),
         "remove_process_set: kind and id survive the wire");
  expect(std::string(kind_name(back.kind)) == "remove_process_set", "remove_process_set: its name");
}

void set_changes_compare_by_their_arguments() {
  Desc a;
  a.kind = kDescAddProcessSet;
  a.set_ranks = {0, 1};
  Desc b = a;
  expect(compare_descs(a, 0, b, 1).empty(), "the same ranks agree");
  b.set_ranks = {0, 2};
  std::string msg = compare_descs(a, 0, b, 1);
  expect(msg == "Mismatched add_process_set arguments: rank 0 sent [0, 1], rank 1 sent [0, 2]", msg);
  Desc r1, r2;
  r1.kind = r2.kind = kDescRemoveProcessSet;
  r1.removed_set = 1;
  r2.removed_set = 2;
  msg = compare_descs(r1, 0, r2, 3);
  expect(msg == "Mismatched remove_process_set arguments: rank 0 sent [1], rank 3 sent [2]", msg);
  Desc collective;
  collective.kind = desc_kind(OpType::BROADCAST);
  expect(!is_set_change(collective.kind) && collective.kind == kDescBroadcast &&
             collective.kind == static_cast<uint8_t>(OpType::BROADCAST),
         "a collective's kind is its OpType code");
}

void a_failed_check_names_its_place() {
  const int line = __LINE__ + 1;
  auto failing = [] { PHV_ENFORCE(1 + 1 == 3, "arithmetic is off by ", 1); };
  expect_error(
      "PHV_ENFORCE: INTERNAL, the message, then file and line", ErrorKind::INTERNAL,
      {"arithmetic is off by 1 (internal check failed at csrc/tests/descriptor_test.cc:" + std::to_string(line) + ")"},
      failing);
  expect_error("PHV_ENFORCE_FAIL", ErrorKind::INTERNAL, {"unreachable", "descriptor_test.cc:"},
               [] { PHV_ENFORCE_FAIL("unreachable"); });
  bool thrown = false;
  try {
    PHV_ENFORCE(true, "never");
  } catch (const HvdError&) {
    thrown = true;
  }
  expect(!thrown, "PHV_ENFORCE: a holding condition throws nothing");
  expect(std::string(source_path("/any/where/csrc/engine/x.cc")) == "csrc/engine/x.cc", "source_path");
  expect(std::string(source_path("x.cc")) == "x.cc", "source_path without csrc/");
}

void corrupt_kinds_are_internal_errors() {
  Desc d;
  d.kind = kDescRemoveProcessSet;
  d.removed_set = 1;
  std::vector<uint8_t> bytes;
  {
    WireWriter w(bytes);
    encode_desc(w, d);
  }
  bytes[1] = 200;  // the dtype byte
  WireReader r(bytes.data(), bytes.size());
  Desc out;
  expect_error("a corrupt dtype byte", ErrorKind::INTERNAL, {"corrupt engine negotiation message", "descriptor.cc:"},
               [&] { decode_desc(r, out); });
}

void uneven_splits_travel_and_do_not_need_to_agree() {
  Desc a;
  a.kind = kDescAlltoall;
  a.shape = {6, 2};
  a.name = "t";
  Desc b = a;
  b.uneven_splits = true;
  std::vector<uint8_t> bytes;
  expect(round_trip(b, bytes).uneven_splits && !round_trip(a, bytes).uneven_splits,
         "alltoall: the uneven-splits flag survives the wire");
  expect(compare_descs(a, 0, b, 1).empty(), "alltoall: members may split differently");
  expect(!same_request(a, b) && same_request(b, a), "alltoall: uneven splits are not the request agreed as even");
}

}  // namespace

int main() {
  set_changes_travel_in_the_place_of_a_shape();
  set_changes_compare_by_their_arguments();
  a_failed_check_names_its_place();
  corrupt_kinds_are_internal_errors();
  uneven_splits_travel_and_do_not_need_to_agree();
  return phv::testing::finish("descriptor_test");
}
