// Element-wise reduction kernels (common/reduce.h).
//
// Shape of the code: one always-inline template loop per (element type, op), compiled twice -- once for
// the baseline x86-64 target (SSE2) and once inside a function carrying target("avx2,f16c,fma") -- and a
// table of function pointers picked once per call by dtype, op and a cached CPU check. The loops are plain
// `d[i] = op(d[i], s[i])` over __restrict pointers, which gcc -O3 turns into packed SIMD; the
// float32 SUM loop compiles to vmovups/vaddps/vmovups on ymm registers (checked with objdump -d).
//
// Aliasing: reduce_to(out, a, b) allows out == a or out == b; the in-place loops (`into`, `into_rev`)
// keep the restrict promise by never passing the same pointer twice. Partial overlap is not supported.
//
// 16-bit floats: processed in blocks of kBlock elements; both operands are widened to float32 into stack
// arrays, combined with the float32 loop, and rounded back (round-to-nearest-even). A segment of the ring
// therefore accumulates in float32 inside each reduction and rounds once per hop.
#include "common/reduce.h"

#include <cstring>
#include <type_traits>

#include "common/error.h"
#include "common/float16.h"

namespace phv {
using namespace f16;

namespace {

// ---------------------------------------------------------------- ops

// Integer SUM/PRODUCT wrap around: computed in an unsigned type at least 32 bits wide (so that neither
// the promotion to int nor signed overflow can be undefined), then truncated.
template <class T>
using WideU = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;

struct OpSum {
  template <class T>
  static PHV_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(WideU<T>(a) + WideU<T>(b));
    else return a + b;
  }
};
struct OpProd {
  template <class T>
  static PHV_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(WideU<T>(a) * WideU<T>(b));
    else return a * b;
  }
};
// MIN/MAX propagate NaN as torch.minimum/maximum do: if either operand is NaN the result is NaN.
// Written as selects so that they vectorise (minps alone would drop a NaN in the first operand).
struct OpMin {
  template <class T>
  static PHV_INLINE T apply(T a, T b) {
    T r = b < a ? b : a;
    if constexpr (std::is_floating_point_v<T>) r = (b != b) ? b : r;
    return r;
  }
};
struct OpMax {
  template <class T>
  static PHV_INLINE T apply(T a, T b) {
    T r = a < b ? b : a;
    if constexpr (std::is_floating_point_v<T>) r = (b != b) ? b : r;
    return r;
  }
};
// BOOL (stored as one byte, any non-zero is true): SUM/MAX are logical or, MIN/PRODUCT logical and.
struct OpOr {
  static PHV_INLINE uint8_t apply(uint8_t a, uint8_t b) { return static_cast<uint8_t>((a | b) != 0); }
};
struct OpAnd {
  static PHV_INLINE uint8_t apply(uint8_t a, uint8_t b) { return static_cast<uint8_t>((a != 0) & (b != 0)); }
};

// ---------------------------------------------------------------- loops

template <class T, class Op>
PHV_INLINE void into_loop(T* __restrict d, const T* __restrict s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = Op::apply(d[i], s[i]);
}
template <class T, class Op>  // d = op(s, d): keeps operand order when the output aliases the 2nd input
PHV_INLINE void into_rev_loop(T* __restrict d, const T* __restrict s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = Op::apply(s[i], d[i]);
}
template <class T, class Op>
PHV_INLINE void to_loop(T* __restrict o, const T* __restrict a, const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) o[i] = Op::apply(a[i], b[i]);
}

// out = op(a, b) for 16-bit floats; out may alias a or b (each block is read fully before it is written).
template <class Conv, class Op>
PHV_INLINE void half_to_loop(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
  alignas(64) float fa[kBlock];
  alignas(64) float fb[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    size_t m = n - i < kBlock ? n - i : kBlock;
    Conv::widen(a + i, fa, m);
    Conv::widen(b + i, fb, m);
    into_loop<float, Op>(fa, fb, m);
    Conv::narrow(fa, out + i, m);
  }
}

// ---------------------------------------------------------------- kernel table

using IntoFn = void (*)(void*, const void*, size_t);
using ToFn = void (*)(void*, const void*, const void*, size_t);
struct Kernels {
  IntoFn into;      // d = op(d, s)
  IntoFn into_rev;  // d = op(s, d)
  ToFn to;          // o = op(a, b), no aliasing
};

