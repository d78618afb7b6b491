#include "engine/executor.h"

#include <cstdint>
#include <string>

#include "algorithms/direct_copy.h"
#include "backends/gpu_collective_backend.h"
#include "common/enforce.h"
#include "common/error.h"
#include "engine/output_pool.h"
#include "transport/cross_memory.h"

namespace phv {

namespace {

void spans(Timeline& timeline, const std::vector<UnitEntry>& unit, const std::string& name, Edge edge) {
  if (!timeline.active()) return;
  Clock::time_point now = Clock::now();
  for (const UnitEntry& e : unit) {
    if (edge == Edge::BEGIN) {
      timeline.begin(e.agreed->key(), name, now);
    } else {
      timeline.end(e.agreed->key(), name, now);
    }
  }
}

// The backend's allreduce phases as the unit's timeline spans.
class UnitPhases : public PhaseObserver {
 public:
  UnitPhases(Timeline& timeline, const std::vector<UnitEntry>& unit) : timeline_(timeline), unit_(unit) {}
  void mark(Phase phase, Edge edge) override {
    static const std::string kCopyIn = "MEMCPY_IN_FUSION_BUFFER", kReduce = "ALLREDUCE",
                             kCopyOut = "MEMCPY_OUT_FUSION_BUFFER";
    spans(timeline_, unit_, phase == Phase::COPY_IN ? kCopyIn : phase == Phase::REDUCE ? kReduce : kCopyOut, edge);
  }

 private:
  Timeline& timeline_;
  const std::vector<UnitEntry>& unit_;
};

// An allgather's or alltoall's engine-allocated output: host memory from the output pool, or device
// memory from the GPU backend; the Result owns it once the collective has filled it. Host memory starts
// where `input` does within its 64-byte line: peers' inputs, placed alike, then copy into it at full speed.
class UnitOutput {
 public:
  UnitOutput(GpuBackend* gpu, size_t bytes, const void* input, DataType dtype)
      : bytes_(bytes), on_device_(gpu != nullptr) {
    if (on_device_) {
      device_ = gpu->allocate(bytes);
      data_ = device_.get();
    } else {
      host_ = take_output_buffer(bytes, copy_phase(reinterpret_cast<uintptr_t>(input), dtype_size(dtype)));
      data_ = host_->data();
    }
  }
  void* data() const { return data_; }
  void hand_to(Result& r, int device) {
    if (on_device_) {
      r.device_output = std::move(device_);
      r.device_output_bytes = bytes_;
      r.device = device;
    } else {
      r.output = std::move(host_);
    }
  }

