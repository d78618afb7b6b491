#include "transport/transport.h"

#include <algorithm>

#include "common/error.h"

namespace phv {

RequestId Transport::post_recv_sink(int peer, size_t len, size_t /*grain*/, RecvSink* /*sink*/) {
  throw_peer_error(ErrorKind::INTERNAL, peer, "rank ", rank(), ": zero-copy receive of ", len, " bytes from ",
                   describe_peer(peer), " is not supported by this transport");
}

void Transport::read_direct(int peer, uint64_t /*addr*/, void* /*dst*/, size_t len, const char* op) {
  throw_peer_error(ErrorKind::INTERNAL, peer, "rank ", rank(), ": ", op, ": single-copy read of ", len, " bytes from ",
                   describe_peer(peer), " is not supported by this transport");
}

void Transport::write_direct(int peer, uint64_t /*addr*/, const void* /*src*/, size_t len, const char* op) {
  throw_peer_error(ErrorKind::INTERNAL, peer, "rank ", rank(), ": ", op, ": single-copy write of ", len, " bytes to ",
                   describe_peer(peer), " is not supported by this transport");
}

void Transport::wait_all(const std::vector<RequestId>& ids, Deadline deadline) {
  // A linear scan: collectives wait for a handful of requests at a time, and this sits on the
  // small-message path (no hash set to allocate per call).
  std::vector<RequestId> waiting(ids);
  std::vector<RequestId> done;
  while (!waiting.empty() && this->pending() > 0) {
    done.clear();
    progress(done, deadline);
    for (RequestId id : done) {
      auto it = std::find(waiting.begin(), waiting.end(), id);
      if (it != waiting.end()) {
        *it = waiting.back();
        waiting.pop_back();
      }
    }
  }
}

}  // namespace phv
