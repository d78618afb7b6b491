// Adasum kernels (common/adasum.h). Like reduce.cc: plain loops the compiler vectorises, compiled once
// for baseline x86-64 and once for AVX2 + F16C + FMA, picked by cpu_has_avx2(). The dot products keep
// kLanes independent float64 partial sums (a loop-carried single sum could not be vectorised without
// reassociation), added together at the end of each piece.
#include "common/adasum.h"

#include "common/error.h"
#include "common/float16.h"

namespace phv {
using namespace f16;

namespace {

constexpr size_t kLanes = 8;

template <class T>
PHV_INLINE void dots_loop(const T* a, const T* b, size_t n, AdasumDots& d) {
  double ab[kLanes] = {0}, aa[kLanes] = {0}, bb[kLanes] = {0};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      double x = static_cast<double>(a[i + j]), y = static_cast<double>(b[i + j]);
      ab[j] += x * y;
      aa[j] += x * x;
      bb[j] += y * y;
    }
  }
  for (size_t j = 0; i < n; ++i, ++j) {
    double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    ab[j] += x * y;
    aa[j] += x * x;
    bb[j] += y * y;
  }
  for (size_t j = 0; j < kLanes; ++j) {
    d.ab += ab[j];
    d.aa += aa[j];
    d.bb += bb[j];
  }
}

template <class T>
PHV_INLINE void combine_loop(T* __restrict d, const T* __restrict s, size_t n, double cd, double cs) {
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(cd * static_cast<double>(d[i]) + cs * static_cast<double>(s[i]));
}

// 16-bit floats: widened a block at a time into float32 stack arrays, then the float32 loops.
template <class Conv>
PHV_INLINE void half_dots(const uint16_t* a, const uint16_t* b, size_t n, AdasumDots& d) {
  alignas(64) float fa[kBlock];
  alignas(64) float fb[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    size_t m = n - i < kBlock ? n - i : kBlock;
    Conv::widen(a + i, fa, m);
    Conv::widen(b + i, fb, m);
    dots_loop<float>(fa, fb, m, d);
  }
}
template <class Conv>
PHV_INLINE void half_combine(uint16_t* d, const uint16_t* s, size_t n, double cd, double cs) {
  alignas(64) float fd[kBlock];
  alignas(64) float fs[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    size_t m = n - i < kBlock ? n - i : kBlock;
    Conv::widen(d + i, fd, m);
    Conv::widen(s + i, fs, m);
    combine_loop<float>(fd, fs, m, cd, cs);
    Conv::narrow(fd, d + i, m);
  }
}

template <class T>
void dots_plain(const void* a, const void* b, size_t n, AdasumDots& d) {
  dots_loop<T>(static_cast<const T*>(a), static_cast<const T*>(b), n, d);
}
template <class T>
PHV_AVX2 void dots_avx2(const void* a, const void* b, size_t n, AdasumDots& d) {
  dots_loop<T>(static_cast<const T*>(a), static_cast<const T*>(b), n, d);
}
template <class T>
void combine_plain(void* d, const void* s, size_t n, double cd, double cs) {
  combine_loop<T>(static_cast<T*>(d), static_cast<const T*>(s), n, cd, cs);
}
template <class T>
PHV_AVX2 void combine_avx2(void* d, const void* s, size_t n, double cd, double cs) {
  combine_loop<T>(static_cast<T*>(d), static_cast<const T*>(s), n, cd, cs);
}
template <class Conv>
void half_dots_plain(const void* a, const void* b, size_t n, AdasumDots& d) {
  half_dots<Conv>(static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), n, d);
}
template <class Conv>
PHV_AVX2 void half_dots_avx2(const void* a, const void* b, size_t n, AdasumDots& d) {
  half_dots<Conv>(static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), n, d);
}
template <class Conv>
void half_combine_plain(void* d, const void* s, size_t n, double cd, double cs) {
  half_combine<Conv>(static_cast<uint16_t*>(d), static_cast<const uint16_t*>(s), n, cd, cs);
}
template <class Conv>
PHV_AVX2 void half_combine_avx2(void* d, const void* s, size_t n, double cd, double cs) {
  half_combine<Conv>(static_cast<uint16_t*>(d), static_cast<const uint16_t*>(s), n, cd, cs);
}

using DotsFn = void (*)(const void*, const void*, size_t, AdasumDots&);
using CombineFn = void (*)(void*, const void*, size_t, double, double);
struct AdasumKernels {
  DotsFn dots;
  CombineFn combine;
};

AdasumKernels adasum_kernels(DataType dt) {
  const bool avx2 = cpu_has_avx2();
  switch (dt) {
    case DataType::FLOAT32:
      return avx2 ? AdasumKernels{&dots_avx2<float>, &combine_avx2<float>}
                  : AdasumKernels{&dots_plain<float>, &combine_plain<float>};
    case DataType::FLOAT64:
      return avx2 ? AdasumKernels{&dots_avx2<double>, &combine_avx2<double>}
                  : AdasumKernels{&dots_plain<double>, &combine_plain<double>};
    case DataType::FLOAT16:
      return avx2 ? AdasumKernels{&half_dots_avx2<HalfF16cConv>, &half_combine_avx2<HalfF16cConv>}
                  : AdasumKernels{&half_dots_plain<HalfSoftConv>, &half_combine_plain<HalfSoftConv>};
    case DataType::BFLOAT16:
      return avx2 ? AdasumKernels{&half_dots_avx2<Bf16Conv>, &half_combine_avx2<Bf16Conv>}
                  : AdasumKernels{&half_dots_plain<Bf16Conv>, &half_combine_plain<Bf16Conv>};
    default: break;
  }
  throw_error(ErrorKind::INVALID_ARGUMENT,
              "Adasum is defined for float16, bfloat16, float32 and float64 "
              "tensors, not ",
              dtype_name(dt));
}

}  // namespace

bool adasum_dtype(DataType dt) {
  return dt == DataType::FLOAT16 || dt == DataType::BFLOAT16 || dt == DataType::FLOAT32 || dt == DataType::FLOAT64;
}

void adasum_dots(const void* mine, const void* theirs, size_t n, DataType dt, AdasumDots& dots) {
  AdasumKernels k = adasum_kernels(dt);
  if (n > 0) k.dots(mine, theirs, n, dots);
}

void adasum_coefficients(const AdasumDots& dots, double& coef_a, double& coef_b) {
  coef_a = dots.aa > 0 ? 1.0 - dots.ab / (2.0 * dots.aa) : 1.0;
  coef_b = dots.bb > 0 ? 1.0 - dots.ab / (2.0 * dots.bb) : 1.0;
}

void adasum_combine_into(void* dst, const void* src, size_t n, DataType dt, double c_dst, double c_src) {
  AdasumKernels k = adasum_kernels(dt);
  if (n > 0) k.combine(dst, src, n, c_dst, c_src);
}

}  // namespace phv
