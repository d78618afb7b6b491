// Host layout exchange and link measurement for the two-level collectives (hierarchy_setup.h).
#include "engine/hierarchy_setup.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>

#include "algorithms/algorithms.h"
#include "common/logging.h"

namespace phv {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string own_host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

// Fastest of `reps` ring allreduces of `bytes` (float32) over comm, each started after a world barrier
// so that no ring overlaps another kind's.
double time_ring(const Comm& world, const Comm& comm, size_t bytes, const Tuning& tuning, Deadline deadline) {
  const size_t count = bytes / 4;
  std::vector<float> buf(count, 1.0f);
  constexpr int kReps = 3;
  double best = 1e30;
  for (int rep = -1; rep < kReps; ++rep) {  // rep -1: warm-up (connections, page faults)
    barrier(world, deadline);
    Clock::time_point t0 = Clock::now();
    ring_allreduce(comm, buf.data(), count, DataType::FLOAT32, ReduceOp::MAX, tuning, deadline);
    double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (rep >= 0) best = std::min(best, t);
  }
  return best;
}

// Fastest of `reps` allreduces of `bytes` (float32), flat (allreduce(), which picks the algorithm by
// size) or two-level, each started after a world barrier.
double time_allreduce(const Comm& world, const TwoLevel* tl, size_t bytes, const Tuning& tuning, Deadline deadline) {
  const size_t count = bytes / 4;
  std::vector<float> buf(count, 1.0f);
  constexpr int kReps = 3;
  double best = 1e30;
  for (int rep = -1; rep < kReps; ++rep) {
    barrier(world, deadline);
    Clock::time_point t0 = Clock::now();
    if (tl != nullptr) {
      hierarchical_allreduce(*tl, buf.data(), count, DataType::FLOAT32, ReduceOp::MAX, tuning, deadline);
    } else {
      allreduce(world, buf.data(), count, DataType::FLOAT32, ReduceOp::MAX, tuning, deadline);
    }
    double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (rep >= 0) best = std::min(best, t);
  }
  return best;
}

// HierarchyModel::two_level_from_bytes: flat against two-level at 4, 16 and 64 KiB (the same figures
// on every rank: the slowest rank's), walked down from the largest while two levels stay faster by a
// clear margin: at these sizes the gain is small and the timings noisy, and a wrong pick costs as much.
double measured_small_crossover(const Comm& world, const TwoLevel& tl, const Tuning& tuning, Deadline deadline) {
  const std::vector<size_t> sizes = {4 << 10, 16 << 10, 64 << 10};
  constexpr double kWinBy = 0.9;  // two levels must take under 90% of flat's time
  std::vector<double> t;
  for (size_t bytes : sizes) {
    t.push_back(time_allreduce(world, nullptr, bytes, tuning, deadline));
    t.push_back(time_allreduce(world, &tl, bytes, tuning, deadline));
  }
  small_allreduce(world, t.data(), t.size(), DataType::FLOAT64, ReduceOp::MAX, deadline);
  double from = static_cast<double>(sizes.back()) + 1;  // two levels never won: the model decides above
  for (size_t i = sizes.size(); i-- > 0;) {
    if (t[2 * i + 1] >= kWinBy * t[2 * i]) break;
    from = static_cast<double>(sizes[i]);
  }
  return from;
}

}  // namespace

Hierarchy setup_hierarchy(const Comm& world, const HierarchySetup& setup, const Tuning& tuning) {
  Hierarchy h;
  h.allreduce_mode = setup.allreduce_mode;
  h.allgather_mode = setup.allgather_mode;
  const int p = world.size();
  if (p < 2) return h;
  const Deadline deadline = deadline_after(setup.timeout_s);
  uint64_t mine = fnv1a(setup.host_name.empty() ? own_host_name() : setup.host_name);
  std::vector<uint64_t> hashes(static_cast<size_t>(p));
  allgatherv(world, &mine, hashes.data(), std::vector<size_t>(static_cast<size_t>(p), sizeof(uint64_t)), tuning,
             deadline);
  std::map<uint64_t, int> host_index;  // in order of each host's lowest rank
  for (uint64_t x : hashes) {
    if (!host_index.count(x)) {
      int next = static_cast<int>(host_index.size());
      host_index[x] = next;
    }
  }
  for (uint64_t x : hashes) h.host_of.push_back(host_index[x]);

  TwoLevel tl;
  const bool automatic = setup.allreduce_mode == -1 || setup.allgather_mode == -1;
  if (!make_two_level(world, h.host_of, &tl)) {
    if (setup.allreduce_mode == 1 || setup.allgather_mode == 1)
      log(LogLevel::WARNING, "hierarchical collectives asked for, but the ", host_index.size(),
          " hosts do not all have the same number of ranks (or there is one host): using the flat ring");
    return h;
  }
  if (!automatic || tl.per_host < 2) return h;  // one rank per host: two levels are the flat ring

  // Two sizes far enough apart that the slope (beta) is not noise: 256 KiB and 4 MiB of the whole
  // message; the cross rings carry 1/L of it, as they would inside a hierarchical allreduce.
  const double s1 = 256 << 10, s2 = 4 << 20;
  const int L = tl.per_host;
  std::vector<double> t = {
      time_ring(world, world, static_cast<size_t>(s1), tuning, deadline),
      time_ring(world, world, static_cast<size_t>(s2), tuning, deadline),
      time_ring(world, tl.local, static_cast<size_t>(s1), tuning, deadline),
      time_ring(world, tl.local, static_cast<size_t>(s2), tuning, deadline),
      time_ring(world, tl.cross, static_cast<size_t>(s1 / L), tuning, deadline),
      time_ring(world, tl.cross, static_cast<size_t>(s2 / L), tuning, deadline),
  };
  small_allreduce(world, t.data(), t.size(), DataType::FLOAT64, ReduceOp::MAX, deadline);
  h.model.flat = fit_ring(p, s1, t[0], s2, t[1]);
  h.model.local = fit_ring(L, s1, t[2], s2, t[3]);
  h.model.cross = fit_ring(tl.hosts, s1 / L, t[4], s2 / L, t[5]);
  h.model.two_level_from_bytes = measured_small_crossover(world, tl, tuning, deadline);
  log(LogLevel::INFO, "hierarchy: ", tl.hosts, " hosts x ", L, " ranks; flat alpha ", h.model.flat.alpha_s * 1e6,
      " us beta ", h.model.flat.beta_bytes_per_s / 1e6, " MB/s; local alpha ", h.model.local.alpha_s * 1e6, " us beta ",
      h.model.local.beta_bytes_per_s / 1e6, " MB/s; cross alpha ", h.model.cross.alpha_s * 1e6, " us beta ",
      h.model.cross.beta_bytes_per_s / 1e6, " MB/s; two levels below the small-message threshold from ",
      h.model.two_level_from_bytes, " bytes");
  return h;
}

}  // namespace phv
