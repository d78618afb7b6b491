// Latency-optimal allreduce for small messages: recursive doubling, and allreduce() which chooses.
//
// p' = largest power of two <= p, rem = p - p'. Fix-up for p not a power of two: the first 2*rem ranks
// pair up (2i, 2i+1); the even one sends its data to the odd one and sits out. The remaining p' ranks
// ("new ranks" 0..p'-1) run log2(p') rounds: in round k, new rank n exchanges its whole buffer with new
// rank n ^ 2^k and both combine. Finally each odd rank of the fix-up sends the result to its even partner.
// Rounds: log2(p') (+2 when p is not a power of two), each moving the whole message.
//
// Copies per round: the partner's whole buffer arrives in a temporary (on the stack up to 512 bytes)
// through the transport's copy (shared memory: into and out of the ring; TCP: the kernel's), then one
// reduce_to pass combines it with the buffer in place. Nothing else is copied or allocated.
//
// Identical results on every rank: in each round both partners hold the same two operands and combine
// them in the same order (the lower new rank's value first), so even non-associative float sums agree.
#include <algorithm>
#include <vector>

#include "algorithms/algorithms.h"
#include "common/error.h"
#include "common/reduce.h"

namespace phv {
namespace {

// The latency path allocates nothing for tiny messages: the partner's copy goes to a stack buffer, and
// waiting reuses one vector of completed ids per thread.
constexpr size_t kStackBytes = 512;

class Waiter {
 public:
  explicit Waiter(Transport* tr) : tr_(tr) {}
  // Blocks until the request has completed.
  void wait(RequestId a, Deadline deadline) { wait_for(a, a, deadline); }
  // Blocks until both requests have completed.
  void wait(RequestId a, RequestId b, Deadline deadline) { wait_for(a, b, deadline); }

 private:
  // b == a: one request (two posted requests never share an id).
  void wait_for(RequestId a, RequestId b, Deadline deadline) {
    bool wa = true, wb = b != a;
    static thread_local std::vector<RequestId> done;
    while ((wa || wb) && tr_->pending() > 0) {
      done.clear();
      tr_->progress(done, deadline);
      for (RequestId id : done) {
        if (id == a) wa = false;
        else if (id == b) wb = false;
      }
    }
  }

  Transport* tr_;
};

}  // namespace

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
  char stack_tmp[kStackBytes];
  std::vector<char> heap_tmp(bytes > kStackBytes ? bytes : 0);
  char* tmp = bytes > kStackBytes ? heap_tmp.data() : stack_tmp;
  Waiter waiter(tr);

  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  const int rem = p - p2;

  int newrank;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      waiter.wait(tr->post_send(comm.global(r + 1), buf, bytes), deadline);
      newrank = -1;
    } else {
      waiter.wait(tr->post_recv(comm.global(r - 1), tmp, bytes), deadline);
      reduce_to(buf, tmp, buf, count, dt, op);  // lower rank's value first
      newrank = r / 2;
    }
  } else {
    newrank = r - rem;
  }

  if (newrank >= 0) {
    for (int mask = 1; mask < p2; mask <<= 1) {
      int partner_new = newrank ^ mask;
      int partner = partner_new < rem ? partner_new * 2 + 1 : partner_new + rem;
      RequestId rid = tr->post_recv(comm.global(partner), tmp, bytes);
      RequestId sid = tr->post_send(comm.global(partner), buf, bytes);
      waiter.wait(rid, sid, deadline);
      if (partner_new < newrank) {
        reduce_to(buf, tmp, buf, count, dt, op);
      } else {
        reduce_to(buf, buf, tmp, count, dt, op);
      }
    }
  }

  if (r < 2 * rem) {
    if (r % 2 == 1) {
      waiter.wait(tr->post_send(comm.global(r - 1), buf, bytes), deadline);
    } else {
      waiter.wait(tr->post_recv(comm.global(r + 1), buf, bytes), deadline);
    }
  }
}

void allreduce(const Comm& comm, void* buf, size_t count, DataType dt, ReduceOp op, const Tuning& tuning,
               Deadline deadline, double postscale) {
  PHV_CHECK_ARG(dtype_size(dt) != 0, "allreduce: unknown dtype ", static_cast<int>(dt));
  if (op == ReduceOp::ADASUM) return adasum_allreduce(comm, buf, {count}, dt, deadline, postscale);
  // Every rank must make the same choice: decided by sizes and a fact all ranks agree on. Through
  // shared memory a hop costs alpha_shm_s instead of alpha_s, so the latency algorithm pays off for less.
  const bool shm = comm.transport->shared_memory_everywhere();
  if (count * dtype_size(dt) < small_message_threshold(tuning, comm.size(), shm)) {
    small_allreduce(comm, buf, count, dt, op, deadline);
    if (postscale != 1.0) scale_buffer(buf, count, dt, postscale);
  } else {
    ring_allreduce(comm, buf, count, dt, op, tuning, deadline, postscale);
  }
}

}  // namespace phv
