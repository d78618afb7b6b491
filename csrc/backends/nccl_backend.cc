// NCCL implementation of GpuBackend (built only with PYHOROVOD_WITH_NCCL; see cmake/nccl.cmake).
//
// Copies per fused allreduce of k entries: k device-to-device copies in, one NCCL allreduce in place,
// k copies out (a single entry skips the fusion buffer: at most one copy in->out, then in place).
// Waiting is a poll of cudaEventQuery against the deadline, so a peer that never joins turns into a
// TIMEOUT (after ncclCommAbort) instead of a hang; the poll asks the waiting thread's interrupt check too
// (INTERRUPTED, after ncclCommAbort).
//
// Communicators are non-blocking (ncclConfig_t.blocking = 0): a blocking ncclCommInitRank waits forever
// for a peer that took the unique id and never initialises. The price is that any NCCL call on such a
// communicator (init, a launch outside a group, ncclGroupEnd, ncclCommFinalize) may return ncclInProgress:
// the work goes on in NCCL's background thread, and the communicator must be polled with
// ncclCommGetAsyncError until it leaves ncclInProgress before the next call on it -- and before our next
// stream work, since the kernel is only on the stream by then. settle() is that poll, against a deadline.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "backends/cuda_check.h"
#include "backends/cuda_kernels.h"
#include "backends/cuda_backends.h"
#include "backends/gpu_backend.h"
#include "common/error.h"
#include "common/interrupt.h"

