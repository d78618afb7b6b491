#include "backends/gpu_path.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>

#include "common/error.h"

namespace phv {

GpuPathRequest parse_gpu_path_request(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t.empty() || t == "auto") return GpuPathRequest::AUTO;
  if (t == "nccl") return GpuPathRequest::NCCL;
  if (t == "staged") return GpuPathRequest::HOST_STAGED;
  throw_error(ErrorKind::INVALID_ARGUMENT, "GPU path '", text, "' is not one of auto, nccl, staged");
}

const char* gpu_path_name(GpuPath path) { return path == GpuPath::NCCL ? "NCCL" : "host-staged"; }

// Wire form: one request letter (a, n, s), then the device id.
std::string encode_claim(const GpuClaim& claim) {
  char letter = claim.request == GpuPathRequest::AUTO ? 'a' : claim.request == GpuPathRequest::NCCL ? 'n' : 's';
  return std::string(1, letter) + claim.device_id;
}

GpuClaim decode_claim(const std::string& bytes) {
  GpuClaim c;
  char letter = bytes.empty() ? '?' : bytes[0];
  if (letter == 'a') c.request = GpuPathRequest::AUTO;
  else if (letter == 'n') c.request = GpuPathRequest::NCCL;
  else if (letter == 's') c.request = GpuPathRequest::HOST_STAGED;
  else throw_error(ErrorKind::INTERNAL, "malformed GPU device claim (", bytes.size(), " bytes)");
  c.device_id = bytes.substr(1);
  return c;
}

GpuPathChoice choose_gpu_path(const std::vector<GpuClaim>& claims) {
  GpuPathChoice choice;
  size_t want_nccl = 0;
  for (size_t i = 0; i < claims.size(); ++i) {
    if (claims[i].request == GpuPathRequest::HOST_STAGED) {
      choice.path = GpuPath::HOST_STAGED;
      choice.reason = "member " + std::to_string(i) + " asked for it (PYHOROVOD_GPU_PATH=staged)";
      return choice;
    }
    if (claims[i].request == GpuPathRequest::NCCL) ++want_nccl;
  }
  std::map<std::string, size_t> first_user;
  for (size_t i = 0; i < claims.size(); ++i) {
    auto it = first_user.emplace(claims[i].device_id, i).first;
    if (it->second != i && want_nccl < claims.size()) {
      choice.path = GpuPath::HOST_STAGED;
      choice.reason = "members " + std::to_string(it->second) + " and " + std::to_string(i) + " share one device (" +
                      claims[i].device_id + "), which NCCL refuses";
      return choice;
    }
  }
  choice.reason = want_nccl == claims.size() && claims.size() > 0 ? "every member asked for it"
                                                                  : "every member has a device of its own";
  return choice;
}

std::string host_identity() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (boot && std::getline(boot, id) && !id.empty()) return "boot:" + id;
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') return std::string("host:") + name;
  return "host:unknown";
}

std::vector<GpuClaim> exchange_claims(Store& store, const std::string& key, int members, int my_index,
                                      const GpuClaim& mine, double timeout_s) {
  store.set(key + "/" + std::to_string(my_index), encode_claim(mine));
  std::vector<std::string> keys;
  for (int i = 0; i < members; ++i) keys.push_back(key + "/" + std::to_string(i));
  store.wait(keys, timeout_s);
  std::vector<GpuClaim> claims;
  claims.reserve(keys.size());
  for (const std::string& k : keys) claims.push_back(decode_claim(store.get(k, timeout_s)));
  return claims;
}

}  // namespace phv
