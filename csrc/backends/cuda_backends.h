// The two implementations behind make_gpu_backend() (cuda_router.cc picks one per communicator), and the
// device identity the router's members compare. Built only with PYHOROVOD_WITH_NCCL.
#pragma once
#include <memory>
#include <string>
#include "algorithms/tuning.h"
#include "backends/gpu_backend.h"

namespace phv {

// NCCL communicators, one per member list (nccl_backend.cc).
std::unique_ptr<GpuBackend> make_nccl_backend(Store& store, const std::string& prefix, int global_rank, int device,
                                              double timeout_s);

// Host-staged collectives (cuda_staged_backend.cc): device -> pinned host copies on the backend's
// stream, the host algorithms over comm.transport with `tuning`, host -> device copies.
std::unique_ptr<GpuBackend> make_staged_backend(int global_rank, int device, const Tuning& tuning, double timeout_s);

// host_identity() and the device's PCI bus id: equal for two processes exactly when they use one GPU.
std::string cuda_device_id(int device);

}  // namespace phv