namespace phv {
namespace {

void check_nccl(ncclResult_t res, const char* what) {
  if (res != ncclSuccess) throw_error(ErrorKind::INTERNAL, "NCCL error in ", what, ": ", ncclGetErrorString(res));
}

// A call queued inside ncclGroupStart/End only records work; non-blocking communicators may still answer
// ncclInProgress, which is not an error.
void check_queued(ncclResult_t res, const char* what) {
  if (res != ncclInProgress) check_nccl(res, what);
}

// Errors that the communicator reports asynchronously: a remote or system (network) error means a peer is
// gone; anything else is our own fault.
ErrorKind async_error_kind(ncclResult_t res) {
  return (res == ncclRemoteError || res == ncclSystemError) ? ErrorKind::PEER_LOST : ErrorKind::INTERNAL;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Keeps the thread's NCCL group depth balanced when a call between ncclGroupStart and ncclGroupEnd
// throws: the destructor ends the group, and NCCL then drops the partly queued group with the error.
class Group {
 public:
  Group() { check_nccl(ncclGroupStart(), "ncclGroupStart"); }
  ~Group() {
    if (open_) ncclGroupEnd();
  }
  ncclResult_t end() {
    open_ = false;
    return ncclGroupEnd();
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

 private:
  bool open_ = true;
};

// NCCL has no int16 or bool: bool travels as uint8 (SUM/MAX -> max = logical or, MIN/PRODUCT -> min =
// logical and); int16 is refused, as in Horovod.
ncclDataType_t nccl_type(DataType dt) {
  switch (dt) {
    case DataType::UINT8:
    case DataType::BOOL: return ncclUint8;
    case DataType::INT8: return ncclInt8;
    case DataType::INT32: return ncclInt32;
    case DataType::INT64: return ncclInt64;
    case DataType::FLOAT16: return ncclFloat16;
    case DataType::BFLOAT16: return ncclBfloat16;
    case DataType::FLOAT32: return ncclFloat32;
    case DataType::FLOAT64: return ncclFloat64;
    default: throw_error(ErrorKind::INVALID_ARGUMENT, dtype_name(dt), " is not supported by the NCCL backend");
  }
}

ncclRedOp_t nccl_op(ReduceOp op, DataType dt) {
  if (dt == DataType::BOOL) return (op == ReduceOp::SUM || op == ReduceOp::MAX) ? ncclMax : ncclMin;
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVERAGE: return ncclSum;  // AVERAGE: engine adds postscale 1/n
    case ReduceOp::MIN: return ncclMin;
    case ReduceOp::MAX: return ncclMax;
    case ReduceOp::PRODUCT: return ncclProd;
  }
  throw_error(ErrorKind::INVALID_ARGUMENT, "unknown reduce op");
}

class NcclBackend : public GpuBackend {
 public:
  NcclBackend(Store& store, std::string prefix, int global_rank, int device, double timeout_s)
      : store_(store), prefix_(std::move(prefix)), global_rank_(global_rank), device_(device), timeout_s_(timeout_s) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
  }

  ~NcclBackend() override {
    for (auto& kv : comms_) close_comm(kv.second);
    if (fusion_) cudaFree(fusion_);
    cudaEventDestroy(ready_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(stream_);
  }

  void allreduce(const Comm& comm, const std::vector<GpuEntry>& entries, DataType dt, ReduceOp op, double prescale,
                 double postscale, intptr_t producer) override {
    begin(producer);
    for (const auto& e : entries) {
      if (e.stream != producer) wait_for(e.stream);
    }
    ncclComm_t nc = nccl_comm(comm);
    auto t0 = Clock::now();  // this call's deadline starts after a first-use init (which has its own)
    size_t esize = dtype_size(dt);
    void* buf;
    size_t total = 0;
    for (const auto& e : entries) total += e.count;
    if (entries.size() == 1) {
      buf = entries[0].output;
      if (entries[0].input != entries[0].output)
        check_cuda(cudaMemcpyAsync(buf, entries[0].input, total * esize, cudaMemcpyDeviceToDevice, stream_), "copy in");
    } else {
      buf = fusion_buffer(total * esize);
      size_t off = 0;
      for (const auto& e : entries) {
        check_cuda(
            cudaMemcpyAsync(static_cast<char*>(buf) + off, e.input, e.count * esize, cudaMemcpyDeviceToDevice, stream_),
            "copy into fusion buffer");
        off += e.count * esize;
      }
    }
    cuda_scale_buffer(buf, total, dt, prescale, stream_);
    settle(nc, ncclAllReduce(buf, buf, total, nccl_type(dt), nccl_op(op, dt), nc, stream_), t0, "ncclAllReduce");
    cuda_scale_buffer(buf, total, dt, postscale, stream_);
    if (entries.size() > 1) {
      size_t off = 0;
      for (const auto& e : entries) {
        check_cuda(cudaMemcpyAsync(e.output, static_cast<char*>(buf) + off, e.count * esize, cudaMemcpyDeviceToDevice,
                                   stream_),
                   "copy out of fusion buffer");
        off += e.count * esize;
      }
    }
    finish(nc, t0, "allreduce");
  }

  void allgatherv(const Comm& comm, const void* send, void* recv, const std::vector<size_t>& bytes,
                  intptr_t producer) override {
    begin(producer);
    ncclComm_t nc = nccl_comm(comm);
    auto t0 = Clock::now();
    // Uneven blocks: one broadcast per rank inside a group (NCCL's allgather needs equal blocks).
    Group group;
    size_t off = 0;
    for (int r = 0; r < comm.size(); ++r) {
      const void* src = r == comm.rank() ? send : nullptr;
      if (bytes[r] > 0)
        check_queued(ncclBroadcast(src, static_cast<char*>(recv) + off, bytes[r], ncclUint8, r, nc, stream_), "bcast");
      off += bytes[r];
    }
    settle(nc, group.end(), t0, "ncclGroupEnd (allgather)");
    finish(nc, t0, "allgather");
  }

  void broadcast(const Comm& comm, void* buf, size_t bytes, int root, intptr_t producer) override {
    begin(producer);
    ncclComm_t nc = nccl_comm(comm);
    auto t0 = Clock::now();
    if (bytes > 0) settle(nc, ncclBroadcast(buf, buf, bytes, ncclUint8, root, nc, stream_), t0, "ncclBroadcast");
    finish(nc, t0, "broadcast");
  }

  void alltoallv(const Comm& comm, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes, intptr_t producer) override {
    begin(producer);
    ncclComm_t nc = nccl_comm(comm);
    auto t0 = Clock::now();
    Group group;
    size_t soff = 0, roff = 0;
    for (int r = 0; r < comm.size(); ++r) {
      if (send_bytes[r] > 0)
        check_queued(ncclSend(static_cast<const char*>(send) + soff, send_bytes[r], ncclUint8, r, nc, stream_), "send");
      if (recv_bytes[r] > 0)
        check_queued(ncclRecv(static_cast<char*>(recv) + roff, recv_bytes[r], ncclUint8, r, nc, stream_), "recv");
      soff += send_bytes[r];
      roff += recv_bytes[r];
    }
    settle(nc, group.end(), t0, "ncclGroupEnd (alltoall)");
    finish(nc, t0, "alltoall");
  }

  void reducescatter(const Comm& comm, const void* input, void* output, const std::vector<size_t>& counts, DataType dt,
                     ReduceOp op, double prescale, double postscale, intptr_t producer) override {
    begin(producer);
    ncclComm_t nc = nccl_comm(comm);
    auto t0 = Clock::now();
    size_t esize = dtype_size(dt), total = 0;
    for (size_t c : counts) total += c;
    void* scaled = fusion_buffer(total * esize);
    check_cuda(cudaMemcpyAsync(scaled, input, total * esize, cudaMemcpyDeviceToDevice, stream_), "copy in");
    cuda_scale_buffer(scaled, total, dt, prescale, stream_);
    // Uneven blocks: one reduce per block to its owner inside a group.
    Group group;
    size_t off = 0;
    for (int r = 0; r < comm.size(); ++r) {
      void* dst = r == comm.rank() ? output : nullptr;
      if (counts[r] > 0)
        check_queued(ncclReduce(static_cast<char*>(scaled) + off * esize, dst, counts[r], nccl_type(dt),
                                nccl_op(op, dt), r, nc, stream_),
                     "ncclReduce");
      off += counts[r];
    }
    settle(nc, group.end(), t0, "ncclGroupEnd (reducescatter)");
    cuda_scale_buffer(output, counts[comm.rank()], dt, postscale, stream_);
    finish(nc, t0, "reducescatter");
  }

  std::shared_ptr<void> allocate(size_t bytes) override { return cuda_allocate(device_, bytes); }

 private:
  // Orders our stream after the producer's work: event on the producer stream, wait on ours.
  void begin(intptr_t producer) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    wait_for(producer);
  }

  // Our stream waits for the work queued so far on `producer` (the record captures it at call time, so
  // one event can be reused for several producers in a row).
  void wait_for(intptr_t producer) {
    check_cuda(cudaEventRecord(ready_, reinterpret_cast<cudaStream_t>(producer)), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
  }

  // Completes from a CUDA event, polled against the deadline.
  void finish(ncclComm_t nc, Clock::time_point t0, const char* what) {
    check_cuda(cudaEventRecord(done_, stream_), "cudaEventRecord");
    Deadline deadline = t0 + seconds_to_duration(timeout_s_);
    while (true) {
      cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) check_cuda(q, what);
      ncclResult_t async_err = ncclSuccess;
      ncclCommGetAsyncError(nc, &async_err);
      if (async_err != ncclSuccess && async_err != ncclInProgress) {
        ncclCommAbort(nc);
        forget(nc);
        throw_error(async_error_kind(async_err), "rank ", global_rank_, ": NCCL ", what,
                    " failed: ", ncclGetErrorString(async_err));
      }
      if (Clock::now() > deadline) {
        ncclCommAbort(nc);
        forget(nc);
        throw_error(ErrorKind::TIMEOUT, "rank ", global_rank_, ": NCCL ", what, " did not complete within ", timeout_s_,
                    " s (waited ", seconds_since(t0), " s)");
      }
      if (interrupt_requested()) {  // the waiting thread was told to stop (common/interrupt.h)
        ncclCommAbort(nc);
        forget(nc);
        throw_error(ErrorKind::INTERRUPTED, "rank ", global_rank_, ": NCCL ", what, " interrupted after ",
                    seconds_since(t0), " s");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // The one place that handles ncclInProgress: `res` is what an NCCL call on `nc` returned (a launch
  // outside a group, ncclGroupEnd, init). While the communicator reports ncclInProgress we poll it, until
  // timeout_s_ after t0. On an asynchronous error or expiry the communicator is aborted (that also stops
  // a hung init) and forgotten, and the error names `what` and how long we waited. An immediate error
  // (an invalid argument, not ncclInProgress) leaves the communicator alone, as before.
  void settle(ncclComm_t nc, ncclResult_t res, Clock::time_point t0, const std::string& what) {
    if (res == ncclSuccess) return;
    if (res != ncclInProgress) check_nccl(res, what.c_str());
    Deadline deadline = t0 + seconds_to_duration(timeout_s_);
    while (res == ncclInProgress) {
      if (Clock::now() > deadline) {
        double waited = seconds_since(t0);
        ncclCommAbort(nc);
        forget(nc);
        throw_error(ErrorKind::TIMEOUT, "rank ", global_rank_, ": ", what, " did not complete within ", timeout_s_,
                    " s (waited ", waited, " s)");
      }
      if (interrupt_requested()) {
        ncclCommAbort(nc);
        forget(nc);
        throw_error(ErrorKind::INTERRUPTED, "rank ", global_rank_, ": ", what, " interrupted after ", seconds_since(t0),
                    " s");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (ncclCommGetAsyncError(nc, &res) != ncclSuccess) res = ncclInvalidUsage;  // unusable handle
    }
    if (res != ncclSuccess) {
      ncclCommAbort(nc);
      forget(nc);
      throw_error(async_error_kind(res), "rank ", global_rank_, ": ", what, " failed after ", seconds_since(t0),
                  " s: ", ncclGetErrorString(res));
    }
  }

  // Shutdown without a hang: ncclCommFinalize flushes the communicator's work (non-blocking, so polled
  // against the timeout), then ncclCommDestroy frees it locally; a failure or expiry aborts instead.
  // Never throws (runs in the destructor).
  void close_comm(ncclComm_t nc) noexcept {
    ncclResult_t res = ncclCommFinalize(nc);
    Deadline deadline = deadline_after(timeout_s_);
    while (res == ncclInProgress && Clock::now() <= deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (ncclCommGetAsyncError(nc, &res) != ncclSuccess) res = ncclInvalidUsage;
    }
    if (res == ncclSuccess) ncclCommDestroy(nc);
    else ncclCommAbort(nc);
  }

  void forget(ncclComm_t nc) {
    for (auto it = comms_.begin(); it != comms_.end(); ++it)
      if (it->second == nc) {
        comms_.erase(it);
        return;
      }
  }

  void* fusion_buffer(size_t bytes) {
    if (bytes > fusion_bytes_) {
      check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      if (fusion_) cudaFree(fusion_);
      fusion_ = nullptr;
      check_cuda(cudaMalloc(&fusion_, bytes), "cudaMalloc fusion buffer");
      fusion_bytes_ = bytes;
    }
    return fusion_;
  }

  // One communicator per member list; rank 0 of the set publishes the unique id through the store.
  ncclComm_t nccl_comm(const Comm& comm) {
    auto it = comms_.find(comm.members);
    if (it != comms_.end()) return it->second;
    std::string key = prefix_ + "/nccl/";
    for (int m : comm.members) key += std::to_string(m) + ",";
    key += "/" + std::to_string(generation_[comm.members]++);
    ncclUniqueId id;
    if (comm.rank() == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store_.set(key, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
    } else {
      std::string v = store_.get(key, timeout_s_);
      if (v.size() != sizeof(id)) throw_error(ErrorKind::INTERNAL, "bad NCCL unique id under ", key);
      std::memcpy(&id, v.data(), sizeof(id));
    }
    // Non-blocking init (see the top of the file): it returns at once, settle() waits for the peers
    // with a deadline and aborts the half-made communicator if one of them never shows up.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t nc = nullptr;
    auto t0 = Clock::now();
    ncclResult_t res = ncclCommInitRankConfig(&nc, comm.size(), id, comm.rank(), &config);
    if (res != ncclSuccess && res != ncclInProgress) {
      if (nc != nullptr) ncclCommAbort(nc);  // NCCL leaves it null on an immediate failure; be safe
      check_nccl(res, "ncclCommInitRank");
    }
    std::ostringstream what;
    what << "ncclCommInitRank (rank " << comm.rank() << " of a process set / communicator of " << comm.size()
         << " ranks, unique id under " << key << ")";
    settle(nc, res, t0, what.str());
    comms_[comm.members] = nc;
    return nc;
  }

  Store& store_;
  std::string prefix_;
  int global_rank_;
  int device_;
  double timeout_s_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  void* fusion_ = nullptr;
  size_t fusion_bytes_ = 0;
  std::map<std::vector<int>, ncclComm_t> comms_;
  std::map<std::vector<int>, int> generation_;
};

}  // namespace

std::unique_ptr<GpuBackend> make_nccl_backend(Store& store, const std::string& prefix, int global_rank, int device,
                                              double timeout_s) {
  return std::make_unique<NcclBackend>(store, prefix, global_rank, device, timeout_s);
}

int nccl_version_built() { return NCCL_VERSION_CODE; }

}  // namespace phv
