// Little-endian encoding of integers and floating-point values into bytes, the one codec behind every
// fixed layout this project puts on a wire: the connection handshake, the store's frames, the transport's
// message headers and the engine's negotiation messages. Values are written byte by byte, so a frame
// means the same on every host; the compilers fold the byte loops into single loads and stores on a
// little-endian host, and bulk arrays are plain copies there.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace phv {

namespace byte_codec_detail {
template <size_t N>
struct UnsignedOfSize;
template <>
struct UnsignedOfSize<1> {
  using type = uint8_t;
};
template <>
struct UnsignedOfSize<2> {
  using type = uint16_t;
};
template <>
struct UnsignedOfSize<4> {
  using type = uint32_t;
};
template <>
struct UnsignedOfSize<8> {
  using type = uint64_t;
};

template <typename T>
using Bits = typename UnsignedOfSize<sizeof(T)>::type;

template <typename T>
constexpr void require_codable() {
  static_assert(std::is_arithmetic<T>::value || std::is_enum<T>::value, "the byte codec takes numbers only");
}
}  // namespace byte_codec_detail

// Writes `value` at `at` (sizeof(T) bytes, least significant first).
template <typename T>
inline void store_le(void* at, T value) {
  byte_codec_detail::require_codable<T>();
  byte_codec_detail::Bits<T> bits;
  std::memcpy(&bits, &value, sizeof(T));
  uint8_t* p = static_cast<uint8_t*>(at);
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(bits >> (8 * i));
}

// Reads a T written by store_le.
template <typename T>
inline T load_le(const void* at) {
  byte_codec_detail::require_codable<T>();
  using B = byte_codec_detail::Bits<T>;
  const uint8_t* p = static_cast<const uint8_t*>(at);
  B bits = 0;
  for (size_t i = 0; i < sizeof(T); ++i) bits = static_cast<B>(bits | (B(p[i]) << (8 * i)));
  T value;
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

// Appends sizeof(T) bytes to a growing frame.
template <typename T>
inline void append_le(std::string& out, T value) {
  char bytes[sizeof(T)];
  store_le(bytes, value);
  out.append(bytes, sizeof(T));
}
template <typename T>
inline void append_le(std::vector<uint8_t>& out, T value) {
  size_t at = out.size();
  out.resize(at + sizeof(T));
  store_le(out.data() + at, value);
}

// Arrays of n values: one copy on a little-endian host, element by element elsewhere.
template <typename T>
inline void store_le_array(void* at, const T* values, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  byte_codec_detail::require_codable<T>();
  if (n > 0) std::memcpy(at, values, n * sizeof(T));
#else
  for (size_t i = 0; i < n; ++i) store_le(static_cast<uint8_t*>(at) + i * sizeof(T), values[i]);
#endif
}
template <typename T>
inline void load_le_array(T* values, const void* at, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  byte_codec_detail::require_codable<T>();
  if (n > 0) std::memcpy(values, at, n * sizeof(T));
#else
  for (size_t i = 0; i < n; ++i) values[i] = load_le<T>(static_cast<const uint8_t*>(at) + i * sizeof(T));
#endif
}

}  // namespace phv
