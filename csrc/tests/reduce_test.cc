// Reduction kernels (common/reduce.h): every dtype x op against a scalar reference, bit for bit, at
// lengths that hit the SIMD tails and the 16-bit block boundaries, with every aliasing form; scale_buffer;
// float16/bfloat16 conversions (exact known encodings, ties to even, subnormals, inf, NaN, all 65536
// halves round-tripped, SIMD and scalar paths compared). Prints a float32 SUM throughput figure.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/reduce.h"
#include "tests/check.h"

using namespace phv;
using namespace phv::testing;

namespace {
const ReduceOp kOps[] = {ReduceOp::SUM, ReduceOp::MIN, ReduceOp::MAX, ReduceOp::PRODUCT};
const size_t kLens[] = {0, 1, 3, 7, 8, 9, 31, 33, 63, 64, 65, 511, 512, 513, 1025, 4099};
std::mt19937_64 rng(7);

// Scalar references. Integers: wrap modulo 2^bits (computed in uint64).
template <class T>
T ref_int(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    case ReduceOp::PRODUCT: return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    case ReduceOp::MIN: return a < b ? a : b;
    default: return a < b ? b : a;
  }
}
template <class F>
F ref_float(F a, F b, ReduceOp op) {
  if (op == ReduceOp::SUM) return a + b;
  if (op == ReduceOp::PRODUCT) return a * b;
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (op == ReduceOp::MIN) return b < a ? b : a;
  return a < b ? b : a;
}

struct Half {
  static float widen(uint16_t h) { return half_to_float(h); }
  static uint16_t narrow(float f) { return float_to_half(f); }
};
struct Bf16 {
  static float widen(uint16_t h) { return bfloat16_to_float(h); }
  static uint16_t narrow(float f) { return float_to_bfloat16(f); }
};

// Equal bits, or both NaN.
template <class T>
bool same(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(x) && std::isnan(y)) return true;
  }
  return std::memcmp(&x, &y, sizeof(T)) == 0;
}
template <class Conv>
bool same16(uint16_t x, uint16_t y) {
  if (std::isnan(Conv::widen(x)) && std::isnan(Conv::widen(y))) return true;
  return x == y;
}

template <class T>
std::vector<T> random_values(size_t n, bool small) {
  std::vector<T> v(n);
  for (auto& x : v) {
    if constexpr (std::is_floating_point_v<T>) {
      x = small ? static_cast<T>(static_cast<int>(rng() % 21) - 10)
                : static_cast<T>(std::ldexp(double(int64_t(rng() % 2000001) - 1000000), int(rng() % 40) - 30));
    } else {
      x = static_cast<T>(rng());
    }
  }
  return v;
}

// Runs every entry point on (a, b) and compares with ref(a[i], b[i]).
template <class T, class Ref, class Eq>
void check_all_forms(DataType dt, ReduceOp op, const std::vector<T>& a, const std::vector<T>& b, Ref ref, Eq eq,
                     const char* name) {
  size_t n = a.size();
  std::vector<T> expect(n), expect_aa(n);
  for (size_t i = 0; i < n; ++i) {
    expect[i] = ref(a[i], b[i]);
    expect_aa[i] = ref(a[i], a[i]);
  }
  auto verify = [&](const std::vector<T>& got, const std::vector<T>& want, const char* form) {
    for (size_t i = 0; i < n; ++i)
      CHECK(eq(got[i], want[i]), "%s %s %s n=%zu i=%zu", name, reduce_op_name(op), form, n, i);
  };
  std::vector<T> d = a;
  reduce_into(d.data(), b.data(), n, dt, op);
  verify(d, expect, "into");
  std::vector<T> out(n);
  reduce_to(out.data(), a.data(), b.data(), n, dt, op);
  verify(out, expect, "to");
  d = a;
  reduce_to(d.data(), d.data(), b.data(), n, dt, op);
  verify(d, expect, "to(out=a)");
  d = b;
  reduce_to(d.data(), a.data(), d.data(), n, dt, op);
  verify(d, expect, "to(out=b)");
  d = a;
  reduce_into(d.data(), d.data(), n, dt, op);
  verify(d, expect_aa, "into(dst=src)");
  reduce_to(out.data(), a.data(), a.data(), n, dt, op);
  verify(out, expect_aa, "to(a=b)");
}

