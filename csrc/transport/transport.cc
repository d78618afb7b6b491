#include "transport/transport.h"

#include <algorithm>
#include <unordered_set>

#include "common/error.h"

namespace phv {

RequestId Transport::post_recv_sink(int peer, size_t len, size_t /*grain*/, RecvSink* /*sink*/) {
  throw_error(ErrorKind::INTERNAL, "rank ", rank(), ": zero-copy receive of ", len, " bytes from ",
              describe_peer(peer), " is not supported by this transport");
}

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
