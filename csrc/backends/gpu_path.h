// How the CUDA collectives of one communicator travel, and how its ranks agree on it.
//
// NCCL refuses a communicator in which two ranks use the same physical GPU. Ranks that share a device
// (several processes on one GPU) therefore take the host-staged path instead: device -> pinned host
// copies on the backend's stream, the host ring over the engine's transport, host -> device copies.
//
// The choice is made once per communicator (member list), on its first CUDA collective, when every
// member runs the same agreed unit: each member publishes a claim (its device identity and the path
// it asks for) under a store key, reads every other member's claim, and applies choose_gpu_path() to
// the same list, so all members reach the same answer without a further round.
#pragma once
#include <string>
#include <vector>
#include "rendezvous/store.h"

namespace phv {

enum class GpuPath { NCCL, HOST_STAGED };

// What a rank asks for (PYHOROVOD_GPU_PATH): AUTO picks NCCL unless two members share a device.
enum class GpuPathRequest { AUTO, NCCL, HOST_STAGED };

// "auto", "nccl" or "staged" (case-insensitive); anything else is an INVALID_ARGUMENT error.
GpuPathRequest parse_gpu_path_request(const std::string& text);
const char* gpu_path_name(GpuPath path);

// One member's published claim. device_id identifies the physical device across processes: the host
// (boot id, else hostname) and the device's PCI bus id.
struct GpuClaim {
  std::string device_id;
  GpuPathRequest request = GpuPathRequest::AUTO;
};
std::string encode_claim(const GpuClaim& claim);
GpuClaim decode_claim(const std::string& bytes);  // INTERNAL error on a malformed claim

struct GpuPathChoice {
  GpuPath path = GpuPath::NCCL;
  std::string reason;  // one sentence for the log: which members share a device, or who asked
};

// claims[i] is member i's claim. HOST_STAGED when any two members name the same device_id, or when any
// member asks for it; NCCL otherwise (also when every member asks for NCCL, even on a shared device:
// NCCL then reports the duplicate itself). Pure: the same claims give the same choice on every member.
GpuPathChoice choose_gpu_path(const std::vector<GpuClaim>& claims);

// The identity of this machine's kernel: /proc/sys/kernel/random/boot_id, else the hostname. Processes
// in different containers of one machine see the same boot id, and they do share its GPUs.
std::string host_identity();

// Publishes `mine` under <key>/<my_index> and returns every member's claim in member order (waits up to
// timeout_s for the others; TIMEOUT names the missing keys).
std::vector<GpuClaim> exchange_claims(Store& store, const std::string& key, int members, int my_index,
                                      const GpuClaim& mine, double timeout_s);

}  // namespace phv
