// Dissemination barrier: in round k (distance d = 2^k) rank r signals r + d and waits for r - d (mod p).
// After ceil(log2 p) rounds every rank has (transitively) heard from every other, so nobody leaves before
// everyone has arrived. Messages are one byte (a zero-length frame would do, a byte is easier to debug).
#include "algorithms/algorithms.h"

namespace phv {

void barrier(const Comm& comm, Deadline deadline) {
  const int p = comm.size();
  const int r = comm.rank();
  Transport* tr = comm.transport;
  for (int d = 1; d < p; d <<= 1) {
    unsigned char out = 1, in = 0;
    RequestId rid = tr->post_recv(comm.global((r - d + p) % p), &in, 1);
    RequestId sid = tr->post_send(comm.global((r + d) % p), &out, 1);
    tr->wait_all({rid, sid}, deadline);
  }
}

}  // namespace phv