template <class T, class Op, bool kAvx2>
struct Plain;
template <class T, class Op>
struct Plain<T, Op, false> {
  static void into(void* d, const void* s, size_t n) { into_loop<T, Op>((T*)d, (const T*)s, n); }
  static void into_rev(void* d, const void* s, size_t n) { into_rev_loop<T, Op>((T*)d, (const T*)s, n); }
  static void to(void* o, const void* a, const void* b, size_t n) {
    to_loop<T, Op>((T*)o, (const T*)a, (const T*)b, n);
  }
};
template <class T, class Op>
struct Plain<T, Op, true> {
  PHV_AVX2 static void into(void* d, const void* s, size_t n) { into_loop<T, Op>((T*)d, (const T*)s, n); }
  PHV_AVX2 static void into_rev(void* d, const void* s, size_t n) { into_rev_loop<T, Op>((T*)d, (const T*)s, n); }
  PHV_AVX2 static void to(void* o, const void* a, const void* b, size_t n) {
    to_loop<T, Op>((T*)o, (const T*)a, (const T*)b, n);
  }
};

template <class Conv, class Op, bool kAvx2>
struct Half;
template <class Conv, class Op>
struct Half<Conv, Op, false> {
  static void into(void* d, const void* s, size_t n) {
    half_to_loop<Conv, Op>((uint16_t*)d, (const uint16_t*)d, (const uint16_t*)s, n);
  }
  static void into_rev(void* d, const void* s, size_t n) {
    half_to_loop<Conv, Op>((uint16_t*)d, (const uint16_t*)s, (const uint16_t*)d, n);
  }
  static void to(void* o, const void* a, const void* b, size_t n) {
    half_to_loop<Conv, Op>((uint16_t*)o, (const uint16_t*)a, (const uint16_t*)b, n);
  }
};
template <class Conv, class Op>
struct Half<Conv, Op, true> {
  PHV_AVX2 static void into(void* d, const void* s, size_t n) {
    half_to_loop<Conv, Op>((uint16_t*)d, (const uint16_t*)d, (const uint16_t*)s, n);
  }
  PHV_AVX2 static void into_rev(void* d, const void* s, size_t n) {
    half_to_loop<Conv, Op>((uint16_t*)d, (const uint16_t*)s, (const uint16_t*)d, n);
  }
  PHV_AVX2 static void to(void* o, const void* a, const void* b, size_t n) {
    half_to_loop<Conv, Op>((uint16_t*)o, (const uint16_t*)a, (const uint16_t*)b, n);
  }
};

template <class K>
Kernels kernels_of() {
  return Kernels{&K::into, &K::into_rev, &K::to};
}

template <class T, bool kAvx2>
Kernels numeric_kernels(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return kernels_of<Plain<T, OpSum, kAvx2>>();
    case ReduceOp::MIN: return kernels_of<Plain<T, OpMin, kAvx2>>();
    case ReduceOp::MAX: return kernels_of<Plain<T, OpMax, kAvx2>>();
    case ReduceOp::PRODUCT: return kernels_of<Plain<T, OpProd, kAvx2>>();
    default: break;
  }
  throw_error(ErrorKind::INVALID_ARGUMENT, "reduce: unsupported op ", reduce_op_name(op),
              " (AVERAGE is SUM followed by a scale)");
}

template <class Conv, bool kAvx2>
Kernels half_kernels(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return kernels_of<Half<Conv, OpSum, kAvx2>>();
    case ReduceOp::MIN: return kernels_of<Half<Conv, OpMin, kAvx2>>();
    case ReduceOp::MAX: return kernels_of<Half<Conv, OpMax, kAvx2>>();
    case ReduceOp::PRODUCT: return kernels_of<Half<Conv, OpProd, kAvx2>>();
    default: break;
  }
  throw_error(ErrorKind::INVALID_ARGUMENT, "reduce: unsupported op ", reduce_op_name(op),
              " (AVERAGE is SUM followed by a scale)");
}

template <bool kAvx2>
Kernels select_kernels(DataType dt, ReduceOp op) {
  switch (dt) {
    case DataType::UINT8: return numeric_kernels<uint8_t, kAvx2>(op);
    case DataType::INT8: return numeric_kernels<int8_t, kAvx2>(op);
    case DataType::INT16: return numeric_kernels<int16_t, kAvx2>(op);
    case DataType::INT32: return numeric_kernels<int32_t, kAvx2>(op);
    case DataType::INT64: return numeric_kernels<int64_t, kAvx2>(op);
    case DataType::FLOAT32: return numeric_kernels<float, kAvx2>(op);
    case DataType::FLOAT64: return numeric_kernels<double, kAvx2>(op);
    case DataType::BFLOAT16: return half_kernels<Bf16Conv, kAvx2>(op);
    case DataType::FLOAT16:
      if constexpr (kAvx2) return half_kernels<HalfF16cConv, true>(op);
      else return half_kernels<HalfSoftConv, false>(op);
    case DataType::BOOL:
      switch (op) {
        case ReduceOp::SUM:
        case ReduceOp::MAX: return kernels_of<Plain<uint8_t, OpOr, kAvx2>>();
        case ReduceOp::MIN:
        case ReduceOp::PRODUCT: return kernels_of<Plain<uint8_t, OpAnd, kAvx2>>();
        default: break;
      }
      throw_error(ErrorKind::INVALID_ARGUMENT, "reduce: unsupported op ", reduce_op_name(op), " for bool");
  }
  throw_error(ErrorKind::INVALID_ARGUMENT, "reduce: unknown dtype ", static_cast<int>(dt));
}

