// Internal to common/: 16-bit float <-> float32 block converters shared by the reduction and scaling
// kernels, and the attributes they are compiled with. Not part of the public interface (reduce.h has
// the scalar conversions).
//
// PHV_AVX2 functions are compiled for AVX2 + F16C + FMA regardless of the build's -march; callers pick
// them only when cpu_has_avx2() says the CPU has those (so the library still runs on any x86-64).
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/reduce.h"

#define PHV_INLINE inline __attribute__((always_inline))
#define PHV_AVX2 __attribute__((target("avx2,f16c,fma")))

#pragma GCC diagnostic ignored "-Wpsabi"  // __m256 values only ever live inside PHV_AVX2 functions

namespace phv {
namespace f16 {

// float32 bits -> bfloat16 bits: NaN -> quiet NaN with the same sign; everything else rounds half to
// even (inf stays inf, overflow goes to inf).
PHV_INLINE uint16_t bf16_round(uint32_t u) {
  return (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 0x40u)
                                         : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline bool cpu_has_avx2() {
  // Immutable after the first (thread-safe) initialisation.
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
  return has;
}

// 16-bit floats per block: two blocks of float32 (2 x 2 KiB) live on the stack.
constexpr size_t kBlock = 512;  // 16-bit floats per block: 2 x 2 KiB of float32 on the stack

// 16-bit float <-> float32 block converters.
struct Bf16Conv {
  static PHV_INLINE void widen(const uint16_t* __restrict in, float* __restrict out, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      uint32_t bits = static_cast<uint32_t>(in[i]) << 16;
      std::memcpy(&out[i], &bits, 4);
    }
  }
  static PHV_INLINE void narrow(const float* __restrict in, uint16_t* __restrict out, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, &in[i], 4);
      out[i] = bf16_round(u);
    }
  }
};
struct HalfSoftConv {  // portable fallback (CPUs without F16C)
  static PHV_INLINE void widen(const uint16_t* in, float* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = half_to_float(in[i]);
  }
  static PHV_INLINE void narrow(const float* in, uint16_t* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = float_to_half(in[i]);
  }
};
struct HalfF16cConv {  // only instantiated inside PHV_AVX2 functions; tails go through a padded block
  PHV_AVX2 static inline void widen(const uint16_t* in, float* out, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
    if (i < n) {
      uint16_t tmp[8] = {0};
      float ftmp[8];
      std::memcpy(tmp, in + i, (n - i) * 2);
      _mm256_storeu_ps(ftmp, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tmp))));
      std::memcpy(out + i, ftmp, (n - i) * 4);
    }
  }
  PHV_AVX2 static inline void narrow(const float* in, uint16_t* out, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {
      float ftmp[8] = {0};
      uint16_t tmp[8];
      std::memcpy(ftmp, in + i, (n - i) * 4);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(tmp),
                       _mm256_cvtps_ph(_mm256_loadu_ps(ftmp), _MM_FROUND_TO_NEAREST_INT));
      std::memcpy(out + i, tmp, (n - i) * 2);
    }
  }
};

}  // namespace f16
}  // namespace phv
