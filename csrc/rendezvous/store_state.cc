#include "rendezvous/store_state.h"

#include <errno.h>

#include <algorithm>
#include <cstdlib>

#include "rendezvous/store_wire.h"

namespace phv {
namespace {
using namespace store_wire;

constexpr size_t kEntryOverhead = 64;  // bytes charged per stored key for the map's own bookkeeping

bool parse_int(const std::string& s, int64_t* v) {
  if (s.empty() || s.size() > 20) return false;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *v = x;
  return true;
}

StoreOutcome reply(uint32_t status, int64_t value, std::string body) {
  StoreOutcome out;
  out.reply = StoreReply{status, value, std::move(body)};
  return out;
}

StoreOutcome reject(std::string why) {
  StoreOutcome out;
  out.kind = StoreOutcome::Kind::REJECT;
  out.reason = std::move(why);
  return out;
}

}  // namespace

std::string StoreState::admit(StoreClientId client, uint32_t op, uint32_t nkeys, uint32_t body_len,
                              uint32_t first_key_bytes) {
  if (op == OP_SET && nkeys == 1 && body_len >= 4) {
    size_t key_len = std::min<size_t>(first_key_bytes, body_len - 4);
    size_t value_len = body_len - 4 - key_len;
    if (value_len > limits_.max_value_bytes)
      return "a value of " + std::to_string(value_len) + " bytes exceeds the store's limit of " +
             std::to_string(limits_.max_value_bytes) + " bytes per value (PYHOROVOD_STORE_MAX_VALUE_BYTES)";
  }
  // Reads store nothing: a full store still answers them, as long as their keys fit beside the rest.
  bool writes = op == OP_SET || op == OP_ADD;
  size_t after = (writes ? stored_ + kEntryOverhead : 0) + in_transit_ + body_len;
  if (after > limits_.max_total_bytes)
    return "the store holds " + std::to_string(stored_) + " bytes (" + std::to_string(in_transit_) +
           " more in transit); " + std::to_string(body_len) + " more would exceed its limit of " +
           std::to_string(limits_.max_total_bytes) + " bytes in total (PYHOROVOD_STORE_MAX_BYTES)";
  reserved_[client] += body_len;
  in_transit_ += body_len;
  return "";
}

StoreOutcome StoreState::handle(StoreClientId client, StoreRequest request, Deadline now) {
  const uint32_t op = request.op;
  std::vector<std::string>& keys = request.keys;
  if (op != OP_GET && op != OP_WAIT) release(client);  // a parked wait keeps its reservation
  bool one_key = keys.size() == 1;
  switch (op) {
    case OP_SET:
      if (!one_key) return reject("SET needs one key");
      put(keys[0], std::move(request.value));
      return reply(ST_OK, 0, "");
    case OP_CHECK:
      if (!one_key) return reject("CHECK needs one key");
      return reply(ST_OK, data_.count(keys[0]) ? 1 : 0, "");
    case OP_ADD: {
      if (!one_key) return reject("ADD needs one key");
      int64_t v = 0;
      auto it = data_.find(keys[0]);
      if (it != data_.end() && !parse_int(it->second, &v))
        return reply(ST_BAD_REQUEST, 0, "value of '" + keys[0] + "' is not an integer");
      v = static_cast<int64_t>(static_cast<uint64_t>(v) + static_cast<uint64_t>(request.arg));
      put(keys[0], std::to_string(v));
      return reply(ST_OK, v, "");
    }
    case OP_DELETE_PREFIX:
      if (!one_key) return reject("DELETE_PREFIX needs one key");
      return reply(ST_OK, static_cast<int64_t>(erase_prefix(keys[0])), "");
    case OP_GET:
    case OP_WAIT: {
      if (op == OP_GET && !one_key) return reject("GET needs one key");
      Wait wait{op, std::move(keys), now + std::chrono::milliseconds(std::max<int64_t>(0, request.arg))};
      StoreOutcome out;
      if (try_finish(wait, now, &out.reply)) {
        release(client);
        return out;
      }
      waits_[client] = std::move(wait);
      out.kind = StoreOutcome::Kind::PARKED;
      return out;
    }
    default: return reject("unknown op " + std::to_string(op));
  }
}

std::vector<std::pair<StoreClientId, StoreReply>> StoreState::finish_waits(Deadline now) {
  std::vector<std::pair<StoreClientId, StoreReply>> done;
  for (auto it = waits_.begin(); it != waits_.end();) {
    StoreReply r;
    if (!try_finish(it->second, now, &r)) {
      ++it;
      continue;
    }
    done.emplace_back(it->first, std::move(r));
    release(it->first);
    it = waits_.erase(it);
  }
  return done;
}

Deadline StoreState::next_deadline(Deadline latest) const {
  for (const auto& w : waits_) latest = std::min(latest, w.second.deadline);
  return latest;
}

void StoreState::drop(StoreClientId client) {
  release(client);
  waits_.erase(client);
}

bool StoreState::parked(StoreClientId client) const { return waits_.count(client) != 0; }

bool StoreState::try_finish(const Wait& wait, Deadline now, StoreReply* reply) const {
  std::vector<std::string> miss = missing(wait.keys);
  if (miss.empty()) {
    *reply = StoreReply{ST_OK, 0, wait.op == OP_GET ? data_.at(wait.keys[0]) : std::string()};
    return true;
  }
  if (now >= wait.deadline) {
    *reply = StoreReply{ST_TIMEOUT, 0, quoted_keys(miss)};
    return true;
  }
  return false;
}

std::vector<std::string> StoreState::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (!data_.count(k)) out.push_back(k);
  return out;
}

void StoreState::put(const std::string& key, std::string value) {
  auto it = data_.find(key);
  if (it != data_.end()) {
    stored_ -= it->second.size();
    it->second = std::move(value);
    stored_ += it->second.size();
  } else {
    stored_ += key.size() + value.size() + kEntryOverhead;
    data_.emplace(key, std::move(value));
  }
}

size_t StoreState::erase_prefix(const std::string& prefix) {
  size_t n = 0;
  for (auto it = data_.lower_bound(prefix); it != data_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    stored_ -= it->first.size() + it->second.size() + kEntryOverhead;
    it = data_.erase(it);
    ++n;
  }
  return n;
}

void StoreState::release(StoreClientId client) {
  auto it = reserved_.find(client);
  if (it == reserved_.end()) return;
  in_transit_ -= it->second;
  reserved_.erase(it);
}

}  // namespace phv