template <class T>
void test_int(DataType dt) {
  for (ReduceOp op : kOps)
    for (size_t n : kLens) {
      auto a = random_values<T>(n, false), b = random_values<T>(n, false);
      check_all_forms<T>(
          dt, op, a, b, [op](T x, T y) { return ref_int<T>(x, y, op); }, [](T x, T y) { return x == y; },
          dtype_name(dt));
    }
}

template <class F>
void test_float(DataType dt) {
  const F nan = std::numeric_limits<F>::quiet_NaN(), inf = std::numeric_limits<F>::infinity();
  for (ReduceOp op : kOps)
    for (size_t n : kLens)
      for (bool small : {true, false}) {
        auto a = random_values<F>(n, small), b = random_values<F>(n, small);
        if (n > 8) {  // specials in the SIMD body and in the tail
          a[1] = nan;
          b[2] = nan;
          a[3] = inf;
          b[3] = -inf;
          a[4] = -0.0;
          b[4] = 0.0;
          a[n - 1] = nan;
          b[n - 2] = nan;
          a[5] = std::numeric_limits<F>::denorm_min();
        }
        check_all_forms<F>(
            dt, op, a, b, [op](F x, F y) { return ref_float<F>(x, y, op); }, [](F x, F y) { return same(x, y); },
            dtype_name(dt));
      }
}

template <class Conv>
void test_16(DataType dt) {
  for (ReduceOp op : kOps)
    for (size_t n : kLens) {
      std::vector<uint16_t> a(n), b(n);
      for (size_t i = 0; i < n; ++i) {
        a[i] = static_cast<uint16_t>(rng());
        b[i] = static_cast<uint16_t>(rng());
      }
      auto ref = [op](uint16_t x, uint16_t y) {
        return Conv::narrow(ref_float<float>(Conv::widen(x), Conv::widen(y), op));
      };
      check_all_forms<uint16_t>(
          dt, op, a, b, ref, [](uint16_t x, uint16_t y) { return same16<Conv>(x, y); }, dtype_name(dt));
    }
}

void test_bool() {
  for (ReduceOp op : kOps)
    for (size_t n : kLens) {
      std::vector<uint8_t> a(n), b(n);
      for (size_t i = 0; i < n; ++i) {
        a[i] = static_cast<uint8_t>(rng() % 2);
        b[i] = static_cast<uint8_t>(rng() % 2);
      }
      bool is_or = op == ReduceOp::SUM || op == ReduceOp::MAX;
      check_all_forms<uint8_t>(
          DataType::BOOL, op, a, b, [is_or](uint8_t x, uint8_t y) { return uint8_t(is_or ? (x | y) : (x & y)); },
          [](uint8_t x, uint8_t y) { return x == y; }, "bool");
    }
  // Non-canonical true (any non-zero byte) still yields 0/1.
  uint8_t d[2] = {2, 0}, s[2] = {4, 0};
  reduce_into(d, s, 2, DataType::BOOL, ReduceOp::PRODUCT);
  CHECK(d[0] == 1 && d[1] == 0, "bool and of 2,4 -> %d %d", d[0], d[1]);
}

