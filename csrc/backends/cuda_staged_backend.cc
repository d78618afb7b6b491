// Host-staged GpuBackend: CUDA collectives for ranks that share a GPU (gpu_path.h says when).
//
// Every call: our stream waits for the producer stream(s) (as in the NCCL backend), the inputs are
// copied device -> pinned host on our stream, the host algorithm runs over comm.transport (the engine's
// ring: shared memory between local ranks), and the results are copied host -> device on our stream;
// the call returns when those copies are complete. prescale/postscale are applied on the host with
// scale_buffer, so results equal the CPU path's bit for bit. Costs per call: one D2H and one H2D copy of
// the payload through one pinned buffer, plus the host collective.
#include <cuda_runtime.h>

#include <chrono>
#include <thread>

#include "algorithms/algorithms.h"
#include "backends/cuda_backends.h"
#include "backends/cuda_check.h"
#include "common/reduce.h"

namespace phv {
namespace {

class StagedBackend : public GpuBackend {
 public:
  StagedBackend(int global_rank, int device, const Tuning& tuning, double timeout_s)
      : global_rank_(global_rank), device_(device), tuning_(tuning), timeout_s_(timeout_s) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
  }

  ~StagedBackend() override {
    cudaEventDestroy(ready_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(stream_);
  }

  void allreduce(const Comm& comm, const std::vector<GpuEntry>& entries, DataType dt, ReduceOp op, double prescale,
                 double postscale, intptr_t producer) override {
    Deadline deadline = begin(producer);
    for (const auto& e : entries) {
      if (e.stream != producer) wait_for(e.stream);
    }
    size_t esize = dtype_size(dt), total = 0;
    for (const auto& e : entries) total += e.count;
    char* host = host_.get(total * esize);
    size_t off = 0;
    for (const auto& e : entries) {
      to_host(host + off, e.input, e.count * esize);
      off += e.count * esize;
    }
    complete(deadline, "allreduce: device -> host copies");
    if (prescale != 1.0) scale_buffer(host, total, dt, prescale);
    phv::allreduce(comm, host, total, dt, op, tuning_, deadline, postscale);
    off = 0;
    for (const auto& e : entries) {
      to_device(e.output, host + off, e.count * esize);
      off += e.count * esize;
    }
    complete(deadline, "allreduce: host -> device copies");
  }

  void allgatherv(const Comm& comm, const void* send, void* recv, const std::vector<size_t>& bytes,
                  intptr_t producer) override {
    Deadline deadline = begin(producer);
    size_t total = 0, mine = 0;
    for (int r = 0; r < comm.size(); ++r) {
      if (r == comm.rank()) mine = total;
      total += bytes[r];
    }
    char* host = host_.get(total);
    to_host(host + mine, send, bytes[comm.rank()]);  // my block in place: allgatherv allows the alias
    complete(deadline, "allgather: device -> host copy");
    phv::allgatherv(comm, host + mine, host, bytes, tuning_, deadline);
    to_device(recv, host, total);
    complete(deadline, "allgather: host -> device copy");
  }

  void broadcast(const Comm& comm, void* buf, size_t bytes, int root, intptr_t producer) override {
    Deadline deadline = begin(producer);
    char* host = host_.get(bytes);
    if (comm.rank() == root) {
      to_host(host, buf, bytes);
      complete(deadline, "broadcast: device -> host copy");
    }
    phv::broadcast(comm, host, bytes, root, tuning_, deadline);
    if (comm.rank() != root) {
      to_device(buf, host, bytes);
      complete(deadline, "broadcast: host -> device copy");
    }
  }

  void alltoallv(const Comm& comm, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes, intptr_t producer) override {
    Deadline deadline = begin(producer);
    size_t sent = 0, received = 0;
    for (size_t b : send_bytes) sent += b;
    for (size_t b : recv_bytes) received += b;
    char* host = host_.get(sent + received);
    to_host(host, send, sent);
    complete(deadline, "alltoall: device -> host copy");
    phv::alltoallv(comm, host, send_bytes, host + sent, recv_bytes, deadline);
    to_device(recv, host + sent, received);
    complete(deadline, "alltoall: host -> device copy");
  }

  void reducescatter(const Comm& comm, const void* input, void* output, const std::vector<size_t>& counts, DataType dt,
                     ReduceOp op, double prescale, double postscale, intptr_t producer) override {
    Deadline deadline = begin(producer);
    size_t esize = dtype_size(dt), total = 0;
    for (size_t c : counts) total += c;
    size_t mine = counts[static_cast<size_t>(comm.rank())];
    char* host = host_.get((total + mine) * esize);
    char* out = host + total * esize;
    to_host(host, input, total * esize);
    complete(deadline, "reducescatter: device -> host copy");
    if (prescale != 1.0) scale_buffer(host, total, dt, prescale);
    phv::reducescatter(comm, host, out, counts, dt, op, tuning_, deadline);
    if (postscale != 1.0) scale_buffer(out, mine, dt, postscale);
    to_device(output, out, mine * esize);
    complete(deadline, "reducescatter: host -> device copy");
  }

  std::shared_ptr<void> allocate(size_t bytes) override { return cuda_allocate(device_, bytes); }

 private:
  // The call's deadline starts now; our stream waits for the producer's queued work.
  Deadline begin(intptr_t producer) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    wait_for(producer);
    return deadline_after(timeout_s_);
  }

  void wait_for(intptr_t producer) {
    check_cuda(cudaEventRecord(ready_, reinterpret_cast<cudaStream_t>(producer)), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
  }

  void to_host(void* dst, const void* src, size_t bytes) {
    if (bytes > 0) check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host");
  }

  void to_device(void* dst, const void* src, size_t bytes) {
    if (bytes > 0) check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
  }

  // Waits for everything queued on our stream, polling an event against the deadline.
  void complete(Deadline deadline, const char* what) {
    check_cuda(cudaEventRecord(done_, stream_), "cudaEventRecord");
    while (true) {
      cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) check_cuda(q, what);
      if (Clock::now() > deadline)
        throw_error(ErrorKind::TIMEOUT, "rank ", global_rank_, ": ", what, " did not complete within ", timeout_s_,
                    " s");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  int global_rank_;
  int device_;
  Tuning tuning_;
  double timeout_s_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  PinnedBuffer host_;
};

}  // namespace

std::unique_ptr<GpuBackend> make_staged_backend(int global_rank, int device, const Tuning& tuning, double timeout_s) {
  return std::make_unique<StagedBackend>(global_rank, device, tuning, timeout_s);
}

}  // namespace phv
