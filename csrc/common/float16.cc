// Scalar float16 / bfloat16 conversions (declared in common/reduce.h), round-to-nearest-even.
#include <cstring>

#include "common/float16.h"
#include "common/reduce.h"

namespace phv {

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24; shift until the implicit bit (bit 10) appears
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf stays inf, NaN keeps its payload
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);  // rebias 15 -> 127
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // inf or NaN (NaN is made quiet, high payload bits kept)
    return sign | (a > 0x7f800000u ? static_cast<uint16_t>(0x7e00u | ((a >> 13) & 0x3ffu)) : 0x7c00u);
  }
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds (to even) past 65504: inf
  if (a < 0x38800000u) {
    // Below 2^-14: the result is subnormal, mant = round(|f| * 2^24). Adding 0.5f makes the FPU round
    // |f| to a multiple of 2^-24 (the ulp of 0.5f) with round-to-nearest-even; mant 1024 encodes 2^-14.
    float x;
    std::memcpy(&x, &a, 4);
    x += 0.5f;
    uint32_t xb;
    std::memcpy(&xb, &x, 4);
    return sign | static_cast<uint16_t>(xb - 0x3f000000u);
  }
  uint32_t odd = (a >> 13) & 1u;
  a += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;  // rebias, then round half to even
  return sign | static_cast<uint16_t>(a >> 13);
}

float bfloat16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return f16::bf16_round(u);
}
}  // namespace phv
