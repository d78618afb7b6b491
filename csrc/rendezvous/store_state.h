// What the rendezvous store means, apart from how it is reached: the keys and values, the memory limits
// (StoreLimits), and the GET/WAIT requests parked until their keys exist or their time is up. A pure state
// machine: decoded requests in, replies out, no sockets and no clock of its own (every call that may end a
// wait is given the time), so it is tested alone and TcpStoreServer only moves bytes.
//
// Connections are named by an id the caller chooses. A request goes through admit() once its header has
// arrived -- the body's bytes count against max_total_bytes from then until the request ends (for a
// parked wait: until it is answered or its connection drops) -- and through handle() once it is complete.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/types.h"
#include "rendezvous/tcp_store.h"

namespace phv {

using StoreClientId = uint64_t;

struct StoreRequest {
  uint32_t op = 0;  // store_wire::Op
  std::vector<std::string> keys;
  std::string value;
  int64_t arg = 0;  // ADD: the delta; GET/WAIT: the timeout in ms
};

struct StoreReply {
  uint32_t status = 0;  // store_wire::Status
  int64_t value = 0;
  std::string body;
  bool operator==(const StoreReply& o) const { return status == o.status && value == o.value && body == o.body; }
};

struct StoreOutcome {
  enum class Kind { REPLY, PARKED, REJECT };
  Kind kind = Kind::REPLY;
  StoreReply reply;    // REPLY: send it
  std::string reason;  // REJECT: the request is malformed; close the connection saying why
};

class StoreState {
 public:
  explicit StoreState(StoreLimits limits) : limits_(limits) {}

  // "" when a request of body_len bytes may be buffered (its bytes are then reserved), else why not: the
  // refusal the client gets as ST_LIMIT while the body is read and dropped. first_key_bytes: the length of
  // the first key of a SET of one key (its first 4 body bytes), which tells the value's size.
  std::string admit(StoreClientId client, uint32_t op, uint32_t nkeys, uint32_t body_len, uint32_t first_key_bytes);

  // Executes a complete request. GET and WAIT whose keys are missing are parked until finish_waits().
  StoreOutcome handle(StoreClientId client, StoreRequest request, Deadline now);

  // The parked requests that are over at `now`: their keys exist, or their deadline passed (TIMEOUT with
  // the missing keys).
  std::vector<std::pair<StoreClientId, StoreReply>> finish_waits(Deadline now);

  // The earliest deadline of a parked request, if it is before `latest`; else `latest`.
  Deadline next_deadline(Deadline latest) const;

  // The connection is gone: its reservation and its parked request go with it.
  void drop(StoreClientId client);

  bool parked(StoreClientId client) const;
  size_t stored_bytes() const { return stored_; }         // keys + values + an overhead per key
  size_t in_transit_bytes() const { return in_transit_; }  // bodies admitted, not yet ended

 private:
  struct Wait {
    uint32_t op = 0;
    std::vector<std::string> keys;
    Deadline deadline;
  };
  void put(const std::string& key, std::string value);
  size_t erase_prefix(const std::string& prefix);
  void release(StoreClientId client);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  bool try_finish(const Wait& wait, Deadline now, StoreReply* reply) const;

  StoreLimits limits_;
  std::map<std::string, std::string> data_;
  size_t stored_ = 0;
  size_t in_transit_ = 0;
  std::map<StoreClientId, size_t> reserved_;  // admitted body bytes per connection
  std::map<StoreClientId, Wait> waits_;
};

}  // namespace phv
