// StoreState alone, without a socket or a thread: the exact reply to every request the store supports,
// parked GET/WAIT answered when their keys appear or their deadline passes (the time is given, never
// read), the memory limits' refusals and the reservation of admitted bodies; and the frame codec shared
// by the server and the client.
#include <cstdio>
#include <string>

#include "rendezvous/store_state.h"
#include "rendezvous/store_wire.h"
#include "tests/check.h"

using namespace phv;
using namespace phv::store_wire;
using namespace phv::testing;

namespace {

using Kind = StoreOutcome::Kind;
const Deadline t0{};  // the store never reads the clock: any fixed origin will do

Deadline at_ms(int ms) { return t0 + std::chrono::milliseconds(ms); }

StoreRequest req(uint32_t op, std::vector<std::string> keys, std::string value = "", int64_t arg = 0) {
  return StoreRequest{op, std::move(keys), std::move(value), arg};
}

// Admits and handles one request at `now`: what a complete frame from `client` gets.
StoreOutcome call(StoreState& s, StoreClientId client, StoreRequest r, Deadline now = t0) {
  std::string body = encode_request_body(r.keys, r.value);
  uint32_t first = r.keys.empty() ? 0 : static_cast<uint32_t>(r.keys[0].size());
  std::string why =
      s.admit(client, r.op, static_cast<uint32_t>(r.keys.size()), static_cast<uint32_t>(body.size()), first);
  if (!why.empty()) return StoreOutcome{Kind::REPLY, StoreReply{ST_LIMIT, 0, why}, ""};
  return s.handle(client, std::move(r), now);
}

bool replied(const StoreOutcome& o, uint32_t status, int64_t value, const std::string& body) {
  return o.kind == Kind::REPLY && o.reply == StoreReply{status, value, body};
}

void requests_and_replies() {
  std::printf("-- every op's reply\n");
  StoreState s{StoreLimits{}};
  CHECK(replied(call(s, 1, req(OP_CHECK, {"a"})), ST_OK, 0, ""));
  CHECK(replied(call(s, 1, req(OP_SET, {"a"}, std::string("x\0y", 3))), ST_OK, 0, ""));
  CHECK(replied(call(s, 1, req(OP_CHECK, {"a"})), ST_OK, 1, ""));
  CHECK(replied(call(s, 1, req(OP_GET, {"a"}, "", 1000)), ST_OK, 0, std::string("x\0y", 3)));
  CHECK(replied(call(s, 1, req(OP_ADD, {"n"}, "", 5)), ST_OK, 5, ""));
  CHECK(replied(call(s, 1, req(OP_ADD, {"n"}, "", -7)), ST_OK, -2, ""));
  CHECK(replied(call(s, 1, req(OP_GET, {"n"})), ST_OK, 0, "-2"));
  CHECK(replied(call(s, 1, req(OP_ADD, {"a"}, "", 1)), ST_BAD_REQUEST, 0, "value of 'a' is not an integer"));
  CHECK(replied(call(s, 1, req(OP_WAIT, {"a", "n"})), ST_OK, 0, ""));
  for (const char* k : {"gen/1/x", "gen/1/y", "gen/10", "gen/2/x"}) call(s, 1, req(OP_SET, {k}, "v"));
  CHECK(replied(call(s, 1, req(OP_DELETE_PREFIX, {"gen/1/"})), ST_OK, 2, ""));
  CHECK(replied(call(s, 1, req(OP_CHECK, {"gen/10"})), ST_OK, 1, ""));
  CHECK(replied(call(s, 1, req(OP_DELETE_PREFIX, {"nothing/"})), ST_OK, 0, ""));
  CHECK(s.in_transit_bytes() == 0);
  // Malformed requests close the connection, saying why.
  StoreOutcome o = call(s, 2, req(OP_SET, {"a", "b"}));
  CHECK(o.kind == Kind::REJECT && o.reason == "SET needs one key");
  o = call(s, 2, req(OP_GET, {}));
  CHECK(o.kind == Kind::REJECT && o.reason == "GET needs one key");
  o = call(s, 2, req(99, {"a"}));
  CHECK(o.kind == Kind::REJECT && o.reason == "unknown op 99");
  s.drop(2);
  CHECK(s.in_transit_bytes() == 0);
}

void parked_waits() {
  std::printf("-- parked get/wait\n");
  StoreState s{StoreLimits{}};
  CHECK(call(s, 1, req(OP_GET, {"late"}, "", 500)).kind == Kind::PARKED);
  CHECK(call(s, 2, req(OP_WAIT, {"w1", "w2"}, "", 300)).kind == Kind::PARKED);
  CHECK(call(s, 3, req(OP_WAIT, {"never"}, "", 100), at_ms(0)).kind == Kind::PARKED);
  CHECK(s.parked(1) && s.parked(2) && s.parked(3) && !s.parked(4));
  CHECK(s.next_deadline(at_ms(10000)) == at_ms(100));
  CHECK(s.next_deadline(at_ms(50)) == at_ms(50));
  CHECK(s.finish_waits(at_ms(99)).empty());
  // The deadline passes: TIMEOUT naming the missing keys.
  auto done = s.finish_waits(at_ms(100));
  CHECK(done.size() == 1 && done[0].first == 3 && done[0].second == (StoreReply{ST_TIMEOUT, 0, "'never'"}));
  // Keys appear from another connection: the get gets the value, the wait an empty OK once both exist.
  CHECK(replied(call(s, 4, req(OP_SET, {"late"}, "v")), ST_OK, 0, ""));
  CHECK(replied(call(s, 4, req(OP_SET, {"w1"}, "1")), ST_OK, 0, ""));
  done = s.finish_waits(at_ms(150));
  CHECK(done.size() == 1 && done[0].first == 1 && done[0].second == (StoreReply{ST_OK, 0, "v"}));
  done = s.finish_waits(at_ms(300));
  CHECK(done.size() == 1 && done[0].first == 2 && done[0].second == (StoreReply{ST_TIMEOUT, 0, "'w2'"}));
  CHECK(!s.parked(1) && !s.parked(2) && s.in_transit_bytes() == 0);
  // A zero (or negative) timeout answers at once; a dropped connection's wait is never answered.
  CHECK(replied(call(s, 5, req(OP_GET, {"x"}, "", 0)), ST_TIMEOUT, 0, "'x'"));
  CHECK(replied(call(s, 5, req(OP_WAIT, {"x", "late", "y"}, "", -5)), ST_TIMEOUT, 0, "'x', 'y'"));
  CHECK(call(s, 6, req(OP_GET, {"x"}, "", 100)).kind == Kind::PARKED);
  CHECK(s.in_transit_bytes() > 0);
  s.drop(6);
  CHECK(s.finish_waits(at_ms(10000)).empty() && s.in_transit_bytes() == 0);
}

void limits() {
  std::printf("-- limits\n");
  StoreLimits limits;
  limits.max_value_bytes = 100;
  limits.max_total_bytes = 1000;
  StoreState s{limits};
  // A value over the limit is refused from the header and the key length alone.
  CHECK(s.admit(1, OP_SET, 1, 4 + 1 + 101, 1) ==
        "a value of 101 bytes exceeds the store's limit of 100 bytes per value (PYHOROVOD_STORE_MAX_VALUE_BYTES)");
  CHECK(s.in_transit_bytes() == 0);
  CHECK(replied(call(s, 1, req(OP_SET, {"k"}, std::string(100, 'v'))), ST_OK, 0, ""));
  CHECK(s.stored_bytes() == 1 + 100 + 64);
  // Admitted bodies are reserved until their request ends.
  CHECK(s.admit(2, OP_SET, 1, 105, 1).empty());
  CHECK(s.in_transit_bytes() == 105);
  CHECK(s.admit(3, OP_ADD, 1, 700, 1) ==
        "the store holds 165 bytes (105 more in transit); 700 more would exceed its limit of 1000 bytes in total "
        "(PYHOROVOD_STORE_MAX_BYTES)");
  // Reads store nothing: the same bytes fit as a read beside the stored keys.
  CHECK(s.admit(3, OP_WAIT, 1, 700, 0).empty());
  CHECK(s.handle(3, req(OP_WAIT, {"k"}), t0).kind == Kind::REPLY);
  CHECK(replied(s.handle(2, req(OP_SET, {"k"}, std::string(100, 'w')), t0), ST_OK, 0, ""));
  CHECK(s.in_transit_bytes() == 0 && s.stored_bytes() == 165);
  CHECK(replied(call(s, 1, req(OP_DELETE_PREFIX, {""})), ST_OK, 1, ""));
  CHECK(s.stored_bytes() == 0);
}

void frame_codec() {
  std::printf("-- frame codec\n");
  std::string body = encode_request_body({"ab", ""}, "val");
  CHECK(body == std::string("\x02\0\0\0ab\0\0\0\0val", 13));
  std::string frame = make_frame(kRequestMagic, OP_WAIT, 2, -2, body);
  CHECK(frame.size() == kHeaderBytes + body.size());
  CHECK(frame.compare(0, 4, "PHVQ") == 0);
  FrameHeader h = decode_header(frame.data());
  CHECK(h.magic == kRequestMagic && h.code == OP_WAIT && h.body_len == 13 && h.count == 2 && h.arg == -2);
  std::vector<std::string> keys;
  std::string value;
  CHECK(decode_request_body(frame.data() + kHeaderBytes, h.body_len, h.count, 4096, &keys, &value).empty());
  CHECK(keys == (std::vector<std::string>{"ab", ""}) && value == "val");
  keys.clear();
  CHECK(decode_request_body(body.data(), 6, 2, 4096, &keys, &value) == "truncated key");
  keys.clear();
  CHECK(decode_request_body(body.data(), body.size(), 1, 1, &keys, &value) == "bad key length");
  std::string reply = encode_reply(ST_TIMEOUT, 7, "'k'");
  h = decode_header(reply.data());
  CHECK(reply.compare(0, 4, "PHVR") == 0 && h.code == ST_TIMEOUT && h.arg == 7 && h.count == 0 && h.body_len == 3);
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  requests_and_replies();
  parked_waits();
  limits();
  frame_codec();
  return finish("store_state_test");
}