void test_half_conversions() {
  struct Case {
    float f;
    uint16_t h;
  };
  const Case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {65504.0f, 0x7bff},
      {65519.0f, 0x7bff},
      {65520.0f, 0x7c00},
      {1e6f, 0x7c00},
      {INFINITY, 0x7c00},
      {-INFINITY, 0xfc00},
      {std::ldexp(1.0f, -14), 0x0400},                       // smallest normal
      {std::ldexp(1.0f, -24), 0x0001},                       // smallest subnormal
      {std::ldexp(1.0f, -25), 0x0000},                       // tie between 0 and 2^-24: to even (0)
      {std::ldexp(3.0f, -26), 0x0001},                       // 0.75 ulp: up
      {std::ldexp(3.0f, -25), 0x0002},                       // 1.5 ulp: tie, to even (2)
      {std::ldexp(5.0f, -25), 0x0002},                       // 2.5 ulp: tie, to even (2)
      {std::ldexp(1023.0f, -24), 0x03ff},                    // largest subnormal
      {std::ldexp(2047.0f, -25), 0x0400},                    // rounds up into the normals
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},                // tie at 1: to even
      {1.0f + std::ldexp(3.0f, -11), 0x3c02},                // tie above odd: up
      {0.1f, 0x2e66},
      {3.14159265f, 0x4248},
  };
  for (const Case& c : cases) {
    CHECK(float_to_half(c.f) == c.h, "float_to_half(%g) = 0x%04x, want 0x%04x", c.f, float_to_half(c.f), c.h);
  }
  CHECK(std::isnan(half_to_float(float_to_half(NAN))), "NaN -> half -> NaN");
  CHECK((float_to_half(-NAN) & 0x8000) != 0, "NaN sign kept");
  // Every half value: widen then narrow is the identity (NaN stays NaN); and the SIMD kernel path agrees
  // with the scalar conversions (x * 1 and x + (-0) are exact).
  std::vector<uint16_t> all(65536), ones(65536, 0x3c00), negzero(65536, 0x8000);
  for (uint32_t h = 0; h < 65536; ++h) {
    all[h] = static_cast<uint16_t>(h);
    float f = half_to_float(static_cast<uint16_t>(h));
    bool is_nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0;
    CHECK(is_nan ? std::isnan(f) : float_to_half(f) == h, "half 0x%04x round trip", h);
    if (!is_nan && ((h >> 10) & 0x1f) == 0 && (h & 0x3ff) != 0)
      CHECK(f == std::ldexp(float(h & 0x3ff), -24) * ((h & 0x8000) ? -1.0f : 1.0f), "subnormal 0x%04x", h);
  }
  std::vector<uint16_t> prod = all;
  reduce_into(prod.data(), ones.data(), prod.size(), DataType::FLOAT16, ReduceOp::PRODUCT);
  for (uint32_t h = 0; h < 65536; ++h) CHECK(same16<Half>(prod[h], all[h]), "half 0x%04x * 1", h);
  std::vector<uint16_t> sum = all;
  reduce_into(sum.data(), negzero.data(), sum.size(), DataType::FLOAT16, ReduceOp::SUM);
  for (uint32_t h = 0; h < 65536; ++h) CHECK(same16<Half>(sum[h], all[h]), "half 0x%04x + -0", h);
  // Rounding of sums: 2048 + 1 = 2049 is a tie between 2048 and 2050 in half: to even (2048).
  uint16_t x = float_to_half(2048.0f), y = float_to_half(1.0f);
  reduce_into(&x, &y, 1, DataType::FLOAT16, ReduceOp::SUM);
  CHECK(x == float_to_half(2048.0f), "2048 + 1 in half = 0x%04x", x);
  // Overflow of a sum: 65504 + 65504 -> inf.
  x = 0x7bff;
  y = 0x7bff;
  reduce_into(&x, &y, 1, DataType::FLOAT16, ReduceOp::SUM);
  CHECK(x == 0x7c00, "65504 + 65504 = 0x%04x", x);
}

void test_bf16_conversions() {
  auto bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  CHECK(float_to_bfloat16(1.0f) == 0x3f80, "1.0");
  CHECK(float_to_bfloat16(bits(0x3f808000)) == 0x3f80, "tie to even (down)");
  CHECK(float_to_bfloat16(bits(0x3f818000)) == 0x3f82, "tie to even (up)");
  CHECK(float_to_bfloat16(bits(0x3f808001)) == 0x3f81, "above tie");
  CHECK(float_to_bfloat16(bits(0x00010000)) == 0x0001, "subnormal");
  CHECK(float_to_bfloat16(INFINITY) == 0x7f80 && float_to_bfloat16(-INFINITY) == 0xff80, "inf");
  CHECK(float_to_bfloat16(bits(0x7f7fffff)) == 0x7f80, "max float rounds to inf");
  CHECK(std::isnan(bfloat16_to_float(float_to_bfloat16(NAN))), "NaN");
  CHECK(std::isnan(bfloat16_to_float(float_to_bfloat16(bits(0x7f800001)))), "NaN with low payload stays NaN");
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bfloat16_to_float(static_cast<uint16_t>(b));
    CHECK(std::isnan(f) || float_to_bfloat16(f) == b, "bf16 0x%04x round trip", b);
  }
}

