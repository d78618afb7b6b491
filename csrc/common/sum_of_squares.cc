#include "common/sum_of_squares.h"

#include "common/error.h"
#include "common/float16.h"  // cpu_has_avx2, PHV_INLINE

namespace phv {

namespace {

// Eight independent double accumulators: no dependency chain between consecutive elements, so gcc -O3
// vectorises the body (float -> double conversions and multiply-adds on packed registers) without
// -ffast-math; the partial sums are added at the end.
template <class T>
PHV_INLINE double sumsq_loop(const T* __restrict x, size_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) {
      double v = static_cast<double>(x[i + k]);
      acc[k] += v * v;
    }
  }
  double tail = 0;
  for (; i < n; ++i) tail += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

template <class T>
double sumsq_base(const T* x, size_t n) {
  return sumsq_loop(x, n);
}

template <class T>
__attribute__((target("avx2,fma"))) double sumsq_avx2(const T* x, size_t n) {
  return sumsq_loop(x, n);
}

}  // namespace

double sum_of_squares(const void* buf, size_t count, DataType dt) {
  if (count == 0) return 0.0;
  const bool avx2 = f16::cpu_has_avx2();
  switch (dt) {
    case DataType::FLOAT32: {
      const float* x = static_cast<const float*>(buf);
      return avx2 ? sumsq_avx2(x, count) : sumsq_base(x, count);
    }
    case DataType::FLOAT64: {
      const double* x = static_cast<const double*>(buf);
      return avx2 ? sumsq_avx2(x, count) : sumsq_base(x, count);
    }
    default:
      throw_error(ErrorKind::INVALID_ARGUMENT, "sum_of_squares: dtype ", dtype_name(dt),
                  " is not supported (float32, float64)");
  }
}

}  // namespace phv
