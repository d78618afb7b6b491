// Element-wise reduction kernels. They know nothing of ranks or sockets.
#pragma once
#include <cstddef>
#include "common/types.h"

namespace phv {

// dst[i] = dst[i] (op) src[i] for i < count. op is SUM, MIN, MAX or PRODUCT (AVERAGE is rejected:
// the caller sums and scales). float16/bfloat16 are widened to float32, combined and rounded back
// (round-to-nearest-even). BOOL: SUM and MAX are logical or, MIN and PRODUCT logical and.
// Integer SUM/PRODUCT wrap around as in two's complement (as torch does).
void reduce_into(void* dst, const void* src, size_t count, DataType dt, ReduceOp op);

// out[i] = a[i] (op) b[i]: the same as reduce_into with a separate output (out may alias a or b).
void reduce_to(void* out, const void* a, const void* b, size_t count, DataType dt, ReduceOp op);

// dst[i] = (dst[i] (op) src[i]) * factor: reduce_into then scale_buffer, with the same rounding, in one
// pass over memory (the ring's last reduction of a chunk applies AVERAGE's 1/size this way). float32 and
// float64 SUM are fused into one loop; other types reduce and scale cache-sized blocks in turn.
void reduce_scale_into(void* dst, const void* src, size_t count, DataType dt, ReduceOp op, double factor);

// buf[i] *= factor. Floating types multiply in their widened type (float32 for 16-bit floats, double
// for float64); integer types divide by d when factor is exactly 1/d, else multiply in double, and
// truncate toward zero either way; BOOL is rejected unless factor == 1. factor == 1 is a no-op.
void scale_buffer(void* buf, size_t count, DataType dt, double factor);

// 16-bit float conversions used by the kernels and the tests.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

}  // namespace phv
