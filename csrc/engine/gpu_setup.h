// The engine's lazy GPU set-up: the backend is made on the caller's thread by the first CUDA enqueue
// (a local step, no communication, so a failure refuses only that request), for that request's device,
// and handed to the executor, which uses it on the round-token holder's thread (published through the
// engine mutex by the submit that follows).
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include "backends/gpu_backend.h"
#include "engine/engine.h"
#include "engine/executor.h"
#include "rendezvous/store.h"

namespace phv {

// Makes this rank's GPU backend for a CUDA device (Engine: make_gpu_backend over the TcpBackend's store).
using GpuFactory = std::function<std::unique_ptr<GpuBackend>(int device)>;

class GpuSetup {
 public:
  GpuSetup(int rank, int size, const EngineOptions& options, Executor& executor)
      : rank_(rank), size_(size), options_(options), executor_(executor) {}

  // Set once, before the first enqueue. Without it, CUDA requests are refused at enqueue.
  void set_factory(GpuFactory factory) { factory_ = std::move(factory); }
  // Enqueue of a CUDA request: argument checks, and makes the backend on first use.
  void check(const Request& request);
  // Round-token holder, before a CUDA unit: "" when the backend is there, else why it is not.
  std::string missing() const;

 private:
  int rank_;
  int size_;
  const EngineOptions& options_;
  Executor& executor_;
  GpuFactory factory_;
  std::unique_ptr<Store> store_;  // only without a factory (single-rank C++ tests)
  mutable std::mutex mu_;
  std::unique_ptr<GpuBackend> gpu_;
  int device_ = -1;
  std::string error_;  // why the last attempt to make it failed
};

}  // namespace phv
