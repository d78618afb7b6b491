// The executor (engine/executor.h) over MemoryTransport, world sizes 1..3: every kind of unit it runs,
// once on host buffers (HostBackend) and once marked as CUDA (device 0) against a GpuBackend that works
// on host memory and counts its calls, so that the device dispatch is checked without a GPU: CUDA units
// must reach the GpuBackend (barriers and the alltoall splits excepted, which stay on the host), and
// their allgather/alltoall outputs must come from GpuBackend::allocate (Result.device_output).
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/host_backend.h"
#include "engine/executor.h"
#include "tests/collective_harness.h"

using namespace phv;
using namespace phv::testing;

namespace {

// A GpuBackend whose "device" memory is host memory: each call runs on a HostBackend and is counted.
class CountingGpu : public GpuBackend {
 public:
  void allreduce(const Comm& comm, const std::vector<GpuEntry>& entries, DataType dt, ReduceOp op, double prescale,
                 double postscale, intptr_t) override {
    ++calls;
    host_.allreduce(comm, entries, dt, op, prescale, postscale, context());
  }
  void allgatherv(const Comm& comm, const void* send, void* recv, const std::vector<size_t>& bytes, intptr_t) override {
    ++calls;
    host_.allgatherv(comm, send, recv, bytes, context());
  }
  void broadcast(const Comm& comm, void* buf, size_t bytes, int root, intptr_t) override {
    ++calls;
    host_.broadcast(comm, buf, buf, bytes, root, context());
  }
  void alltoallv(const Comm& comm, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes, intptr_t) override {
    ++calls;
    host_.alltoallv(comm, send, send_bytes, recv, recv_bytes, context());
  }
  void reducescatter(const Comm& comm, const void* input, void* output, const std::vector<size_t>& counts, DataType dt,
                     ReduceOp op, double prescale, double postscale, intptr_t) override {
    ++calls;
    host_.reducescatter(comm, input, output, counts, dt, op, prescale, postscale, context());
  }
  std::shared_ptr<void> allocate(size_t bytes) override {
    ++allocations;
    return std::shared_ptr<void>(std::malloc(bytes + 1), std::free);
  }

  int calls = 0, allocations = 0;

 private:
  static CallContext context() {
    CallContext ctx;
    ctx.deadline = soon();
    return ctx;
  }
  HostBackend host_{Tuning{}};
};

// One request of this rank, with its agreed descriptor.
std::unique_ptr<Op> make_op(OpType type, const std::string& name, std::vector<int64_t> shape, int device) {
  auto op = std::make_unique<Op>();
  op->req.type = type;
  op->req.name = name;
  op->req.dtype = DataType::FLOAT64;
  op->req.shape = shape;
  op->req.device = device;
  op->desc.kind = desc_kind(type);
  op->desc.dtype = DataType::FLOAT64;
  op->desc.shape = shape;
  op->desc.name = name;
  op->desc.device = device;
  return op;
}

UnitEntry entry(Op& op, const std::vector<int64_t>* dim0s = nullptr) { return UnitEntry{&op.desc, dim0s, &op}; }

// Values of rank r: element i of tensor t is r + t + i (small, exact in float64).
std::vector<double> values(int r, int t, size_t n) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = r + t + static_cast<double>(i);
  return v;
}

const double* output_of(const Result& res) {
  if (res.device_output) return static_cast<const double*>(res.device_output.get());
  return res.output ? reinterpret_cast<const double*>(res.output->data()) : nullptr;
}

