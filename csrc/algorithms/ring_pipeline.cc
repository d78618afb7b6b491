// The pipelined ring (see ring_schedule.h for chunks, segments, steps and the message order).
//
// Every link carries a stream of segments. Up to W = tuning.max_segments_in_flight sends to the right and
// W receives from the left are posted at any time, so the transport moves both directions while this
// thread reduces. A send that forwards a segment (send j >= lead) is posted as soon as receive j - lead
// has been reduced: segments flow across steps without any barrier between steps.
//
// Where the bytes go (per element of the buffer, per step):
//   reduce phase, shared-memory neighbour (Transport::recv_in_place): the segment is reduced straight
//     from the ring, ONE pass reads ring + buf and writes buf (a ReduceSink): no copy at all on the
//     receiving side; the sender's one copy into the ring is the only copy of the hop.
//   reduce phase, TCP neighbour: the segment lands in a scratch slot (the kernel's copy out of the
//     socket; W slots of one segment each, so scratch memory is W segments, not a buffer), then ONE pass
//     reads slot + buf and writes buf (reduce_into): no separate copy.
//   copy phase (allgather steps): the segment is received straight into buf (TCP: the kernel's copy;
//     shared memory: one copy out of the ring): zero extra copies.
//   sends always read buf directly (TCP: the kernel's copy; shared memory: one copy into the ring).
#include "algorithms/ring_pipeline.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "common/enforce.h"
#include "common/reduce.h"

