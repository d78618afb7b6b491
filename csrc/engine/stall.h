// Stall inspector (runs on the coordinator): a request that some ranks of its set have submitted and
// others have not, for longer than HOROVOD_STALL_CHECK_TIME_SECONDS, is logged as a warning listing the
// missing ranks per tensor -- the usual cause is ranks submitting different tensors or a subset of ranks
// skipping a collective, which would otherwise hang silently. With HOROVOD_STALL_SHUTDOWN_TIME_SECONDS
// > 0, a request waiting that long shuts the engine down on every rank with that text as the reason.
// A collective that stalls once it runs (a peer stopped mid-transfer; then the gather of a round never
// completes either) is watched by the transport with the same two times (transport/transfer_watch.h).
//
// Use per round: if (due(now)) { for each waiting request: consider(...); reason = conclude(now); }
#pragma once
#include <string>
#include <unordered_map>
#include <vector>
#include "common/types.h"
#include "engine/descriptor.h"

namespace phv {

class StallInspector {
 public:
  StallInspector(double check_s, double shutdown_s, bool disabled);

  bool due(Clock::time_point now);
  // One request that is waiting: `missing` lists the members that have not submitted it.
  void consider(const Key& key, DescKind kind, double waited_s, const std::vector<int>& missing);
  // Logs the warning (if any tensor is newly stalled) and returns the shutdown reason, "" if none.
  std::string conclude(Clock::time_point now);

 private:
  double check_s_;
  double shutdown_s_;
  bool disabled_;
  double interval_s_;
  Clock::time_point next_check_;
  std::unordered_map<Key, Clock::time_point, KeyHash> last_warned_;
  std::vector<std::string> warn_lines_;
  std::string shutdown_reason_;
  std::vector<Key> seen_;
};

}  // namespace phv
