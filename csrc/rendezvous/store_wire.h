// The store's wire format (tcp_store.h describes it), shared by the server and the client.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace phv {
namespace store_wire {

constexpr uint32_t kRequestMagic = 0x51564850;   // "PHVQ"
constexpr uint32_t kResponseMagic = 0x52564850;  // "PHVR"
constexpr size_t kHeaderBytes = 24;

// OP_DELETE_PREFIX: removes every key that begins with the one key given; the reply value is how many.
enum Op : uint32_t { OP_SET = 1, OP_GET = 2, OP_ADD = 3, OP_WAIT = 4, OP_CHECK = 5, OP_DELETE_PREFIX = 6 };
// ST_LIMIT: the request would exceed one of the store's memory limits; the body says which.
enum Status : uint32_t { ST_OK = 0, ST_TIMEOUT = 1, ST_BAD_REQUEST = 2, ST_LIMIT = 3 };

inline void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(char(v >> (8 * i)));
}
inline void put_i64(std::string& s, int64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(char(static_cast<uint64_t>(v) >> (8 * i)));
}
inline uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(p[i])) << (8 * i);
  return v;
}
inline int64_t get_i64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return static_cast<int64_t>(v);
}

inline std::string make_frame(uint32_t magic, uint32_t a, uint32_t c, int64_t arg, const std::string& body) {
  std::string out;
  out.reserve(kHeaderBytes + body.size());
  put_u32(out, magic);
  put_u32(out, a);
  put_u32(out, static_cast<uint32_t>(body.size()));
  put_u32(out, c);
  put_i64(out, arg);
  out += body;
  return out;
}

inline std::string quoted_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

}  // namespace store_wire
}  // namespace phv