namespace phv {
namespace {

// dst = (a (op) b) * scale for count elements, where a is dst itself when in place.
void reduce_segment(char* dst, const char* a, const void* b, size_t count, DataType dt, ReduceOp op, double scale) {
  if (a == dst) return reduce_scale_into(dst, b, count, dt, op, scale);
  reduce_to(dst, a, b, count, dt, op);
  scale_buffer(dst, count, dt, scale);  // (a no-op at 1; at most a segment, still in cache)
}

// Zero-copy receive of a reduce-phase segment: each piece is reduced into the buffer where it lies in
// the transport (shared memory), dst[offset..] = (src[offset..] (op) piece) * scale.
struct ReduceSink final : RecvSink {
  ReduceSink(DataType dt_, ReduceOp op_) : dt(dt_), op(op_), esize(dtype_size(dt_)) {}
  void consume(const void* data, size_t offset, size_t len) override {
    reduce_segment(dst + offset, src + offset, data, len / esize, dt, op, scale);
  }
  char* dst = nullptr;
  const char* src = nullptr;  // the operand: dst itself, or the input out of place
  double scale = 1.0;  // the postscale, on the last reduction of a segment this rank owns
  DataType dt;
  ReduceOp op;
  size_t esize;
};

}  // namespace

void run_ring(const Comm& comm, void* buf_v, const std::vector<Range>& chunks, DataType dt, ReduceOp op, RingKind kind,
              const Tuning& tuning, Deadline deadline, double postscale, const void* input) {
  const int p = comm.size();
  if (p <= 1) return;
  char* buf = static_cast<char*>(buf_v);
  const char* in = input != nullptr && kind != RingKind::ALLGATHER ? static_cast<const char*>(input) : buf;
  const size_t esize = kind == RingKind::ALLGATHER ? 1 : dtype_size(dt);
  size_t max_chunk = 0;
  for (const Range& c : chunks) max_chunk = std::max(max_chunk, c.count);
  if (max_chunk == 0) return;

  Transport* tr = comm.transport;
  const int right = comm.global((comm.rank() + 1) % p);
  const int left = comm.global((comm.rank() + p - 1) % p);
  // Segment boundaries must agree on both ends of every link: chosen by a fact every rank agrees on.
  const size_t seg_elems =
      std::max<size_t>(1, segment_size(tuning, max_chunk * esize, tr->shared_memory_everywhere()) / esize);
  const int shift = kind == RingKind::ALLGATHER ? 0 : 1;
  const int steps = kind == RingKind::ALLREDUCE ? 2 * (p - 1) : p - 1;
  const int reduce_steps = kind == RingKind::ALLGATHER ? 0 : p - 1;  // steps t < this reduce
  const RingPlan plan = make_ring_plan(comm.rank(), p, chunks, seg_elems, shift, steps);
  const size_t nsend = plan.sends.size(), nrecv = plan.recvs.size();
  const size_t window = static_cast<size_t>(std::max(1, tuning.max_segments_in_flight));

  // Receive j of the reduce phase uses slot j % window (a scratch segment, or a sink when the left
  // neighbour's bytes can be reduced in place); it is free again once receive j has been reduced, and at
  // most `window` receives are outstanding, so slots never collide.
  const bool in_place = reduce_steps > 0 && tr->recv_in_place(left);  // local choice: no wire effect
  std::unique_ptr<char[]> scratch;
  if (reduce_steps > 0 && !in_place) scratch.reset(new char[window * seg_elems * esize]);
  auto slot = [&](size_t j) { return scratch.get() + (j % window) * seg_elems * esize; };
  std::vector<ReduceSink> sinks(in_place ? window : 0, ReduceSink(dt, op));
  // The last reduce step completes a segment of the chunk this rank owns: it is scaled in the same pass
  // that reduces it (reduce_scale_into), before it is sent on.
  const double owned_scale = kind == RingKind::ALLREDUCE ? postscale : 1.0;

  std::vector<char> send_done(nsend, 0), recv_done(nrecv, 0);
  std::unordered_map<RequestId, long> ids;  // >= 0: send index; < 0: -(recv index) - 1
  size_t sends_posted = 0, sends_completed = 0, recvs_posted = 0, recvs_finished = 0;
  std::vector<RequestId> completed;

  // Receives first, so that arriving data has a destination.
  auto post_recvs = [&]() {
    bool any = false;
    while (recvs_posted < nrecv && recvs_posted - recvs_finished < window) {
      size_t j = recvs_posted;
      long guard = plan.overwrite_after[j];
      if (guard >= 0 && !send_done[static_cast<size_t>(guard)]) break;  // region still being sent
      const RingMessage& m = plan.recvs[j];
      char* dst = buf + m.range.offset * esize;
      RequestId id;
      if (m.step >= reduce_steps) {
        id = tr->post_recv(left, dst, m.range.count * esize);
      } else if (in_place) {
        ReduceSink& sink = sinks[j % window];
        sink.dst = dst;
        sink.src = in + m.range.offset * esize;
        sink.scale = m.step == reduce_steps - 1 ? owned_scale : 1.0;
        id = tr->post_recv_sink(left, m.range.count * esize, esize, &sink);
      } else {
        id = tr->post_recv(left, slot(j), m.range.count * esize);
      }
      ids[id] = -static_cast<long>(j) - 1;
      ++recvs_posted;
      any = true;
    }
    return any;
  };
  auto post_sends = [&]() {
    bool any = false;
    while (sends_posted < nsend && sends_posted - sends_completed < window &&
           (sends_posted < plan.lead || recvs_finished > sends_posted - plan.lead)) {
      const RingMessage& m = plan.sends[sends_posted];
      const char* from = m.step == 0 ? in : buf;  // the first step sends this rank's own operands
      ids[tr->post_send(right, from + m.range.offset * esize, m.range.count * esize)] = static_cast<long>(sends_posted);
      ++sends_posted;
      any = true;
    }
    return any;
  };

  while (recvs_finished < nrecv || sends_completed < nsend) {
    bool posted = post_recvs();
    posted = post_sends() || posted;
    completed.clear();
    tr->progress(completed, deadline);
    // Nothing moving and nothing can: a bug in the schedule.
    PHV_ENFORCE(!completed.empty() || posted || tr->pending() != 0, "rank ", comm.global(comm.rank()),
                ": ring pipeline stalled (sent ", sends_completed, "/", nsend, ", received ", recvs_finished, "/",
                nrecv, ")");
    for (RequestId id : completed) {
      auto it = ids.find(id);
      if (it == ids.end()) continue;  // not ours (cannot happen while collectives run one at a time)
      long v = it->second;
      ids.erase(it);
      if (v >= 0) {
        send_done[static_cast<size_t>(v)] = 1;
      } else {
        recv_done[static_cast<size_t>(-v - 1)] = 1;
      }
    }
    while (sends_completed < nsend && send_done[sends_completed]) ++sends_completed;
    // Reduce completed receives in link order; after each one, forward it (and refill the freed slot)
    // before reducing the next, so that the right neighbour gets data as early as possible.
    while (recvs_finished < nrecv && recv_done[recvs_finished]) {
      const RingMessage& m = plan.recvs[recvs_finished];
      if (m.step < reduce_steps && !in_place)
        reduce_segment(buf + m.range.offset * esize, in + m.range.offset * esize, slot(recvs_finished), m.range.count,
                       dt, op, m.step == reduce_steps - 1 ? owned_scale : 1.0);
      ++recvs_finished;
      post_sends();
      post_recvs();
    }
  }
}

}  // namespace phv
