// CUDA runtime helpers shared by the GPU backends (built only with PYHOROVOD_WITH_NCCL).
#pragma once
#include <cuda_runtime.h>

#include <memory>

#include "common/error.h"

namespace phv {

inline void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw_error(ErrorKind::INTERNAL, "CUDA error in ", what, ": ", cudaGetErrorString(err));
}

// Device memory on `device`, freed when the last shared_ptr goes (engine-allocated outputs).
inline std::shared_ptr<void> cuda_allocate(int device, size_t bytes) {
  void* p = nullptr;
  check_cuda(cudaSetDevice(device), "cudaSetDevice");  // the calling thread may not have chosen it yet
  check_cuda(cudaMalloc(&p, bytes > 0 ? bytes : 1), "cudaMalloc");
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

// Pinned (page-locked) host memory that grows to the largest request and is never shrunk: the
// device <-> host copies of the host-staged path run at full PCIe/NVLink-C2C speed only from pinned pages.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // The caller makes sure no copy still uses the old pages (the staged path synchronises per call).
  char* get(size_t bytes) {
    if (bytes > bytes_) {
      if (ptr_) cudaFreeHost(ptr_);
      ptr_ = nullptr;
      bytes_ = 0;
      check_cuda(cudaMallocHost(&ptr_, bytes), "cudaMallocHost (pinned staging buffer)");
      bytes_ = bytes;
    }
    return static_cast<char*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace phv
