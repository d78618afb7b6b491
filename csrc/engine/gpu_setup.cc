#include "engine/gpu_setup.h"

#include "common/error.h"
#include "rendezvous/memory_store.h"

namespace phv {

void GpuSetup::check(const Request& request) {
  // Refused here, per request: NCCL cannot do these, and the engine's fallbacks (identity fill for
  // joined ranks, host-side copies) assume host memory.
  PHV_CHECK_ARG(request.dtype != DataType::INT16, op_type_name(request.type), " '", request.name,
                "': int16 CUDA tensors are not supported (NCCL has no int16)");
  PHV_CHECK_ARG(request.type != OpType::BROADCAST || request.input == request.output, "broadcast '", request.name,
                "': CUDA tensors are broadcast in place (input must equal output)");
  std::lock_guard<std::mutex> lock(mu_);
  if (gpu_) {
    PHV_CHECK_ARG(request.device == device_, op_type_name(request.type), " '", request.name, "': rank ", rank_,
                  " runs its CUDA collectives on cuda:", device_, ", got a tensor on cuda:", request.device,
                  " (one device per process)");
    return;
  }
  if (!factory_) {
    // Engines without a TcpBackend (C++ tests): a single rank needs no rendezvous, so a private
    // in-memory store will do; several ranks would need the real one.
    PHV_CHECK_ARG(size_ == 1, "this engine has no rendezvous store for the GPU backend");
    store_ = std::make_unique<MemoryStore>();
    factory_ = [this](int device) {
      GpuBackendOptions gpu;
      gpu.global_rank = rank_;
      gpu.device = device;
      gpu.timeout_s = options_.timeout_s;
      gpu.tuning = options_.connect.tuning;
      gpu.path = parse_gpu_path_request(options_.gpu_path);
      return make_gpu_backend(*store_, "phv", gpu);
    };
  }
  // A backend that cannot be made (no CUDA device, a build without NCCL) is not an argument error: the
  // request still goes through negotiation, so a rank that used a CPU tensor is told about the mismatch,
  // and otherwise it fails alone when its unit runs, with this message (the engine keeps working).
  try {
    gpu_ = factory_(request.device);
    device_ = request.device;
    executor_.set_gpu(gpu_.get());
  } catch (const HvdError& e) {
    error_ = e.what();
  }
}

std::string GpuSetup::missing() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (gpu_) return std::string();
  return error_.empty() ? "no GPU backend" : error_;
}

}  // namespace phv