Kernels get_kernels(DataType dt, ReduceOp op) {
  return cpu_has_avx2() ? select_kernels<true>(dt, op) : select_kernels<false>(dt, op);
}

// (d + s) * f, rounded after each operation exactly as the separate sum and scale passes round.
template <class T>
PHV_INLINE void sum_scale_loop(T* __restrict d, const T* __restrict s, size_t n, T f) {
  for (size_t i = 0; i < n; ++i) d[i] = (d[i] + s[i]) * f;
}
template <class T>
void sum_scale_plain(T* d, const T* s, size_t n, T f) {
  sum_scale_loop(d, s, n, f);
}
template <class T>
PHV_AVX2 void sum_scale_avx2(T* d, const T* s, size_t n, T f) {
  sum_scale_loop(d, s, n, f);
}

template <class T>
void sum_scale(void* d, const void* s, size_t n, T f) {
  if (cpu_has_avx2()) return sum_scale_avx2(static_cast<T*>(d), static_cast<const T*>(s), n, f);
  sum_scale_plain(static_cast<T*>(d), static_cast<const T*>(s), n, f);
}

}  // namespace

void reduce_into(void* dst, const void* src, size_t count, DataType dt, ReduceOp op) {
  Kernels k = get_kernels(dt, op);  // validates dt and op even when count == 0
  if (count == 0) return;
  if (dst != src) return k.into(dst, src, count);
  // x op x (SUM doubles, PRODUCT squares): combine with a copy of the source, one stack block at a
  // time, so that the restrict loops never see the same pointer twice.
  size_t esize = dtype_size(dt);
  constexpr size_t kTmp = 4096;
  alignas(64) unsigned char tmp[kTmp];
  for (size_t off = 0; off < count * esize; off += kTmp) {
    size_t len = count * esize - off < kTmp ? count * esize - off : kTmp;
    std::memcpy(tmp, static_cast<const char*>(src) + off, len);
    k.into(static_cast<char*>(dst) + off, tmp, len / esize);
  }
}

void reduce_to(void* out, const void* a, const void* b, size_t count, DataType dt, ReduceOp op) {
  if (out == a) return reduce_into(out, b, count, dt, op);
  Kernels k = get_kernels(dt, op);
  if (count == 0) return;
  if (out == b) return k.into_rev(out, a, count);
  if (a == b) {  // out = a op a: copy then combine in place
    std::memcpy(out, a, count * dtype_size(dt));
    return reduce_into(out, a, count, dt, op);
  }
  k.to(out, a, b, count);
}

void reduce_scale_into(void* dst, const void* src, size_t count, DataType dt, ReduceOp op, double factor) {
  if (factor == 1.0) return reduce_into(dst, src, count, dt, op);
  PHV_CHECK_ARG(dt != DataType::BOOL, "reduce: cannot scale a bool tensor by ", factor);
  if (op == ReduceOp::SUM && dst != src && dt == DataType::FLOAT32)
    return sum_scale<float>(dst, src, count, static_cast<float>(factor));  // scale_buffer's float factor
  if (op == ReduceOp::SUM && dst != src && dt == DataType::FLOAT64) return sum_scale<double>(dst, src, count, factor);
  const size_t esize = dtype_size(dt);
  PHV_CHECK_ARG(esize != 0, "reduce: unknown dtype ", static_cast<int>(dt));
  const size_t block = (size_t(16) << 10) / esize;  // stays in L1 between the two passes
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  for (size_t i = 0; i < count; i += block) {
    size_t n = count - i < block ? count - i : block;
    reduce_into(d + i * esize, s + i * esize, n, dt, op);
    scale_buffer(d + i * esize, n, dt, factor);
  }
  if (count == 0) reduce_into(dst, src, 0, dt, op);  // still validates dt and op
}

}  // namespace phv