void test_scale() {
  std::vector<int32_t> i32 = {-7, 7, 1, -1, 2147483647, 0};
  scale_buffer(i32.data(), i32.size(), DataType::INT32, 0.5);
  CHECK(i32[0] == -3 && i32[1] == 3 && i32[2] == 0 && i32[3] == 0 && i32[4] == 1073741823 && i32[5] == 0,
        "int32 * 0.5 truncates toward zero: %d %d %d %d %d", i32[0], i32[1], i32[2], i32[3], i32[4]);
  std::vector<uint8_t> u8 = {100, 200, 3};
  scale_buffer(u8.data(), u8.size(), DataType::UINT8, 2.0);
  CHECK(u8[0] == 200 && u8[1] == 255 && u8[2] == 6, "uint8 * 2 saturates: %d %d %d", u8[0], u8[1], u8[2]);
  std::vector<int8_t> i8 = {-100, 50};
  scale_buffer(i8.data(), i8.size(), DataType::INT8, 3.0);
  CHECK(i8[0] == -128 && i8[1] == 127, "int8 saturates: %d %d", i8[0], i8[1]);
  std::vector<int64_t> i64 = {int64_t(1) << 40, -5};
  scale_buffer(i64.data(), i64.size(), DataType::INT64, 0.25);
  CHECK(i64[0] == (int64_t(1) << 38) && i64[1] == -1, "int64 %lld %lld", (long long)i64[0], (long long)i64[1]);
  std::vector<int16_t> i16 = {1000, -3};
  scale_buffer(i16.data(), i16.size(), DataType::INT16, 1.0 / 3.0);
  CHECK(i16[0] == 333 && i16[1] == -1, "int16 %d %d", i16[0], i16[1]);
  // 1/d factors (AVERAGE over d ranks) divide exactly: multiplying by 1.0 / 49 would give 48 for 49 * 49.
  for (int d : {2, 3, 5, 7, 49, 98, 1000}) {
    std::vector<int32_t> m;
    for (int k = -300; k <= 300; ++k) m.push_back(k * d + (k % 3) * (d - 1) / 2);  // multiples and between
    std::vector<int32_t> want(m.size());
    for (size_t i = 0; i < m.size(); ++i) want[i] = m[i] / d;  // C++ division: truncation toward zero
    std::vector<int64_t> m64(m.begin(), m.end());
    scale_buffer(m.data(), m.size(), DataType::INT32, 1.0 / d);
    scale_buffer(m64.data(), m64.size(), DataType::INT64, 1.0 / d);
    for (size_t i = 0; i < m.size(); ++i)
      CHECK(m[i] == want[i] && m64[i] == want[i], "int / %d: got %d and %lld, want %d", d, m[i], (long long)m64[i],
            want[i]);
  }
  std::vector<int64_t> big = {(int64_t(1) << 62) + 3, -(int64_t(1) << 62) - 3};  // beyond double's 53 bits
  scale_buffer(big.data(), big.size(), DataType::INT64, 1.0 / 3.0);
  CHECK(big[0] == ((int64_t(1) << 62) + 3) / 3 && big[1] == -(((int64_t(1) << 62) + 3) / 3),
        "int64 / 3 exact: %lld %lld", (long long)big[0], (long long)big[1]);
  for (size_t n : kLens) {
    std::vector<float> f(n);
    std::vector<double> d(n);
    std::vector<uint16_t> h(n), bf(n);
    for (size_t i = 0; i < n; ++i) {
      f[i] = static_cast<float>(i) - 3.0f;
      d[i] = static_cast<double>(i) * 0.1;
      h[i] = float_to_half(static_cast<float>(i) * 0.37f);
      bf[i] = float_to_bfloat16(static_cast<float>(i) * 1.7f);
    }
    auto f0 = f;
    auto d0 = d;
    auto h0 = h;
    auto bf0 = bf;
    scale_buffer(f.data(), n, DataType::FLOAT32, 0.1);
    scale_buffer(d.data(), n, DataType::FLOAT64, 0.1);
    scale_buffer(h.data(), n, DataType::FLOAT16, 0.1);
    scale_buffer(bf.data(), n, DataType::BFLOAT16, 0.1);
    for (size_t i = 0; i < n; ++i) {
      CHECK(f[i] == f0[i] * 0.1f, "float32 scale %zu", i);
      CHECK(d[i] == d0[i] * 0.1, "float64 scale %zu", i);
      CHECK(h[i] == float_to_half(half_to_float(h0[i]) * 0.1f), "float16 scale %zu", i);
      CHECK(bf[i] == float_to_bfloat16(bfloat16_to_float(bf0[i]) * 0.1f), "bfloat16 scale %zu", i);
    }
    scale_buffer(f.data(), n, DataType::FLOAT32, 1.0);  // no-op
    for (size_t i = 0; i < n; ++i) CHECK(f[i] == f0[i] * 0.1f, "factor 1 is a no-op");
  }
  uint8_t b[2] = {1, 0};
  scale_buffer(b, 2, DataType::BOOL, 1.0);
  CHECK(b[0] == 1 && b[1] == 0, "bool * 1");
  bool threw = false;
  try {
    scale_buffer(b, 2, DataType::BOOL, 0.5);
  } catch (const HvdError& e) {
    threw = e.kind() == ErrorKind::INVALID_ARGUMENT;
  }
  CHECK(threw, "bool * 0.5 is INVALID_ARGUMENT");
}

