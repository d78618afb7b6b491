// The GPU path decision (gpu_path.h) with fake device ids: which claims give NCCL or the host-staged
// path, the claims' wire form, and the exchange through a store by member threads (every member reaches
// the same choice; a missing member is a TIMEOUT naming its key).
#include <string>
#include <thread>
#include <vector>

#include "backends/gpu_path.h"
#include "rendezvous/memory_store.h"
#include "tests/check.h"

using namespace phv;
using namespace phv::testing;

namespace {

std::vector<GpuClaim> claims_of(const std::vector<std::string>& ids, GpuPathRequest request = GpuPathRequest::AUTO) {
  std::vector<GpuClaim> out;
  for (const auto& id : ids) out.push_back(GpuClaim{id, request});
  return out;
}

void decisions() {
  const std::string a = "boot:1/pci:0000:1B:00.0", b = "boot:1/pci:0000:2C:00.0",
                    other_host = "boot:2/pci:0000:1B:00.0";
  CHECK(choose_gpu_path(claims_of({a})).path == GpuPath::NCCL);
  CHECK(choose_gpu_path(claims_of({a, b})).path == GpuPath::NCCL);
  // Same bus id on another machine is another GPU.
  CHECK(choose_gpu_path(claims_of({a, other_host})).path == GpuPath::NCCL);
  GpuPathChoice shared = choose_gpu_path(claims_of({a, b, a}));
  CHECK(shared.path == GpuPath::HOST_STAGED);
  CHECK(shared.reason.find("members 0 and 2 share one device") != std::string::npos, " reason: %s",
        shared.reason.c_str());
  CHECK(choose_gpu_path(claims_of({a, a, a, a})).path == GpuPath::HOST_STAGED);
  // One member asking for staged decides for all, even on separate devices.
  std::vector<GpuClaim> asked = claims_of({a, b});
  asked[1].request = GpuPathRequest::HOST_STAGED;
  GpuPathChoice c = choose_gpu_path(asked);
  CHECK(c.path == GpuPath::HOST_STAGED && c.reason.find("member 1 asked") != std::string::npos);
  // NCCL forced by every member is honoured; by only some, sharing still wins.
  CHECK(choose_gpu_path(claims_of({a, a}, GpuPathRequest::NCCL)).path == GpuPath::NCCL);
  std::vector<GpuClaim> some = claims_of({a, a});
  some[0].request = GpuPathRequest::NCCL;
  CHECK(choose_gpu_path(some).path == GpuPath::HOST_STAGED);
}

void wire_and_parse() {
  for (GpuPathRequest r : {GpuPathRequest::AUTO, GpuPathRequest::NCCL, GpuPathRequest::HOST_STAGED}) {
    GpuClaim back = decode_claim(encode_claim(GpuClaim{"boot:x/pci:0000:01:00.0", r}));
    CHECK(back.request == r && back.device_id == "boot:x/pci:0000:01:00.0");
  }
  expect_error("empty claim", ErrorKind::INTERNAL, {"malformed GPU device claim"}, [] { decode_claim(""); });
  CHECK(parse_gpu_path_request("AUTO") == GpuPathRequest::AUTO);
  CHECK(parse_gpu_path_request("") == GpuPathRequest::AUTO);
  CHECK(parse_gpu_path_request("nccl") == GpuPathRequest::NCCL);
  CHECK(parse_gpu_path_request("Staged") == GpuPathRequest::HOST_STAGED);
  expect_error("unknown path", ErrorKind::INVALID_ARGUMENT, {"'ipc'", "auto, nccl, staged"},
               [] { parse_gpu_path_request("ipc"); });
  CHECK(host_identity().rfind("boot:", 0) == 0 || host_identity().rfind("host:", 0) == 0);
}

// Members as threads over one store: ranks 1 and 3 share a device, so everyone must choose staged.
void exchange(int members) {
  MemoryStore store;
  std::vector<GpuPath> paths(static_cast<size_t>(members));
  std::vector<std::thread> threads;
  for (int m = 0; m < members; ++m) {
    threads.emplace_back([&, m] {
      std::string dev = "boot:1/pci:0000:" + std::to_string(m == 3 ? 1 : m) + "0:00.0";
      auto claims = exchange_claims(store, "phv/gpu/path/set", members, m, GpuClaim{dev, GpuPathRequest::AUTO}, 10);
      paths[static_cast<size_t>(m)] = choose_gpu_path(claims).path;
    });
  }
  for (auto& t : threads) t.join();
  GpuPath want = members > 3 ? GpuPath::HOST_STAGED : GpuPath::NCCL;
  for (int m = 0; m < members; ++m) CHECK(paths[static_cast<size_t>(m)] == want, " members %d, member %d", members, m);
  MemoryStore lonely;
  expect_error("a member never publishes", ErrorKind::TIMEOUT, {"phv/gpu/path/x/1"},
               [&] { exchange_claims(lonely, "phv/gpu/path/x", 2, 0, GpuClaim{"d", GpuPathRequest::AUTO}, 0.2); });
}

}  // namespace

int main() {
  decisions();
  wire_and_parse();
  exchange(3);
  exchange(4);
  return finish("gpu_path_test");
}
