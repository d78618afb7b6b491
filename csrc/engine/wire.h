// Byte-level encoding of the engine's negotiation messages: little-endian (common/byte_codec.h), every read
// bounds-checked so that a corrupt message is an
// HvdError, never an out-of-range read. The writer appends to a caller-owned vector that keeps its
// capacity between rounds, so steady-state rounds do not allocate.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include "common/byte_codec.h"
#include "common/enforce.h"
#include "common/error.h"

namespace phv {

class WireWriter {
 public:
  explicit WireWriter(std::vector<uint8_t>& out) : out_(out) { out_.clear(); }

  template <typename T>
  void put(T value) {
    append_le(out_, value);
  }
  void put_bytes(const void* data, size_t len) {
    size_t at = out_.size();
    out_.resize(at + len);
    if (len > 0) std::memcpy(out_.data() + at, data, len);
  }
  void put_string(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    put_bytes(s.data(), s.size());
  }
  void put_i64s(const std::vector<int64_t>& v) {
    put<uint32_t>(static_cast<uint32_t>(v.size()));
    size_t at = out_.size();
    out_.resize(at + v.size() * sizeof(int64_t));
    store_le_array(out_.data() + at, v.data(), v.size());
  }
  // Overwrites a value written earlier (e.g. a count or length known only at the end).
  template <typename T>
  void patch(size_t offset, T value) {
    store_le(out_.data() + offset, value);
  }
  size_t size() const { return out_.size(); }

 private:
  std::vector<uint8_t>& out_;
};

class WireReader {
 public:
  WireReader(const uint8_t* data, size_t len) : data_(data), len_(len) {}

  template <typename T>
  T get() {
    need(sizeof(T));
    T value = load_le<T>(data_ + pos_);
    pos_ += sizeof(T);
    return value;
  }
  void get_string(std::string& s) {
    uint32_t n = get<uint32_t>();
    need(n);
    s.assign(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
  }
  void get_i64s(std::vector<int64_t>& v) {
    uint32_t n = get<uint32_t>();
    need(static_cast<size_t>(n) * sizeof(int64_t));
    v.resize(n);
    load_le_array(v.data(), data_ + pos_, n);
    pos_ += n * sizeof(int64_t);
  }
  const uint8_t* take(size_t n) {
    need(n);
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  size_t remaining() const { return len_ - pos_; }

 private:
  void need(size_t n) const {
    PHV_ENFORCE(n <= len_ - pos_, "corrupt engine negotiation message: needs ", n, " more bytes at offset ", pos_,
                " of ", len_);
  }
  const uint8_t* data_;
  size_t len_;
  size_t pos_ = 0;
};

}  // namespace phv
