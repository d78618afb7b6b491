// The alpha-beta model of flat versus two-level collectives (hierarchy.h), and the choice by size.
#include <algorithm>

#include "algorithms/hierarchy.h"

namespace phv {

double RingFit::allreduce_s(int n, double bytes) const {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * alpha_s + 2.0 * (n - 1) / n * bytes / beta_bytes_per_s;
}

double RingFit::allgather_s(int n, double bytes) const {
  if (n <= 1) return 0;
  return (n - 1) * alpha_s + static_cast<double>(n - 1) / n * bytes / beta_bytes_per_s;
}

RingFit fit_ring(int n, double bytes1, double t1, double bytes2, double t2) {
  RingFit f;
  if (n <= 1 || bytes2 <= bytes1 || t2 <= t1) return f;
  // Two points on T = a*alpha + b*bytes/beta with a = 2(n-1), b = 2(n-1)/n.
  const double a = 2.0 * (n - 1), b = 2.0 * (n - 1) / n;
  f.beta_bytes_per_s = b * (bytes2 - bytes1) / (t2 - t1);
  f.alpha_s = std::max(0.0, (t1 - b * bytes1 / f.beta_bytes_per_s) / a);
  return f;
}

double HierarchyModel::flat_allreduce_s(int hosts, int per_host, double bytes) const {
  return flat.allreduce_s(hosts * per_host, bytes);
}

double HierarchyModel::hierarchical_allreduce_s(int hosts, int per_host, double bytes) const {
  return local.allreduce_s(per_host, bytes) + cross.allreduce_s(hosts, bytes / per_host);
}

double HierarchyModel::flat_allgather_s(int hosts, int per_host, double bytes) const {
  return flat.allgather_s(hosts * per_host, bytes);
}

double HierarchyModel::hierarchical_allgather_s(int hosts, int per_host, double bytes) const {
  // Gather the host's 1/H, swap 1/L of every host block across hosts, gather all pieces in the host.
  return local.allgather_s(per_host, bytes / hosts) + cross.allgather_s(hosts, bytes / per_host) +
         local.allgather_s(per_host, bytes);
}

bool prefer_two_level(int mode, const HierarchyModel& model, const TwoLevel& tl, size_t bytes, OpType collective,
                      const Tuning& tuning) {
  if (mode == 1) return true;
  if (mode == 0 || !model.valid()) return false;
  const int H = tl.hosts, L = tl.per_host;
  const double m = static_cast<double>(bytes);
  if (collective == OpType::ALLGATHER) return model.hierarchical_allgather_s(H, L, m) < model.flat_allgather_s(H, L, m);
  if (bytes < small_message_threshold(tuning, H * L)) return false;
  return model.hierarchical_allreduce_s(H, L, m) < model.flat_allreduce_s(H, L, m);
}

}  // namespace phv
