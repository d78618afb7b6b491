#include "backends/reduction_identity.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace phv {

namespace {

template <typename T>
void fill(void* buf, size_t count, T value) {
  T* p = static_cast<T*>(buf);
  std::fill(p, p + count, value);
}

template <typename T>
T identity_int(ReduceOp op) {
  if (op == ReduceOp::PRODUCT) return T(1);
  if (op == ReduceOp::MIN) return std::numeric_limits<T>::max();
  if (op == ReduceOp::MAX) return std::numeric_limits<T>::lowest();
  return T(0);
}

// The identity among the four candidates of a float type (given as bit patterns for the 16-bit ones).
template <typename T>
T by_op(ReduceOp op, T one, T largest, T lowest, T zero) {
  return op == ReduceOp::PRODUCT ? one : op == ReduceOp::MIN ? largest : op == ReduceOp::MAX ? lowest : zero;
}

}  // namespace

void fill_identity(void* buf, size_t count, DataType dt, ReduceOp op) {
  switch (dt) {
    case DataType::UINT8: fill<uint8_t>(buf, count, identity_int<uint8_t>(op)); break;
    case DataType::INT8: fill<int8_t>(buf, count, identity_int<int8_t>(op)); break;
    case DataType::INT16: fill<int16_t>(buf, count, identity_int<int16_t>(op)); break;
    case DataType::INT32: fill<int32_t>(buf, count, identity_int<int32_t>(op)); break;
    case DataType::INT64: fill<int64_t>(buf, count, identity_int<int64_t>(op)); break;
    case DataType::BOOL:  // MIN/PRODUCT are logical and (identity true); SUM/MAX logical or (false)
      fill<uint8_t>(buf, count, (op == ReduceOp::MIN || op == ReduceOp::PRODUCT) ? 1 : 0);
      break;
    case DataType::FLOAT32: {
      float inf = std::numeric_limits<float>::infinity();
      fill<float>(buf, count, by_op<float>(op, 1.f, inf, -inf, 0.f));
      break;
    }
    case DataType::FLOAT64: {
      double inf = std::numeric_limits<double>::infinity();
      fill<double>(buf, count, by_op<double>(op, 1.0, inf, -inf, 0.0));
      break;
    }
    case DataType::FLOAT16:  // 0x3C00 = 1.0, 0x7C00 = +inf, 0xFC00 = -inf
      fill<uint16_t>(buf, count, by_op<uint16_t>(op, 0x3C00, 0x7C00, 0xFC00, 0));
      break;
    case DataType::BFLOAT16:  // 0x3F80 = 1.0, 0x7F80 = +inf, 0xFF80 = -inf
      fill<uint16_t>(buf, count, by_op<uint16_t>(op, 0x3F80, 0x7F80, 0xFF80, 0));
      break;
  }
}

}  // namespace phv
