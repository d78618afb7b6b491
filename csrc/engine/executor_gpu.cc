// Executor's CUDA path: one agreed unit of CUDA requests on this rank's GpuBackend (executor.h has the
// copy accounting). Barriers carry no data and stay on the host transport.
#include <string>

#include "algorithms/algorithms.h"
#include "common/error.h"
#include "engine/executor.h"

namespace phv {

namespace {

// Hands engine-allocated device memory to the request's Result.
void set_device_output(Result& r, std::shared_ptr<void> buf, size_t bytes, int device) {
  r.device_output = std::move(buf);
  r.device_output_bytes = bytes;
  r.device = device;
}

}  // namespace

void Executor::run_gpu(GpuBackend& gpu, const Comm& comm, const std::vector<UnitEntry>& unit, Deadline deadline) {
  const Desc& d = *unit.front().agreed;
  for (const UnitEntry& e : unit) {
    // The coordinator refuses CUDA requests while ranks have joined (no device identity fill).
    if (e.op == nullptr) throw_error(ErrorKind::INTERNAL, "a CUDA unit is missing a request on this rank");
  }
  Request& req = unit.front().op->req;
  intptr_t stream = static_cast<intptr_t>(req.stream);
  size_t esize = dtype_size(d.dtype);
  std::string op_span = span_name("", d.kind);
  spans(unit, op_span, true);
  switch (static_cast<OpType>(d.kind)) {
    case OpType::ALLREDUCE: {
      std::vector<GpuEntry> entries;
      entries.reserve(unit.size());
      for (const UnitEntry& e : unit) {
        entries.push_back(GpuEntry{e.op->req.input, e.op->req.output, static_cast<size_t>(e.agreed->count()),
                                   static_cast<intptr_t>(e.op->req.stream)});
        e.op->result.output_shape = e.agreed->shape;
      }
      gpu.allreduce(comm, entries, d.dtype, effective_op(d.op), d.prescale, effective_postscale(d, comm.size()), stream);
      break;
    }
    case OpType::ALLGATHER: {
      size_t row_bytes = static_cast<size_t>(d.row_elements()) * esize;
      std::vector<size_t> bytes(static_cast<size_t>(comm.size()));
      int64_t rows = 0;
      for (int r = 0; r < comm.size(); ++r) {
        int64_t dim0 = (*unit.front().dim0s)[static_cast<size_t>(r)];
        bytes[static_cast<size_t>(r)] = static_cast<size_t>(dim0) * row_bytes;
        rows += dim0;
      }
      size_t total = static_cast<size_t>(rows) * row_bytes;
      std::shared_ptr<void> out = gpu.allocate(total);
      gpu.allgatherv(comm, req.input, out.get(), bytes, stream);
      set_device_output(unit.front().op->result, std::move(out), total, d.device);
      unit.front().op->result.output_shape = with_dim0(d.shape, rows);
      break;
    }
    case OpType::BROADCAST:  // in place (enqueue checks input == output)
      gpu.broadcast(comm, req.output, d.bytes(), d.root, stream);
      unit.front().op->result.output_shape = d.shape;
      break;
    case OpType::ALLTOALL: {
      size_t row_bytes = static_cast<size_t>(d.row_elements()) * esize;
      AlltoallPlan plan = plan_alltoall(comm, req, row_bytes, deadline);
      size_t total = static_cast<size_t>(plan.rows) * row_bytes;
      std::shared_ptr<void> out = gpu.allocate(total);
      gpu.alltoallv(comm, req.input, plan.send_bytes, out.get(), plan.recv_bytes, stream);
      Result& res = unit.front().op->result;
      set_device_output(res, std::move(out), total, d.device);
      res.output_shape = with_dim0(req.shape, plan.rows);
      res.received_splits = std::move(plan.recv_splits);
      break;
    }
    case OpType::REDUCESCATTER: {
      size_t n = static_cast<size_t>(comm.size());
      int64_t dim0 = d.shape[0];
      std::vector<size_t> counts(n);
      for (size_t r = 0; r < n; ++r) {
        int64_t ni = static_cast<int64_t>(n);
        int64_t rows = dim0 / ni + (static_cast<int64_t>(r) < dim0 % ni ? 1 : 0);
        counts[r] = static_cast<size_t>(rows * d.row_elements());
      }
      int64_t my_rows = dim0 / static_cast<int64_t>(n) + (comm.rank() < dim0 % static_cast<int64_t>(n) ? 1 : 0);
      if (d.count() > 0) {
        gpu.reducescatter(comm, req.input, req.output, counts, d.dtype, effective_op(d.op), d.prescale,
                          effective_postscale(d, comm.size()), stream);
      }
      unit.front().op->result.output_shape = with_dim0(d.shape, my_rows);
      break;
    }
    default:
      throw_error(ErrorKind::INTERNAL, "the GPU backend cannot run a ", kind_name(d.kind), " request");
  }
  spans(unit, op_span, false);
}

}  // namespace phv
