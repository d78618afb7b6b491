// The GPU path: collectives on CUDA device buffers through NCCL. Always compiled as an
// interface; make_gpu_backend() throws a clear error in builds without NCCL (gpu_backend_stub.cc), so a
// CPU install imports and runs with no CUDA present.
//
// Stream discipline: every call first makes the backend's own stream wait for `producer_stream` (the
// stream the framework wrote the inputs on; 0 = the legacy default stream) through a CUDA event, then
// does its copies and the NCCL call on its own stream, and returns once an event recorded after them has
// completed. So the caller's kernels that produced the inputs are ordered before the collective, and
// the engine's handle completes from that event.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include "algorithms/tuning.h"
#include "backends/collective_backend.h"
#include "backends/gpu_path.h"
#include "common/types.h"
#include "rendezvous/store.h"
#include "transport/transport.h"

namespace phv {

// Device pointers; the stream field names an entry's producer stream when it differs from the call's
// (fused requests from several streams): the backend waits for each distinct one.
using GpuEntry = BufferEntry;

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  // Several entries are packed into the backend's persistent device fusion buffer with device-to-device
  // copies, reduced in one NCCL call and copied out. prescale/postscale run as a small CUDA kernel.
  virtual void allreduce(const Comm& comm, const std::vector<GpuEntry>& entries, DataType dt, ReduceOp op,
                         double prescale, double postscale, intptr_t producer_stream) = 0;
  virtual void allgatherv(const Comm& comm, const void* send, void* recv, const std::vector<size_t>& bytes_per_rank,
                          intptr_t producer_stream) = 0;
  virtual void broadcast(const Comm& comm, void* buf, size_t bytes, int root, intptr_t producer_stream) = 0;
  virtual void alltoallv(const Comm& comm, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                         const std::vector<size_t>& recv_bytes, intptr_t producer_stream) = 0;
  virtual void reducescatter(const Comm& comm, const void* input, void* output, const std::vector<size_t>& counts,
                             DataType dt, ReduceOp op, double prescale, double postscale, intptr_t producer_stream) = 0;
  // Device memory owned by the caller through the shared_ptr (engine-allocated outputs).
  virtual std::shared_ptr<void> allocate(size_t bytes) = 0;
};

struct GpuBackendOptions {
  int global_rank = 0;
  int device = 0;          // the CUDA ordinal this rank uses (usually its local rank)
  double timeout_s = 300;  // per call, and for the rendezvous of a communicator's first use
  Tuning tuning;           // the host algorithms' tuning, for the host-staged path
  GpuPathRequest path = GpuPathRequest::AUTO;  // PYHOROVOD_GPU_PATH
};

// Per process set (member list), on its first CUDA collective, the members agree on a path (gpu_path.h):
// one NCCL communicator, whose unique id travels through `store` under `prefix`, or the host-staged
// path when members share a device. The choice is logged (a warning for the staged path).
std::unique_ptr<GpuBackend> make_gpu_backend(Store& store, const std::string& prefix, const GpuBackendOptions& options);
bool gpu_backend_built();
// NCCL_VERSION_CODE of the nccl.h the backend was compiled against (e.g. 22807 for 2.28.7); 0 without it.
int nccl_version_built();

}  // namespace phv
