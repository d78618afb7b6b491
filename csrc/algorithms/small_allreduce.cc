// Latency-optimal allreduce for small messages: recursive doubling (its schedule and why results agree
// on every rank: algorithms/recursive_doubling.h), and allreduce() which chooses.
//
// Copies per round: the partner's whole buffer arrives in a temporary (on the stack up to 512 bytes)
// through the transport's copy (shared memory: into and out of the ring; TCP: the kernel's), then one
// reduce_to pass combines it with the buffer in place. Nothing else is copied or allocated.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/direct_copy.h"
#include "algorithms/recursive_doubling.h"
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

  const RdSchedule schedule(r, p);
  for (int i = 0; i < schedule.n; ++i) {
    const RdStep& st = schedule.steps[i];
    const int peer = comm.global(st.peer);
    switch (st.kind) {
      case RdStep::SEND: waiter.wait(tr->post_send(peer, buf, bytes), deadline); break;
      case RdStep::RECV_RESULT: waiter.wait(tr->post_recv(peer, buf, bytes), deadline); break;
      case RdStep::RECV_COMBINE:
      case RdStep::EXCHANGE: {
        RequestId rid = tr->post_recv(peer, tmp, bytes);
        if (st.kind == RdStep::EXCHANGE) {
          waiter.wait(rid, tr->post_send(peer, buf, bytes), deadline);
        } else {
          waiter.wait(rid, deadline);
        }
        if (st.peer_first) {
          reduce_to(buf, tmp, buf, count, dt, op);
        } else {
          reduce_to(buf, buf, tmp, count, dt, op);
        }
        break;
      }
    }
  }
}

void allreduce(const Comm& comm, void* buf, size_t count, DataType dt, ReduceOp op, const Tuning& tuning,
               Deadline deadline, double postscale, const void* input) {
  PHV_CHECK_ARG(dtype_size(dt) != 0, "allreduce: unknown dtype ", static_cast<int>(dt));
  PHV_CHECK_ARG(input == nullptr || !ranges_overlap(input, count * dtype_size(dt), buf, count * dtype_size(dt)),
                "allreduce: the input overlaps the output buffer");
  // Every rank must make the same choice: decided by sizes and a fact all ranks agree on. Through
  // shared memory a hop costs alpha_shm_s instead of alpha_s, so the latency algorithm pays off for less.
  const bool shm = comm.transport->shared_memory_everywhere();
  const bool ring =
      op != ReduceOp::ADASUM && count * dtype_size(dt) >= small_message_threshold(tuning, comm.size(), shm);
  if (input != nullptr && !ring && count > 0) std::memcpy(buf, input, count * dtype_size(dt));
  if (op == ReduceOp::ADASUM) return adasum_allreduce(comm, buf, {count}, dt, deadline, postscale);
  if (!ring) {
    small_allreduce(comm, buf, count, dt, op, deadline);
    if (postscale != 1.0) scale_buffer(buf, count, dt, postscale);
  } else if (use_direct_allreduce(comm, count * dtype_size(dt))) {
    direct_allreduce(comm, buf, count, dt, op, deadline, postscale, input);
  } else {
    ring_allreduce(comm, buf, count, dt, op, tuning, deadline, postscale, input);
  }
}

}  // namespace phv
