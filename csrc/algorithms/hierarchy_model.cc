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

double RingFit::exchanges_s(int n, double bytes) const {
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  return rounds * (alpha_s + bytes / beta_bytes_per_s);
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

double HierarchyModel::flat_small_allreduce_s(int hosts, int per_host, double bytes) const {
  return local.exchanges_s(per_host, bytes) + cross.exchanges_s(hosts, bytes);
}

double HierarchyModel::hierarchical_allreduce_s(int hosts, int per_host, double bytes, double cross_small_bytes) const {
  const double shard = bytes / per_host;
  if (shard < cross_small_bytes) return local.allreduce_s(per_host, bytes) + cross.exchanges_s(hosts, shard);
  return local.allreduce_s(per_host, bytes) + cross.allreduce_s(hosts, shard);
}

double HierarchyModel::flat_allgather_s(int hosts, int per_host, double bytes) const {
  return flat.allgather_s(hosts * per_host, bytes);
}

double HierarchyModel::hierarchical_allgather_s(int hosts, int per_host, double bytes) const {
  // Gather the host's 1/H, swap 1/L of every host block across hosts, gather all pieces in the host.
  return local.allgather_s(per_host, bytes / hosts) + cross.allgather_s(hosts, bytes / per_host) +
         local.allgather_s(per_host, bytes);
}

HierarchyModel HierarchyModel::with_alpha_floor(const Tuning& tuning) const {
  HierarchyModel m = *this;
  m.flat.alpha_s = std::max(m.flat.alpha_s, tuning.alpha_s);
  m.cross.alpha_s = std::max(m.cross.alpha_s, tuning.alpha_s);
  m.local.alpha_s = std::max(m.local.alpha_s, tuning.alpha_shm_s);
  return m;
}

bool prefer_two_level(int mode, const HierarchyModel& fitted, const TwoLevel& tl, size_t bytes, OpType collective,
                      const Tuning& tuning) {
  if (mode == 1) return true;
  if (mode == 0 || !fitted.valid()) return false;
  const HierarchyModel model = fitted.with_alpha_floor(tuning);
  const int H = tl.hosts, L = tl.per_host;
  const double m = static_cast<double>(bytes);
  if (collective == OpType::ALLGATHER) return model.hierarchical_allgather_s(H, L, m) < model.flat_allgather_s(H, L, m);
  // Below the flat comm's small-message threshold the flat allreduce is recursive doubling, not the ring,
  // and two levels only from the size at which init measured them faster.
  const bool small = bytes < small_message_threshold(tuning, H * L);
  if (small && m < model.two_level_from_bytes) return false;
  const double flat = small ? model.flat_small_allreduce_s(H, L, m) : model.flat_allreduce_s(H, L, m);
  const double cross_small = static_cast<double>(small_message_threshold(tuning, H));
  return model.hierarchical_allreduce_s(H, L, m, cross_small) < flat;
}

}  // namespace phv
