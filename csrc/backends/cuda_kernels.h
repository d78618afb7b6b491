// Small CUDA kernels of the GPU backend (cuda_kernels.cu), callable from host C++.
#pragma once
#include <cstddef>
#include <cstdint>
#include "common/types.h"

namespace phv {

// buf[i] *= factor on `stream` (cudaStream_t). 16-bit floats scale in float32; integers in double and
// truncate, as scale_buffer does on the CPU. Throws HvdError on a launch failure.
void cuda_scale_buffer(void* buf, size_t count, DataType dt, double factor, void* stream);

}  // namespace phv
