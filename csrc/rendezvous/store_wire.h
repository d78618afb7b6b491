// The store's frame codec (tcp_store.h describes the format), shared by the server and the client: headers,
// request bodies and replies. Pure functions over bytes; the caps on lengths are the caller's to check.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/byte_codec.h"

namespace phv {
namespace store_wire {

constexpr uint32_t kRequestMagic = 0x51564850;   // "PHVQ"
constexpr uint32_t kResponseMagic = 0x52564850;  // "PHVR"
constexpr size_t kHeaderBytes = 24;

// OP_DELETE_PREFIX: removes every key that begins with the one key given; the reply value is how many.
enum Op : uint32_t { OP_SET = 1, OP_GET = 2, OP_ADD = 3, OP_WAIT = 4, OP_CHECK = 5, OP_DELETE_PREFIX = 6 };
// ST_LIMIT: the request would exceed one of the store's memory limits; the body says which.
enum Status : uint32_t { ST_OK = 0, ST_TIMEOUT = 1, ST_BAD_REQUEST = 2, ST_LIMIT = 3 };

// The fixed 24-byte head of every frame. Requests: code = op, count = nkeys, arg = ADD's delta or the
// GET/WAIT timeout in ms. Replies: code = status, count = 0, arg = the reply's value.
struct FrameHeader {
  uint32_t magic = 0;
  uint32_t code = 0;
  uint32_t body_len = 0;
  uint32_t count = 0;
  int64_t arg = 0;
};

inline FrameHeader decode_header(const char* p) {
  FrameHeader h;
  h.magic = load_le<uint32_t>(p);
  h.code = load_le<uint32_t>(p + 4);
  h.body_len = load_le<uint32_t>(p + 8);
  h.count = load_le<uint32_t>(p + 12);
  h.arg = load_le<int64_t>(p + 16);
  return h;
}

inline std::string make_frame(uint32_t magic, uint32_t code, uint32_t count, int64_t arg, const std::string& body) {
  std::string out;
  out.reserve(kHeaderBytes + body.size());
  append_le<uint32_t>(out, magic);
  append_le<uint32_t>(out, code);
  append_le<uint32_t>(out, static_cast<uint32_t>(body.size()));
  append_le<uint32_t>(out, count);
  append_le<int64_t>(out, arg);
  out += body;
  return out;
}

// A request's body: every key as (length u32 | bytes), then the value.
inline std::string encode_request_body(const std::vector<std::string>& keys, const std::string& value) {
  std::string body;
  for (const auto& k : keys) {
    append_le<uint32_t>(body, static_cast<uint32_t>(k.size()));
    body += k;
  }
  body += value;
  return body;
}

inline std::string encode_reply(uint32_t status, int64_t value, const std::string& body) {
  return make_frame(kResponseMagic, status, 0, value, body);
}

// The length of the first key of a body whose first 4 bytes have arrived (the rest may not have yet).
inline uint32_t first_key_bytes(const char* body) { return load_le<uint32_t>(body); }

// Splits a complete body into nkeys keys and the value; "" on success, else what is wrong with it.
inline std::string decode_request_body(const char* body, size_t len, uint32_t nkeys, uint32_t max_key_bytes,
                                       std::vector<std::string>* keys, std::string* value) {
  size_t off = 0;
  for (uint32_t i = 0; i < nkeys; ++i) {
    if (len - off < 4) return "truncated key";
    uint32_t klen = load_le<uint32_t>(body + off);
    off += 4;
    if (klen > max_key_bytes || klen > len - off) return "bad key length";
    keys->emplace_back(body + off, klen);
    off += klen;
  }
  value->assign(body + off, len - off);
  return "";
}

inline std::string quoted_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

}  // namespace store_wire
}  // namespace phv
