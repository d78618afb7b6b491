// make_gpu_backend() (cuda_router.cc) on host memory, against the fake CUDA runtime of tests/fake_cuda:
// ranks as threads over MemoryTransport and one MemoryStore, each with its own fake PCI bus id. Checks
// that a process set whose members share a device runs on the host-staged backend (exact sums), that
// one whose members all have their own device goes to NCCL (a recording stand-in here), that one member
// asking for staged decides for all, and that the choice holds per member list.
#include <cuda_runtime.h>  // the fake one (tests/fake_cuda)

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda_backends.h"
#include "rendezvous/memory_store.h"
#include "tests/collective_harness.h"

namespace phv {

// The NCCL backend is replaced by one that only counts its allreduces (and fills the output with -1,
// so that a wrong route is visible in the values too).
std::atomic<int> g_nccl_calls{0};

class RecordingNccl : public GpuBackend {
 public:
  void allreduce(const Comm&, const std::vector<GpuEntry>& entries, DataType, ReduceOp, double, double,
                 intptr_t) override {
    ++g_nccl_calls;
    for (const auto& e : entries) std::memset(e.output, 0xff, e.count * sizeof(int32_t));
  }
  void allgatherv(const Comm&, const void*, void*, const std::vector<size_t>&, intptr_t) override {}
  void broadcast(const Comm&, void*, size_t, int, intptr_t) override {}
  void alltoallv(const Comm&, const void*, const std::vector<size_t>&, void*, const std::vector<size_t>&,
                 intptr_t) override {}
  void reducescatter(const Comm&, const void*, void*, const std::vector<size_t>&, DataType, ReduceOp, double, double,
                     intptr_t) override {}
  std::shared_ptr<void> allocate(size_t) override { return nullptr; }
};

std::unique_ptr<GpuBackend> make_nccl_backend(Store&, const std::string&, int, int, double) {
  return std::make_unique<RecordingNccl>();
}

}  // namespace phv

using namespace phv;
using namespace phv::testing;

namespace {

// Each member's bus id and request; expects staged (exact sum of rank + 1) or NCCL on every member.
void world(const char* what, const std::vector<std::string>& bus_ids, const std::vector<GpuPathRequest>& requests,
           bool want_staged) {
  int p = static_cast<int>(bus_ids.size());
  MemoryStore store;
  g_nccl_calls = 0;
  run_world(p, what, [&](const Comm& comm) {
    int r = comm.rank();
    fake_cuda::pci_bus_id = bus_ids[static_cast<size_t>(r)];
    GpuBackendOptions options;
    options.global_rank = r;
    options.timeout_s = 10;
    options.path = requests[static_cast<size_t>(r)];
    auto gpu = make_gpu_backend(store, "phv/gpu", options);
    for (int round = 0; round < 2; ++round) {  // the second call reuses the agreed path
      std::vector<int32_t> x(9, r + 1);
      gpu->allreduce(comm, {GpuEntry{x.data(), x.data(), x.size()}}, DataType::INT32, ReduceOp::SUM, 1.0, 1.0, 0);
      int32_t want = want_staged ? p * (p + 1) / 2 : -1;
      for (int32_t v : x) CHECK(v == want, " %s: rank %d round %d got %d, want %d", what, r, round, v, want);
    }
  });
  int want_calls = want_staged ? 0 : 2 * p;
  CHECK(g_nccl_calls == want_calls, " %s: %d NCCL calls, want %d", what, g_nccl_calls.load(), want_calls);
}

}  // namespace

int main() {
  using R = GpuPathRequest;
  world("one rank", {"0000:01:00.0"}, {R::AUTO}, false);
  world("one rank asking for staged", {"0000:01:00.0"}, {R::HOST_STAGED}, true);
  world("two ranks, two devices", {"0000:01:00.0", "0000:02:00.0"}, {R::AUTO, R::AUTO}, false);
  world("two ranks, one device", {"0000:01:00.0", "0000:01:00.0"}, {R::AUTO, R::AUTO}, true);
  world("four ranks, two of them on one device", {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:02:00.0"},
        {R::AUTO, R::AUTO, R::AUTO, R::AUTO}, true);
  world("three ranks, the last asking for staged", {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"},
        {R::AUTO, R::AUTO, R::HOST_STAGED}, true);
  world("two ranks on one device, both forcing NCCL", {"0000:01:00.0", "0000:01:00.0"}, {R::NCCL, R::NCCL}, false);
  return finish("gpu_router_test");
}
