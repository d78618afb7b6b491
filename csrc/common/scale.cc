// scale_buffer (common/reduce.h): prescale / postscale factors and AVERAGE's 1/size.
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/error.h"
#include "common/float16.h"
#include "common/reduce.h"

namespace phv {
using namespace f16;

namespace {

// d when factor is exactly 1/d for an integer d >= 2 (AVERAGE's 1/size), else 0.
int64_t reciprocal_divisor(double factor) {
  if (!(factor > 0.0 && factor < 1.0)) return 0;
  double d = std::round(1.0 / factor);
  return (d <= 2147483647.0 && 1.0 / d == factor) ? static_cast<int64_t>(d) : 0;
}

template <class T>
void scale_int(T* p, size_t n, double factor) {
  // A factor 1/d divides by d in integers (C++ division truncates toward zero): multiplying by the
  // rounded 1/d is not exact (49 * (1.0 / 49) is 0.99999999999999989, which would truncate to 0).
  if (int64_t d = reciprocal_divisor(factor)) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<int64_t>(p[i]) / d);
    return;
  }
  // Otherwise multiply in double, truncate toward zero; values outside T's range saturate (a plain cast
  // would be undefined behaviour).
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  for (size_t i = 0; i < n; ++i) {
    double v = std::trunc(static_cast<double>(p[i]) * factor);
    if (!(v >= lo)) v = (v != v) ? 0.0 : lo;  // NaN (0 * inf) -> 0
    if (v >= hi) {
      p[i] = std::numeric_limits<T>::max();
      continue;
    }
    p[i] = static_cast<T>(v);
  }
}

template <class Conv>
void scale_half(uint16_t* p, size_t n, float f) {
  alignas(64) float tmp[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    size_t m = n - i < kBlock ? n - i : kBlock;
    Conv::widen(p + i, tmp, m);
    for (size_t j = 0; j < m; ++j) tmp[j] *= f;
    Conv::narrow(tmp, p + i, m);
  }
}

PHV_AVX2 void scale_half_f16c(uint16_t* p, size_t n, float f) { scale_half<HalfF16cConv>(p, n, f); }

}  // namespace

void scale_buffer(void* buf, size_t count, DataType dt, double factor) {
  if (dt == DataType::BOOL) {
    PHV_CHECK_ARG(factor == 1.0, "scale_buffer: cannot scale a bool tensor by ", factor);
    return;
  }
  PHV_CHECK_ARG(dtype_size(dt) != 0, "scale_buffer: unknown dtype ", static_cast<int>(dt));
  if (factor == 1.0 || count == 0) return;
  switch (dt) {
    case DataType::UINT8: return scale_int(static_cast<uint8_t*>(buf), count, factor);
    case DataType::INT8: return scale_int(static_cast<int8_t*>(buf), count, factor);
    case DataType::INT16: return scale_int(static_cast<int16_t*>(buf), count, factor);
    case DataType::INT32: return scale_int(static_cast<int32_t*>(buf), count, factor);
    case DataType::INT64: return scale_int(static_cast<int64_t*>(buf), count, factor);
    case DataType::FLOAT32: {
      float* p = static_cast<float*>(buf);
      float f = static_cast<float>(factor);
      for (size_t i = 0; i < count; ++i) p[i] *= f;
      return;
    }
    case DataType::FLOAT64: {
      double* p = static_cast<double*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] *= factor;
      return;
    }
    case DataType::FLOAT16:
      if (cpu_has_avx2()) return scale_half_f16c(static_cast<uint16_t*>(buf), count, static_cast<float>(factor));
      return scale_half<HalfSoftConv>(static_cast<uint16_t*>(buf), count, static_cast<float>(factor));
    case DataType::BFLOAT16:
      return scale_half<Bf16Conv>(static_cast<uint16_t*>(buf), count, static_cast<float>(factor));
    case DataType::BOOL: break;
  }
}

}  // namespace phv
