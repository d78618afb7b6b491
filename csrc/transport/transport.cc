#include "transport/transport.h"

#include <algorithm>
#include <unordered_set>

namespace phv {

void Transport::wait_all(const std::vector<RequestId>& ids, Deadline deadline) {
  std::unordered_set<RequestId> pending(ids.begin(), ids.end());
  std::vector<RequestId> done;
  while (!pending.empty() && this->pending() > 0) {
    done.clear();
    progress(done, deadline);
    for (RequestId id : done) pending.erase(id);
  }
}

}  // namespace phv
