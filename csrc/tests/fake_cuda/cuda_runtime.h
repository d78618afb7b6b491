// A stand-in for the CUDA runtime, for host-only tests of code written against it (staged_backend_test,
// gpu_router_test):
// "device" memory is host memory, and every cudaMemcpyAsync is queued and performed only when an event
// is found complete by cudaEventQuery (which answers "not ready" twice first). Code that reads a copy's
// destination before waiting for its event therefore sees stale bytes, as it could on a real GPU.
// Per thread: each test rank is a thread with its own queue and its own device's PCI bus id.
#pragma once
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorNotReady = 600 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
#define cudaStreamNonBlocking 1
#define cudaEventDisableTiming 2

namespace fake_cuda {
inline thread_local std::vector<std::function<void()>> pending;
inline thread_local int polls = 0;
inline thread_local std::string pci_bus_id = "0000:01:00.0";  // what this thread's one device reports
}  // namespace fake_cuda

inline cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetPCIBusId(char* out, int len, int) {
  std::strncpy(out, fake_cuda::pci_bus_id.c_str(), static_cast<size_t>(len));
  return cudaSuccess;
}

inline const char* cudaGetErrorString(cudaError_t) { return "fake CUDA error"; }
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = reinterpret_cast<cudaStream_t>(0x10);
  return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = reinterpret_cast<cudaEvent_t>(0x20);
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t) {
  fake_cuda::pending.push_back([dst, src, n] { std::memcpy(dst, src, n); });  // reads src when it runs
  return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t) {
  if (++fake_cuda::polls % 3 != 0) return cudaErrorNotReady;
  for (auto& copy : fake_cuda::pending) copy();
  fake_cuda::pending.clear();
  return cudaSuccess;
}
inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::malloc(n ? n : 1);
  return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void** p, size_t n) {
  *p = std::malloc(n ? n : 1);
  return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
