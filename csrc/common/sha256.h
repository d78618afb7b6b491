// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), used only by the connection handshake to prove
// knowledge of the per-job secret. Not a general crypto library: no streaming HMAC, no constant-time
// guarantees beyond the tag comparison.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace phv {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t len);
  Digest finish();  // the object must not be updated afterwards

 private:
  void block(const uint8_t* p);  // compresses one 64-byte block into state_
  uint32_t state_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_len_ = 0;  // bytes
};

Digest sha256(const void* data, size_t len);

// HMAC-SHA256 of `message` under `key` (keys longer than 64 bytes are hashed first).
Digest hmac_sha256(const std::string& key, const std::string& message);

// Compares two tags without an early exit, so timing does not reveal the first differing byte.
bool digest_equal(const uint8_t* a, const uint8_t* b, size_t len);

std::string to_hex(const uint8_t* data, size_t len);

}  // namespace phv