 private:
  size_t bytes_;
  bool on_device_;
  void* data_ = nullptr;
  OutputBytes host_;
  std::shared_ptr<void> device_;
};

}  // namespace

// AVERAGE is SUM followed by a postscale of 1/size (types.h).
ReduceOp effective_op(ReduceOp op) { return op == ReduceOp::AVERAGE ? ReduceOp::SUM : op; }

double effective_postscale(const Desc& d, int size) {
  return d.op == ReduceOp::AVERAGE ? d.postscale / size : d.postscale;
}

std::vector<int64_t> with_dim0(const std::vector<int64_t>& shape, int64_t dim0) {
  std::vector<int64_t> out = shape;
  if (!out.empty()) out[0] = dim0;
  return out;
}

AlltoallPlan plan_alltoall(CollectiveBackend& host, const Comm& comm, const Request& req, size_t row_bytes,
                           const std::vector<int64_t>* even_dim0s, Deadline deadline) {
  size_t n = static_cast<size_t>(comm.size());
  std::vector<int64_t> send_splits(req.splits.begin(), req.splits.end());
  if (send_splits.empty()) send_splits.assign(n, req.shape[0] / static_cast<int64_t>(n));
  AlltoallPlan plan;
  plan.recv_splits.assign(n, 0);
  if (even_dim0s != nullptr) {
    PHV_ENFORCE(even_dim0s->size() == n, "alltoall: ", even_dim0s->size(), " agreed first dimensions for ", n,
                " ranks");
    for (size_t r = 0; r < n; ++r) plan.recv_splits[r] = (*even_dim0s)[r] / static_cast<int64_t>(n);
  } else {
    std::vector<size_t> eight(n, sizeof(int64_t));
    CallContext ctx;
    ctx.deadline = deadline;
    host.alltoallv(comm, send_splits.data(), eight, plan.recv_splits.data(), eight, ctx);
  }
  plan.send_bytes.resize(n);
  plan.recv_bytes.resize(n);
  for (size_t r = 0; r < n; ++r) {
    if (plan.recv_splits[r] < 0) throw_error(ErrorKind::INTERNAL, "alltoall: peer sent a negative split");
    plan.send_bytes[r] = static_cast<size_t>(send_splits[r]) * row_bytes;
    plan.recv_bytes[r] = static_cast<size_t>(plan.recv_splits[r]) * row_bytes;
    plan.rows += plan.recv_splits[r];
  }
  return plan;
}

void Executor::run(const Comm& comm, const std::vector<UnitEntry>& unit, Deadline deadline) {
  const Desc& d = *unit.front().agreed;
  // Barriers carry no data and stay on the host transport whatever the device.
  if (d.device < 0 || static_cast<OpType>(d.kind) == OpType::BARRIER) {
    dispatch(host_, nullptr, comm, unit, deadline);
    return;
  }
  GpuBackend* gpu = gpu_.load(std::memory_order_acquire);
  // Never null here: enqueue creates the backend (or refuses the request) before submitting.
  PHV_ENFORCE(gpu != nullptr, "a CUDA request reached the executor without a GPU backend");
  for (const UnitEntry& e : unit) {
    // The coordinator refuses CUDA requests while ranks have joined (no device identity fill).
    PHV_ENFORCE(e.op != nullptr, "a CUDA unit is missing a request on this rank");
  }
  GpuCollectiveBackend device(*gpu, host_);
  dispatch(device, gpu, comm, unit, deadline);
}

void Executor::dispatch(CollectiveBackend& backend, GpuBackend* gpu, const Comm& comm,
                        const std::vector<UnitEntry>& unit, Deadline deadline) {
  const Desc& d = *unit.front().agreed;
  UnitPhases phases(timeline_, unit);
  CallContext ctx;
  ctx.deadline = deadline;
  ctx.phases = &phases;
  if (gpu != nullptr) ctx.stream = static_cast<intptr_t>(unit.front().op->req.stream);
  OpType kind = static_cast<OpType>(d.kind);
  if (kind == OpType::ALLREDUCE) {
    // Host allreduces the negotiation's mode may send through single copies are timed in the mode they ran.
    size_t bytes = 0;
    for (const UnitEntry& e : unit) bytes += static_cast<size_t>(e.agreed->count()) * dtype_size(d.dtype);
    const bool timed = gpu == nullptr && d.op != ReduceOp::ADASUM && direct_allreduce_eligible(comm, bytes);
    const Clock::time_point start = timed ? Clock::now() : Clock::time_point{};
    allreduce(backend, comm, unit, ctx);  // its spans come from the backend's phases
    if (timed) {
      allreduce_path_.record(comm.transport->single_copy_allreduce(), bytes,
                             std::chrono::duration<double>(Clock::now() - start).count());
    }
    return;
  }
  std::string op_span = span_name("", d.kind);
  spans(timeline_, unit, op_span, Edge::BEGIN);
  const UnitEntry& e = unit.front();
  const Transport& t = *comm.transport;
  const bool timed = gpu == nullptr && comm.size() > 1 && t.direct_bytes_in(true) < t.direct_bytes_in(false);
  const Clock::time_point start = timed ? Clock::now() : Clock::time_point{};
  size_t piece = 0;  // allgather, alltoall, reducescatter: the mean bytes a rank sends each other one
  switch (kind) {
    case OpType::ALLGATHER: piece = allgather(backend, gpu, comm, e, ctx); break;
    case OpType::BROADCAST:
      backend.broadcast(comm, e.op->req.input, e.op->req.output, d.bytes(), d.root, ctx);
      e.op->result.output_shape = d.shape;
      break;
    case OpType::ALLTOALL: piece = alltoall(backend, gpu, comm, e, ctx); break;
    case OpType::REDUCESCATTER: piece = reducescatter(backend, comm, e, ctx); break;
    case OpType::BARRIER: backend.barrier(comm, ctx); break;
    default: PHV_ENFORCE_FAIL("engine cannot run a ", kind_name(d.kind), " request");
  }
  if (timed && piece >= t.direct_bytes_in(true) && piece < t.direct_bytes_in(false)) {
    copy_path_.record(t.wide_direct(), piece, std::chrono::duration<double>(Clock::now() - start).count());
  }
  spans(timeline_, unit, op_span, Edge::END);
}

void Executor::allreduce(CollectiveBackend& backend, const Comm& comm, const std::vector<UnitEntry>& unit,
                         const CallContext& ctx) {
  const Desc& d = *unit.front().agreed;
  entries_.clear();
  for (const UnitEntry& e : unit) {
    size_t count = static_cast<size_t>(e.agreed->count());
    if (e.op != nullptr) {
      const Request& req = e.op->req;
      entries_.push_back(BufferEntry{req.input, req.output, count, static_cast<intptr_t>(req.stream)});
    } else {
      entries_.push_back(BufferEntry{nullptr, nullptr, count});
    }
  }
  backend.allreduce(comm, entries_, d.dtype, effective_op(d.op), d.prescale, effective_postscale(d, comm.size()), ctx);
  for (const UnitEntry& e : unit) {
    if (e.op != nullptr) e.op->result.output_shape = e.agreed->shape;
  }
}

size_t Executor::allgather(CollectiveBackend& backend, GpuBackend* gpu, const Comm& comm, const UnitEntry& e,
                           const CallContext& ctx) {
  const Desc& d = *e.agreed;
  size_t row_bytes = static_cast<size_t>(d.row_elements()) * dtype_size(d.dtype);
  std::vector<size_t> bytes(static_cast<size_t>(comm.size()));
  int64_t rows = 0;
  for (int r = 0; r < comm.size(); ++r) {
    int64_t dim0 = (*e.dim0s)[static_cast<size_t>(r)];
    bytes[static_cast<size_t>(r)] = static_cast<size_t>(dim0) * row_bytes;
    rows += dim0;
  }
  UnitOutput out(gpu, static_cast<size_t>(rows) * row_bytes, e.op->req.input, d.dtype);
  backend.allgatherv(comm, e.op->req.input, out.data(), bytes, ctx);
  out.hand_to(e.op->result, d.device);
  e.op->result.output_shape = with_dim0(d.shape, rows);
  return static_cast<size_t>(rows) * row_bytes / static_cast<size_t>(comm.size());
}

size_t Executor::alltoall(CollectiveBackend& backend, GpuBackend* gpu, const Comm& comm, const UnitEntry& e,
                          const CallContext& ctx) {
  const Request& req = e.op->req;
  int64_t row_elems = 1;
  for (size_t i = 1; i < req.shape.size(); ++i) row_elems *= req.shape[i];
  size_t row_bytes = static_cast<size_t>(row_elems) * dtype_size(req.dtype);
  const bool even = !e.agreed->uneven_splits && e.dim0s != nullptr && !e.dim0s->empty();
  const std::vector<int64_t>* even_dim0s = even ? e.dim0s : nullptr;
  AlltoallPlan plan = plan_alltoall(host_, comm, req, row_bytes, even_dim0s, ctx.deadline);
  UnitOutput out(gpu, static_cast<size_t>(plan.rows) * row_bytes, req.input, req.dtype);
  backend.alltoallv(comm, req.input, plan.send_bytes, out.data(), plan.recv_bytes, ctx);
  Result& res = e.op->result;
  out.hand_to(res, e.agreed->device);
  res.output_shape = with_dim0(req.shape, plan.rows);
  res.received_splits = std::move(plan.recv_splits);
  size_t sent = 0;
  for (size_t b : plan.send_bytes) sent += b;
  return sent / static_cast<size_t>(comm.size());
}

size_t Executor::reducescatter(CollectiveBackend& backend, const Comm& comm, const UnitEntry& e,
                               const CallContext& ctx) {
  const Desc& d = *e.agreed;
  int n = comm.size();
  int64_t dim0 = d.shape[0];
  std::vector<size_t> counts(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    counts[static_cast<size_t>(r)] = static_cast<size_t>(reducescatter_rows(dim0, n, r) * d.row_elements());
  }
  if (d.count() > 0) {
    backend.reducescatter(comm, e.op->req.input, e.op->req.output, counts, d.dtype, effective_op(d.op), d.prescale,
                          effective_postscale(d, n), ctx);
  }
  e.op->result.output_shape = with_dim0(d.shape, reducescatter_rows(dim0, n, comm.rank()));
  return d.bytes() / static_cast<size_t>(n);
}

}  // namespace phv
