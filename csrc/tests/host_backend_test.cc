// HostBackend (backends/host_backend.h) with ranks as threads over MemoryTransport, world sizes 1..4:
// every collective of the CollectiveBackend interface with exact expected values (small integers, so
// sums and the power-of-two scales are exact in every float type). Allreduce runs lone in place, lone
// out of place, fused with a joined rank's identity entry, small (recursive doubling) and large
// (multi-segment ring), flat and two-level (hierarchy forced on, and switched by set_knobs), and as a
// fused Adasum whose dot products must be per entry; the phases it reports are checked in order.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/host_backend.h"
#include "tests/collective_harness.h"

using namespace phv;
using namespace phv::testing;

namespace {

Tuning small_segments() {
  Tuning t;
  t.segment_bytes = 64;          // many ring segments even for small buffers
  t.small_threshold_bytes = 64;  // below: recursive doubling; above: the ring
  return t;
}

CallContext context() {
  CallContext ctx;
  ctx.deadline = soon();
  return ctx;
}

// Rank r's value at element i: small, distinct per rank and element.
double value(int r, size_t i) { return static_cast<double>((i * 3 + static_cast<size_t>(r) * 5) % 11) - 4; }
double sum_over(int p, size_t i) {
  double s = 0;
  for (int r = 0; r < p; ++r) s += value(r, i);
  return s;
}

std::vector<double> inputs(int r, size_t count) {
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = value(r, i);
  return v;
}

// Two hosts of p/2 ranks (p even), else none: the two-level path where the layout allows it.
Hierarchy two_hosts(int p, int mode) {
  Hierarchy h;
  if (p % 2 == 0) {
    for (int r = 0; r < p; ++r) h.host_of.push_back(r < p / 2 ? 0 : 1);
  }
  h.allreduce_mode = mode;
  h.allgather_mode = mode;
  return h;
}

class Recorder : public PhaseObserver {
 public:
  void mark(Phase phase, Edge edge) override {
    static const char* names[] = {"in", "reduce", "out"};
    seen += std::string(edge == Edge::BEGIN ? "+" : "-") + names[static_cast<int>(phase)] + " ";
  }
  std::string seen;
};

void test_allreduce(int p, const Hierarchy& hierarchy, const char* what) {
  run_world(p, what, [&](const Comm& comm) {
    HostBackend host(small_segments());
    host.set_hierarchy(hierarchy);
    int me = comm.rank();
    for (size_t count : {size_t(0), size_t(1), size_t(5), size_t(1025)}) {
      // Lone, in place, prescale 2 and postscale 1/4.
      std::vector<double> buf = inputs(me, count);
      host.allreduce(comm, {BufferEntry{buf.data(), buf.data(), count}}, DataType::FLOAT64, ReduceOp::SUM, 2.0, 0.25,
                     context());
      for (size_t i = 0; i < count; ++i) {
        CHECK(buf[i] == sum_over(p, i) * 0.5, "%s p=%d in place count=%zu i=%zu: got %g", what, p, count, i, buf[i]);
      }
      // Lone, out of place: the input stays untouched.
      std::vector<double> in = inputs(me, count), out(count, -99);
      host.allreduce(comm, {BufferEntry{in.data(), out.data(), count}}, DataType::FLOAT64, ReduceOp::MAX, 1.0, 1.0,
                     context());
      for (size_t i = 0; i < count; ++i) {
        double want = value(0, i);
        for (int r = 1; r < p; ++r) want = std::max(want, value(r, i));
        CHECK(out[i] == want && in[i] == value(me, i), "%s p=%d out of place count=%zu i=%zu", what, p, count, i);
      }
    }
    // Fused: three tensors; the last rank has joined and lacks the middle one (identity, result dropped).
    const size_t a = 7, b = 300, c = 2;
    std::vector<double> x = inputs(me, a), y = inputs(me + 1, b), z = inputs(me + 2, c), xo(a), zo(c);
    bool joined = me == p - 1 && p > 1;
    std::vector<BufferEntry> entries = {BufferEntry{x.data(), xo.data(), a},
                                        joined ? BufferEntry{nullptr, nullptr, b} : BufferEntry{y.data(), y.data(), b},
                                        BufferEntry{z.data(), zo.data(), c}};
    Recorder recorder;
    CallContext ctx = context();
    ctx.phases = &recorder;
    host.allreduce(comm, entries, DataType::FLOAT64, ReduceOp::SUM, 1.0, 1.0, ctx);
    CHECK(recorder.seen == "+in -in +reduce -reduce +out -out ", "%s fused phases: %s", what, recorder.seen.c_str());
    int y_ranks = p > 1 ? p - 1 : 1;
    for (size_t i = 0; i < a; ++i) CHECK(xo[i] == sum_over(p, i), "%s p=%d fused x[%zu]", what, p, i);
    for (size_t i = 0; i < c; ++i) {
      double want = 0;
      for (int r = 0; r < p; ++r) want += value(r + 2, i);
      CHECK(zo[i] == want, "%s p=%d fused z[%zu]: got %g want %g", what, p, i, zo[i], want);
    }
    if (!joined) {
      for (size_t i = 0; i < b; ++i) {
        double want = 0;
        for (int r = 0; r < y_ranks; ++r) want += value(r + 1, i);
        CHECK(y[i] == want, "%s p=%d fused y[%zu]: got %g want %g", what, p, i, y[i], want);
      }
    }
    // The lone path reports only the reduction.
    Recorder lone;
    ctx.phases = &lone;
    std::vector<double> one = inputs(me, 3);
    host.allreduce(comm, {BufferEntry{one.data(), one.data(), 3}}, DataType::FLOAT64, ReduceOp::SUM, 1.0, 1.0, ctx);
    CHECK(lone.seen == "+reduce -reduce ", "%s lone phases: %s", what, lone.seen.c_str());
  });
}

// Fused Adasum: the first tensor is the same on every rank (its Adasum is itself), the second has each
// rank's value on its own element only (orthogonal: its Adasum is the sum). Dot products over the
// fusion buffer instead of per tensor would mix the two and miss both.
void test_adasum(int p) {
  run_world(p, "adasum", [&](const Comm& comm) {
    HostBackend host(small_segments());
    std::vector<float> same = {1, 2, 3, 4, 5}, own(4, 0), own_out(4, -1);
    own[static_cast<size_t>(comm.rank())] = static_cast<float>(comm.rank() + 1);
    std::vector<BufferEntry> entries = {BufferEntry{same.data(), same.data(), same.size()},
                                        BufferEntry{own.data(), own_out.data(), 4}};
    host.allreduce(comm, entries, DataType::FLOAT32, ReduceOp::ADASUM, 1.0, 1.0, context());
    for (size_t i = 0; i < same.size(); ++i) CHECK(same[i] == static_cast<float>(i + 1), "adasum p=%d same[%zu]", p, i);
    for (size_t i = 0; i < 4; ++i) {
      float want = static_cast<int>(i) < p ? static_cast<float>(i + 1) : 0.0f;
      CHECK(own_out[i] == want, "adasum p=%d own[%zu]: got %g want %g", p, i, own_out[i], want);
    }
  });
}

void test_others(int p, const Hierarchy& hierarchy, const char* what) {
  run_world(p, what, [&](const Comm& comm) {
    HostBackend host(small_segments());
    host.set_hierarchy(hierarchy);
    int me = comm.rank();
    size_t n = static_cast<size_t>(p);
    // allgatherv: rank r sends r*40 + 1 bytes of (r + j) % 251.
    std::vector<size_t> bytes(n);
    size_t total = 0;
    for (size_t r = 0; r < n; ++r) total += bytes[r] = r * 40 + 1;
    std::vector<uint8_t> mine(bytes[static_cast<size_t>(me)]), all(total, 0);
    for (size_t j = 0; j < mine.size(); ++j) mine[j] = static_cast<uint8_t>((static_cast<size_t>(me) + j) % 251);
    host.allgatherv(comm, mine.data(), all.data(), bytes, context());
    size_t off = 0;
    for (size_t r = 0; r < n; ++r) {
      for (size_t j = 0; j < bytes[r]; ++j) {
        CHECK(all[off + j] == static_cast<uint8_t>((r + j) % 251), "%s p=%d allgather block %zu byte %zu", what, p, r,
              j);
      }
      off += bytes[r];
    }
    // broadcast from every root, the root's input out of place.
    for (int root = 0; root < p; ++root) {
      std::vector<int32_t> src(77), buf(77, -1);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<int32_t>(root * 1000 + static_cast<int>(i));
      host.broadcast(comm, src.data(), buf.data(), buf.size() * sizeof(int32_t), root, context());
      for (size_t i = 0; i < buf.size(); ++i) {
        CHECK(buf[i] == src[i], "%s p=%d broadcast root %d i=%zu", what, p, root, i);
      }
    }
    // alltoallv: rank s sends s + d + 1 int32s of value 100*s + d to rank d.
    std::vector<size_t> send_bytes(n), recv_bytes(n);
    std::vector<int32_t> send, recv;
    size_t recv_total = 0;
    for (size_t d = 0; d < n; ++d) {
      size_t k = static_cast<size_t>(me) + d + 1;
      send_bytes[d] = k * sizeof(int32_t);
      send.insert(send.end(), k, static_cast<int32_t>(100 * me + static_cast<int>(d)));
      recv_bytes[d] = (d + static_cast<size_t>(me) + 1) * sizeof(int32_t);
      recv_total += recv_bytes[d] / sizeof(int32_t);
    }
    recv.assign(recv_total, -1);
    host.alltoallv(comm, send.data(), send_bytes, recv.data(), recv_bytes, context());
    off = 0;
    for (size_t s = 0; s < n; ++s) {
      for (size_t j = 0; j < recv_bytes[s] / sizeof(int32_t); ++j) {
        CHECK(recv[off + j] == static_cast<int32_t>(100 * static_cast<int>(s) + me), "%s p=%d alltoall from %zu", what,
              p, s);
      }
      off += recv_bytes[s] / sizeof(int32_t);
    }
    // reducescatter: uneven blocks, prescale 4 and postscale 1/2 (input untouched).
    std::vector<size_t> counts(n);
    size_t elems = 0;
    for (size_t r = 0; r < n; ++r) elems += counts[r] = 3 + 2 * r;
    std::vector<double> input = inputs(me, elems), output(counts[static_cast<size_t>(me)], -1);
    host.reducescatter(comm, input.data(), output.data(), counts, DataType::FLOAT64, ReduceOp::SUM, 4.0, 0.5,
                       context());
    size_t first = 0;
    for (int r = 0; r < me; ++r) first += counts[static_cast<size_t>(r)];
    for (size_t i = 0; i < output.size(); ++i) {
      CHECK(output[i] == 2 * sum_over(p, first + i), "%s p=%d reducescatter i=%zu: got %g", what, p, i, output[i]);
    }
    for (size_t i = 0; i < elems; ++i) CHECK(input[i] == value(me, i), "%s reducescatter wrote its input", what);
    host.barrier(comm, context());
  });
}

// set_knobs from the test thread: the next call uses the two-level allreduce (forced), then flat again.
void test_knobs(int p) {
  run_world(p, "knobs", [&](const Comm& comm) {
    HostBackend host(small_segments());
    host.set_hierarchy(two_hosts(p, 0));
    for (int mode : {1, 0, -1}) {
      host.set_knobs(mode, 128);
      std::vector<double> buf = inputs(comm.rank(), 513);
      host.allreduce(comm, {BufferEntry{buf.data(), buf.data(), buf.size()}}, DataType::FLOAT64, ReduceOp::SUM, 1.0,
                     1.0, context());
      for (size_t i = 0; i < buf.size(); ++i) CHECK(buf[i] == sum_over(p, i), "knobs p=%d mode %d i=%zu", p, mode, i);
    }
  });
}

}  // namespace

int main() {
  for (int p = 1; p <= 4; ++p) {
    test_allreduce(p, Hierarchy{}, "flat");
    test_allreduce(p, two_hosts(p, 1), "two-level");
    test_adasum(p);
    test_others(p, Hierarchy{}, "flat");
    test_others(p, two_hosts(p, 1), "two-level");
    test_knobs(p);
  }
  return finish("host_backend_test");
}
