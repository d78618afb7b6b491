// At init: which ranks share a host, and (when a choice is automatic) the fitted model of flat versus
// two-level collectives (algorithms/hierarchy.h), the same on every rank.
#pragma once
#include <string>
#include "algorithms/hierarchy.h"
#include "algorithms/tuning.h"
#include "transport/transport.h"

namespace phv {

struct HierarchySetup {
  std::string host_name;   // this rank's host (empty: gethostname()); ranks with equal names share a host
  int allreduce_mode = -1; // 1 on, 0 off, -1 automatic
  int allgather_mode = -1;
  double timeout_s = 60;   // bound of the set-up's collectives
};

// Collective over world (every rank calls it at the same point, before any other traffic). Exchanges a
// hash of every rank's host name; when the hosts allow two levels (>= 2 hosts of equal size >= 2) and a
// mode is automatic, times flat, local and cross rings at two sizes, takes every rank's slowest time of
// each (so all ranks fit the same numbers) and fits the model. Logs the fit at INFO.
Hierarchy setup_hierarchy(const Comm& world, const HierarchySetup& setup, const Tuning& tuning);

}  // namespace phv