// reduce_scale_into must give exactly what reduce_into followed by scale_buffer gives: every dtype and
// op (SUM of float32/float64 takes the fused loop, the rest the blocked path), lengths across the SIMD
// tails and the blocks, in place on itself too; and it rejects what the two reject.
void test_reduce_scale_into() {
  const DataType types[] = {DataType::UINT8,   DataType::INT8,    DataType::INT16,   DataType::INT32,   DataType::INT64,
                            DataType::FLOAT32, DataType::FLOAT64, DataType::FLOAT16, DataType::BFLOAT16};
  const size_t lens[] = {0, 1, 7, 9, 33, 4099, 70001};  // 70001: several 16 KiB blocks in every type
  for (DataType dt : types) {
    const size_t esize = dtype_size(dt);
    for (ReduceOp op : kOps) {
      for (size_t n : lens) {
        for (double factor : {0.5, 1.0 / 3.0, 1.0}) {
          std::vector<unsigned char> a(n * esize), b(n * esize);
          for (size_t i = 0; i < n; ++i) {  // small, valid values of every type (no NaN bit patterns)
            double va = static_cast<double>(rng() % 200) / 8.0, vb = static_cast<double>(rng() % 200) / 8.0;
            auto put = [&](unsigned char* dst, double v) {
              switch (dt) {
                case DataType::FLOAT32: {
                  float f = static_cast<float>(v);
                  std::memcpy(dst, &f, 4);
                  break;
                }
                case DataType::FLOAT64: std::memcpy(dst, &v, 8); break;
                case DataType::FLOAT16: {
                  uint16_t h = float_to_half(static_cast<float>(v));
                  std::memcpy(dst, &h, 2);
                  break;
                }
                case DataType::BFLOAT16: {
                  uint16_t h = float_to_bfloat16(static_cast<float>(v));
                  std::memcpy(dst, &h, 2);
                  break;
                }
                default: {
                  int64_t k = static_cast<int64_t>(v * 8) - 100;
                  std::memcpy(dst, &k, esize);
                  break;
                }
              }
            };
            put(&a[i * esize], va);
            put(&b[i * esize], vb);
          }
          for (bool aliased : {false, true}) {  // src == dst: x op x, then scaled
            auto want = a;
            const void* src_want = aliased ? static_cast<const void*>(want.data()) : b.data();
            reduce_into(want.data(), src_want, n, dt, op);
            scale_buffer(want.data(), n, dt, factor);
            auto got = a;
            reduce_scale_into(got.data(), aliased ? static_cast<const void*>(got.data()) : b.data(), n, dt, op, factor);
            CHECK(got == want, "reduce_scale_into dtype %d op %s n %zu factor %g aliased %d", static_cast<int>(dt),
                  reduce_op_name(op), n, factor, static_cast<int>(aliased));
          }
        }
      }
    }
  }
  float x = 1, y = 2;
  bool threw = false;
  try {
    reduce_scale_into(&x, &y, 1, DataType::FLOAT32, ReduceOp::AVERAGE, 0.5);
  } catch (const HvdError& e) {
    threw = e.kind() == ErrorKind::INVALID_ARGUMENT;
  }
  CHECK(threw && x == 1.0f, "reduce_scale_into: AVERAGE rejected, buffer untouched");
  uint8_t bd[2] = {1, 0}, bs[2] = {0, 0};
  threw = false;
  try {
    reduce_scale_into(bd, bs, 2, DataType::BOOL, ReduceOp::SUM, 0.5);
  } catch (const HvdError& e) {
    threw = e.kind() == ErrorKind::INVALID_ARGUMENT;
  }
  CHECK(threw && bd[0] == 1, "reduce_scale_into: bool * 0.5 rejected, buffer untouched");
}