void test_units(int p, int device) {
  const char* w = device < 0 ? "host" : "cuda";
  run_world(p, w, [&](const Comm& comm) {
    Timeline timeline;
    Executor executor(Tuning{}, timeline);
    CountingGpu gpu;
    if (device >= 0) executor.set_gpu(&gpu);
    int me = comm.rank();
    double tri = p * (p - 1) / 2.0;  // sum of the ranks
    Deadline deadline = soon();
    int expected_calls = 0;

    // A fused allreduce of two tensors, AVERAGE with prescale 2: output = 2 * mean.
    std::vector<double> a = values(me, 0, 5), b = values(me, 1, 3), ao(5), bo(3);
    auto ra = make_op(OpType::ALLREDUCE, "a", {5}, device), rb = make_op(OpType::ALLREDUCE, "b", {3}, device);
    for (Op* op : {ra.get(), rb.get()}) {
      op->desc.op = ReduceOp::AVERAGE;
      op->desc.prescale = 2.0;
    }
    ra->req.input = a.data();
    ra->req.output = ao.data();
    rb->req.input = b.data();
    rb->req.output = bo.data();
    executor.run(comm, {entry(*ra), entry(*rb)}, deadline);
    ++expected_calls;
    for (size_t i = 0; i < 5; ++i) CHECK(ao[i] == 2 * (tri / p + static_cast<double>(i)), "%s p=%d a[%zu]", w, p, i);
    for (size_t i = 0; i < 3; ++i) CHECK(bo[i] == 2 * (tri / p + 1.0 + double(i)), "%s p=%d b[%zu]", w, p, i);
    CHECK(ra->result.output_shape == std::vector<int64_t>{5}, "%s allreduce shape", w);

    // allgather: rank r contributes r + 1 rows of 2.
    std::vector<int64_t> dim0s;
    for (int r = 0; r < p; ++r) dim0s.push_back(r + 1);
    std::vector<double> mine(static_cast<size_t>(me + 1) * 2, me);
    auto ag = make_op(OpType::ALLGATHER, "g", {me + 1, 2}, device);
    ag->req.input = mine.data();
    executor.run(comm, {entry(*ag, &dim0s)}, deadline);
    ++expected_calls;
    int64_t rows = p * (p + 1) / 2;
    CHECK(ag->result.output_shape == (std::vector<int64_t>{rows, 2}), "%s allgather shape", w);
    CHECK((ag->result.device_output != nullptr) == (device >= 0), "%s allgather output memory", w);
    const double* g = output_of(ag->result);
    size_t at = 0;
    for (int r = 0; r < p && g != nullptr; ++r) {
      for (int k = 0; k < (r + 1) * 2; ++k, ++at) CHECK(g[at] == r, "%s p=%d allgather row of %d", w, p, r);
    }

    // broadcast from the last rank, in place.
    std::vector<double> bc = values(me, 7, 4);
    auto br = make_op(OpType::BROADCAST, "bc", {4}, device);
    br->desc.root = p - 1;
    br->req.input = bc.data();
    br->req.output = bc.data();
    executor.run(comm, {entry(*br)}, deadline);
    ++expected_calls;
    for (size_t i = 0; i < 4; ++i) CHECK(bc[i] == p - 1 + 7 + static_cast<double>(i), "%s p=%d broadcast", w, p);

    // alltoall: rank s sends d + 1 rows (of one element, value 10 s + d) to rank d.
    std::vector<double> send;
    auto at_op = make_op(OpType::ALLTOALL, "t", {0}, device);
    for (int d = 0; d < p; ++d) {
      at_op->req.splits.push_back(d + 1);
      send.insert(send.end(), static_cast<size_t>(d + 1), 10.0 * me + d);
    }
    at_op->req.shape = {static_cast<int64_t>(send.size())};
    at_op->desc.shape = at_op->req.shape;
    at_op->desc.uneven_splits = p > 1;
    at_op->req.input = send.data();
    std::vector<int64_t> at_dim0s(static_cast<size_t>(p), p * (p + 1) / 2);
    executor.run(comm, {entry(*at_op, &at_dim0s)}, deadline);
    ++expected_calls;
    const Result& tr = at_op->result;
    CHECK(tr.received_splits == std::vector<int64_t>(static_cast<size_t>(p), me + 1), "%s alltoall splits", w);
    CHECK(tr.output_shape == std::vector<int64_t>{static_cast<int64_t>(p) * (me + 1)}, "%s alltoall shape", w);
    const double* t = output_of(tr);
    for (int s = 0; s < p && t != nullptr; ++s) {
      for (int k = 0; k <= me; ++k) CHECK(t[s * (me + 1) + k] == 10.0 * s + me, "%s p=%d alltoall from %d", w, p, s);
    }

    // alltoall with even splits agreed: rank s has p (s + 1) rows (value 10 s + d to rank d), no splits
    // given; what each rank receives follows from the agreed dim 0s, with no exchange of counts.
    std::vector<double> even_send;
    for (int d = 0; d < p; ++d) even_send.insert(even_send.end(), static_cast<size_t>(me + 1), 10.0 * me + d);
    auto even_op = make_op(OpType::ALLTOALL, "te", {static_cast<int64_t>(even_send.size())}, device);
    even_op->req.input = even_send.data();
    std::vector<int64_t> even_dim0s;
    for (int s = 0; s < p; ++s) even_dim0s.push_back(static_cast<int64_t>(p) * (s + 1));
    executor.run(comm, {entry(*even_op, &even_dim0s)}, deadline);
    ++expected_calls;
    const Result& te = even_op->result;
    std::vector<int64_t> want_splits;
    for (int s = 0; s < p; ++s) want_splits.push_back(s + 1);
    CHECK(te.received_splits == want_splits, "%s p=%d even alltoall splits", w, p);
    CHECK(te.output_shape == std::vector<int64_t>{static_cast<int64_t>(p) * (p + 1) / 2}, "%s even alltoall shape", w);
    const double* te_out = output_of(te);
    for (int s = 0, at_row = 0; s < p && te_out != nullptr; ++s) {
      for (int k = 0; k <= s; ++k, ++at_row) {
        CHECK(te_out[at_row] == 10.0 * s + me, "%s p=%d even alltoall from %d", w, p, s);
      }
    }

    // reducescatter of p + 1 rows of 2: rank 0 gets two rows when p > 1; SUM with postscale 1/2.
    size_t n = static_cast<size_t>(p + 1) * 2;
    std::vector<double> rs_in = values(me, 0, n), rs_out(n, -1);
    auto rs = make_op(OpType::REDUCESCATTER, "rs", {p + 1, 2}, device);
    rs->desc.postscale = 0.5;
    rs->req.input = rs_in.data();
    rs->req.output = rs_out.data();
    executor.run(comm, {entry(*rs)}, deadline);
    ++expected_calls;
    int64_t my_rows = (p + 1) / p + (me < (p + 1) % p ? 1 : 0);
    CHECK(rs->result.output_shape == (std::vector<int64_t>{my_rows, 2}), "%s reducescatter shape", w);
    size_t first = me == 0 ? 0 : static_cast<size_t>(2 + (me - 1)) * 2;
    if (p == 1) first = 0;
    for (size_t i = 0; i < static_cast<size_t>(my_rows) * 2; ++i) {
      CHECK(rs_out[i] == 0.5 * (tri + p * static_cast<double>(first + i)), "%s p=%d reducescatter i=%zu: got %g", w, p,
            i, rs_out[i]);
    }

    // A barrier stays on the host transport, whatever the device.
    auto bar = make_op(OpType::BARRIER, "bar", {}, device);
    executor.run(comm, {entry(*bar)}, deadline);
    CHECK(gpu.calls == (device >= 0 ? expected_calls : 0), "%s p=%d gpu calls: %d", w, p, gpu.calls);
    CHECK(gpu.allocations == (device >= 0 ? 3 : 0), "%s p=%d gpu allocations: %d", w, p, gpu.allocations);
  });
}

// A rank that joined contributes the identity for the tensor it lacks (host units only).
void test_joined(int p) {
  run_world(p, "joined", [&](const Comm& comm) {
    Timeline timeline;
    Executor executor(Tuning{}, timeline);
    std::vector<double> x = values(comm.rank(), 0, 4);
    auto op = make_op(OpType::ALLREDUCE, "x", {4}, -1);
    op->desc.op = ReduceOp::MAX;
    op->req.input = x.data();
    op->req.output = x.data();
    bool joined = comm.rank() == 0 && p > 1;
    executor.run(comm, {joined ? UnitEntry{&op->desc, nullptr, nullptr} : entry(*op)}, soon());
    if (!joined) {
      for (size_t i = 0; i < 4; ++i) CHECK(x[i] == p - 1 + static_cast<double>(i), "joined p=%d x[%zu]", p, i);
    }
  });
}

}  // namespace

int main() {
  for (int p = 1; p <= 3; ++p) {
    test_units(p, -1);
    test_units(p, 0);
    test_joined(p);
  }
  return finish("executor_test");
}
