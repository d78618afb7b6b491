// Latency-optimal allreduce for small messages: recursive doubling, and allreduce() which chooses.
//
// p' = largest power of two <= p, rem = p - p'. Fix-up for p not a power of two: the first 2*rem ranks
// pair up (2i, 2i+1); the even one sends its data to the odd one and sits out. The remaining p' ranks
// ("new ranks" 0..p'-1) run log2(p') rounds: in round k, new rank n exchanges its whole buffer with new
// rank n ^ 2^k and both combine. Finally each odd rank of the fix-up sends the result to its even partner.
// Rounds: log2(p') (+2 when p is not a power of two), each moving the whole message.
//
// Identical results on every rank: in each round both partners hold the same two operands and combine
// them in the same order (the lower new rank's value first), so even non-associative float sums agree.
#include <vector>

#include "algorithms/algorithms.h"
#include "common/error.h"
#include "common/reduce.h"

namespace phv {

void small_allreduce(const Comm& comm, void* buf_v, size_t count, DataType dt, ReduceOp op, Deadline deadline) {
  const size_t esize = dtype_size(dt);
  PHV_CHECK_ARG(esize != 0, "allreduce: unknown dtype ", static_cast<int>(dt));
  PHV_CHECK_ARG(op == ReduceOp::SUM || op == ReduceOp::MIN || op == ReduceOp::MAX || op == ReduceOp::PRODUCT,
                "allreduce: op ", reduce_op_name(op), " is not a kernel op (AVERAGE is SUM + scale)");
  const int p = comm.size();
  if (p <= 1 || count == 0) return;
  char* buf = static_cast<char*>(buf_v);
  const size_t bytes = count * esize;
  const int r = comm.rank();
  Transport* tr = comm.transport;
  std::vector<char> tmp(bytes);

  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  const int rem = p - p2;

  int newrank;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      tr->wait_all({tr->post_send(comm.global(r + 1), buf, bytes)}, deadline);
      newrank = -1;
    } else {
      tr->wait_all({tr->post_recv(comm.global(r - 1), tmp.data(), bytes)}, deadline);
      reduce_to(buf, tmp.data(), buf, count, dt, op);  // lower rank's value first
      newrank = r / 2;
    }
  } else {
    newrank = r - rem;
  }

  if (newrank >= 0) {
    for (int mask = 1; mask < p2; mask <<= 1) {
      int partner_new = newrank ^ mask;
      int partner = partner_new < rem ? partner_new * 2 + 1 : partner_new + rem;
      RequestId rid = tr->post_recv(comm.global(partner), tmp.data(), bytes);
      RequestId sid = tr->post_send(comm.global(partner), buf, bytes);
      tr->wait_all({rid, sid}, deadline);
      if (partner_new < newrank) {
        reduce_to(buf, tmp.data(), buf, count, dt, op);
      } else {
        reduce_to(buf, buf, tmp.data(), count, dt, op);
      }
    }
  }

  if (r < 2 * rem) {
    if (r % 2 == 1) {
      tr->wait_all({tr->post_send(comm.global(r - 1), buf, bytes)}, deadline);
    } else {
      tr->wait_all({tr->post_recv(comm.global(r + 1), buf, bytes)}, deadline);
    }
  }
}

void allreduce(const Comm& comm, void* buf, size_t count, DataType dt, ReduceOp op, const Tuning& tuning,
               Deadline deadline) {
  PHV_CHECK_ARG(dtype_size(dt) != 0, "allreduce: unknown dtype ", static_cast<int>(dt));
  if (count * dtype_size(dt) < small_message_threshold(tuning, comm.size())) {
    small_allreduce(comm, buf, count, dt, op, deadline);
  } else {
    ring_allreduce(comm, buf, count, dt, op, tuning, deadline);
  }
}

}  // namespace phv
