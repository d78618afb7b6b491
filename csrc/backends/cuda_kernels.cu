#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backends/cuda_kernels.h"
#include "common/error.h"

namespace phv {
namespace {

template <typename T, typename Wide>
__global__ void scale_kernel(T* buf, size_t count, Wide factor) {
  size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count; i += stride) {
    buf[i] = static_cast<T>(static_cast<Wide>(buf[i]) * factor);
  }
}

__global__ void scale_half_kernel(__half* buf, size_t count, float factor) {
  size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count; i += stride) {
    buf[i] = __float2half(__half2float(buf[i]) * factor);
  }
}

__global__ void scale_bf16_kernel(__nv_bfloat16* buf, size_t count, float factor) {
  size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count; i += stride) {
    buf[i] = __float2bfloat16(__bfloat162float(buf[i]) * factor);
  }
}

template <typename T, typename Wide>
void launch(void* buf, size_t count, Wide factor, cudaStream_t stream) {
  int threads = 256;
  int blocks = static_cast<int>((count + threads - 1) / threads);
  if (blocks > 4096) blocks = 4096;  // grid-stride loop covers the rest
  scale_kernel<T, Wide><<<blocks, threads, 0, stream>>>(static_cast<T*>(buf), count, factor);
}

}  // namespace

void cuda_scale_buffer(void* buf, size_t count, DataType dt, double factor, void* stream_ptr) {
  if (factor == 1.0 || count == 0) return;
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  int threads = 256;
  int blocks = static_cast<int>(std::min<size_t>((count + threads - 1) / threads, 4096));
  switch (dt) {
    case DataType::FLOAT32: launch<float, float>(buf, count, static_cast<float>(factor), stream); break;
    case DataType::FLOAT64: launch<double, double>(buf, count, factor, stream); break;
    case DataType::FLOAT16:
      scale_half_kernel<<<blocks, threads, 0, stream>>>(static_cast<__half*>(buf), count, static_cast<float>(factor));
      break;
    case DataType::BFLOAT16:
      scale_bf16_kernel<<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(buf), count,
                                                        static_cast<float>(factor));
      break;
    case DataType::UINT8: launch<uint8_t, double>(buf, count, factor, stream); break;
    case DataType::INT8: launch<int8_t, double>(buf, count, factor, stream); break;
    case DataType::INT32: launch<int32_t, double>(buf, count, factor, stream); break;
    case DataType::INT64: launch<int64_t, double>(buf, count, factor, stream); break;
    default: throw_error(ErrorKind::INVALID_ARGUMENT, "cannot scale ", dtype_name(dt), " tensors on the GPU");
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_error(ErrorKind::INTERNAL, "CUDA scale kernel failed: ", cudaGetErrorString(err));
}

}  // namespace phv
