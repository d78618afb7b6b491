// make_gpu_backend() for builds with the GPU backend: a GpuBackend that sends each communicator's calls
// to the NCCL backend or to the host-staged one, as its members agreed on first use (gpu_path.h).
#include <cuda_runtime.h>

#include <map>

#include "backends/cuda_backends.h"
#include "backends/cuda_check.h"
#include "common/logging.h"
#include "common/types.h"

namespace phv {
namespace {

// "[0, 1, 2]": in the log line and in the claims' store key.
std::string members_text(const std::vector<int>& members) {
  return shape_str(std::vector<int64_t>(members.begin(), members.end()));
}

class PathRouter : public GpuBackend {
 public:
  PathRouter(Store& store, std::string prefix, const GpuBackendOptions& options)
      : store_(store),
        prefix_(std::move(prefix)),
        options_(options),
        nccl_(make_nccl_backend(store, prefix_, options.global_rank, options.device, options.timeout_s)),
        staged_(make_staged_backend(options.global_rank, options.device, options.tuning, options.timeout_s)),
        claim_{cuda_device_id(options.device), options.path} {}

  void allreduce(const Comm& comm, const std::vector<GpuEntry>& entries, DataType dt, ReduceOp op, double prescale,
                 double postscale, intptr_t producer) override {
    route(comm).allreduce(comm, entries, dt, op, prescale, postscale, producer);
  }
  void allgatherv(const Comm& comm, const void* send, void* recv, const std::vector<size_t>& bytes,
                  intptr_t producer) override {
    route(comm).allgatherv(comm, send, recv, bytes, producer);
  }
  void broadcast(const Comm& comm, void* buf, size_t bytes, int root, intptr_t producer) override {
    route(comm).broadcast(comm, buf, bytes, root, producer);
  }
  void alltoallv(const Comm& comm, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes, intptr_t producer) override {
    route(comm).alltoallv(comm, send, send_bytes, recv, recv_bytes, producer);
  }
  void reducescatter(const Comm& comm, const void* input, void* output, const std::vector<size_t>& counts, DataType dt,
                     ReduceOp op, double prescale, double postscale, intptr_t producer) override {
    route(comm).reducescatter(comm, input, output, counts, dt, op, prescale, postscale, producer);
  }
  std::shared_ptr<void> allocate(size_t bytes) override { return nccl_->allocate(bytes); }

 private:
  // Runs on the engine thread inside a collective unit, so every member of comm gets here for its
  // first CUDA collective (a single member decides alone).
  GpuBackend& route(const Comm& comm) {
    auto it = paths_.find(comm.members);
    if (it == paths_.end()) {
      std::vector<GpuClaim> claims{claim_};
      if (comm.size() > 1) {
        claims = exchange_claims(store_, prefix_ + "/path/" + members_text(comm.members), comm.size(), comm.rank(),
                                 claim_, options_.timeout_s);
      }
      GpuPathChoice choice = choose_gpu_path(claims);
      if (comm.rank() == 0) {
        log(choice.path == GpuPath::NCCL ? LogLevel::INFO : LogLevel::WARNING, "CUDA collectives of ranks ",
            members_text(comm.members), " use the ", gpu_path_name(choice.path), " path: ", choice.reason);
      }
      it = paths_.emplace(comm.members, choice.path).first;
    }
    return it->second == GpuPath::NCCL ? *nccl_ : *staged_;
  }

  Store& store_;
  std::string prefix_;
  GpuBackendOptions options_;
  std::unique_ptr<GpuBackend> nccl_, staged_;
  GpuClaim claim_;
  std::map<std::vector<int>, GpuPath> paths_;
};

}  // namespace

std::string cuda_device_id(int device) {
  char bus[64] = {0};
  check_cuda(cudaDeviceGetPCIBusId(bus, sizeof(bus) - 1, device), "cudaDeviceGetPCIBusId");
  return host_identity() + "/pci:" + bus;
}

std::unique_ptr<GpuBackend> make_gpu_backend(Store& store, const std::string& prefix,
                                             const GpuBackendOptions& options) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    throw_error(ErrorKind::INVALID_ARGUMENT, "pyhorovod's GPU backend is built, but no CUDA device is visible");
  if (options.device < 0 || options.device >= count)
    throw_error(ErrorKind::INVALID_ARGUMENT, "CUDA device ", options.device, " does not exist (", count, " visible)");
  return std::make_unique<PathRouter>(store, prefix, options);
}

bool gpu_backend_built() { return true; }

}  // namespace phv