void test_bad_args() {
  float x = 1, y = 2;
  bool threw = false;
  try {
    reduce_into(&x, &y, 1, DataType::FLOAT32, ReduceOp::AVERAGE);
  } catch (const HvdError& e) {
    threw = e.kind() == ErrorKind::INVALID_ARGUMENT;
  }
  CHECK(threw, "AVERAGE rejected");
  threw = false;
  try {
    reduce_into(&x, &y, 1, static_cast<DataType>(42), ReduceOp::SUM);
  } catch (const HvdError& e) {
    threw = e.kind() == ErrorKind::INVALID_ARGUMENT;
  }
  CHECK(threw, "unknown dtype rejected");
  CHECK(x == 1.0f, "untouched after rejection");
}

void bench_float32_sum() {
  // Informative only (speed targets live in benchmarks): 8 MiB buffers, in-place SUM.
  const size_t n = size_t(2) << 20;
  std::vector<float> d(n, 1.0f), s(n, 2.0f);
  reduce_into(d.data(), s.data(), n, DataType::FLOAT32, ReduceOp::SUM);
  const int reps = 20;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) reduce_into(d.data(), s.data(), n, DataType::FLOAT32, ReduceOp::SUM);
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(d[12345] == 1.0f + 2.0f * (reps + 1), "bench result");
  std::printf("float32 SUM reduce_into, 8 MiB: %.2f GB/s of buffer (%.2f GB/s moved: 2 reads + 1 write)\n",
              n * 4.0 * reps / sec / 1e9, 3 * n * 4.0 * reps / sec / 1e9);
  std::vector<uint16_t> hd(n, 0x3c00), hs(n, 0x3c00);
  t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 5; ++r) reduce_into(hd.data(), hs.data(), n, DataType::FLOAT16, ReduceOp::SUM);
  sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("float16 SUM reduce_into, 4 MiB: %.2f GB/s of buffer\n", n * 2.0 * 5 / sec / 1e9);
}

}  // namespace

int main() {
  test_int<uint8_t>(DataType::UINT8);
  test_int<int8_t>(DataType::INT8);
  test_int<int16_t>(DataType::INT16);
  test_int<int32_t>(DataType::INT32);
  test_int<int64_t>(DataType::INT64);
  test_float<float>(DataType::FLOAT32);
  test_float<double>(DataType::FLOAT64);
  test_16<Half>(DataType::FLOAT16);
  test_16<Bf16>(DataType::BFLOAT16);
  test_bool();
  test_half_conversions();
  test_reduce_scale_into();
  test_bf16_conversions();
  test_scale();
  test_bad_args();
  bench_float32_sum();
  return finish("reduce_test");
}
