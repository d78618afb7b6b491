// CPU-only builds: the GPU backend is absent, and asking for it says how to get it.
#ifndef PHV_WITH_NCCL
#include "backends/gpu_backend.h"
#include "common/error.h"

namespace phv {

std::unique_ptr<GpuBackend> make_gpu_backend(Store&, const std::string&, const GpuBackendOptions&) {
  throw_error(ErrorKind::INVALID_ARGUMENT,
              "pyhorovod was built without the GPU backend (NCCL), so CUDA tensors are not supported; "
              "rebuild with nvcc and NCCL present (pip install nvidia-nccl-cu13) and "
              "PYHOROVOD_WITH_NCCL=ON to make the build fail loudly when they are missing");
}

bool gpu_backend_built() { return false; }

int nccl_version_built() { return 0; }

}  // namespace phv
#endif
