#include "engine/executor.h"

#include <cstring>

#include "algorithms/algorithms.h"
#include "common/error.h"
#include "common/reduce.h"
#include "engine/fusion.h"
#include "engine/output_pool.h"

namespace phv {

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

AlltoallPlan plan_alltoall(const Comm& comm, const Request& req, size_t row_bytes, Deadline deadline) {
  size_t n = static_cast<size_t>(comm.size());
  std::vector<int64_t> send_splits(req.splits.begin(), req.splits.end());
  if (send_splits.empty()) send_splits.assign(n, req.shape[0] / static_cast<int64_t>(n));
  AlltoallPlan plan;
  plan.recv_splits.assign(n, 0);
  std::vector<size_t> eight(n, sizeof(int64_t));
  phv::alltoallv(comm, send_splits.data(), eight, plan.recv_splits.data(), eight, deadline);
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

uint8_t* Executor::scratch(size_t bytes) {
  if (fusion_.size() < bytes) fusion_.resize(bytes);
  return fusion_.data();
}

void Executor::spans(const std::vector<UnitEntry>& unit, const std::string& name, bool begin) {
  if (!timeline_.active()) return;
  Clock::time_point now = Clock::now();
  for (const UnitEntry& e : unit) {
    if (begin) {
      timeline_.begin(e.agreed->key(), name, now);
    } else {
      timeline_.end(e.agreed->key(), name, now);
    }
  }
}

void Executor::set_knobs(int allreduce_mode, int64_t segment_bytes) {
  std::lock_guard<std::mutex> lock(knobs_mu_);
  if (allreduce_mode >= -1) pending_mode_ = allreduce_mode;
  if (segment_bytes >= 0) pending_segment_ = segment_bytes;
  knobs_pending_.store(true, std::memory_order_release);
}

void Executor::apply_knobs() {
  if (!knobs_pending_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(knobs_mu_);
  if (pending_mode_ >= -1) hierarchy_.allreduce_mode = pending_mode_;
  if (pending_segment_ >= 0) tuning_.segment_bytes = static_cast<size_t>(pending_segment_);
  pending_mode_ = -2;
  pending_segment_ = -1;
  knobs_pending_.store(false, std::memory_order_relaxed);
}

const TwoLevel* Executor::two_level(const Comm& comm) {
  if (hierarchy_.host_of.empty() || static_cast<size_t>(comm.size()) != hierarchy_.host_of.size()) return nullptr;
  if (two_level_state_ == 0) two_level_state_ = make_two_level(comm, hierarchy_.host_of, &two_level_) ? 1 : -1;
  return two_level_state_ == 1 ? &two_level_ : nullptr;
}

void Executor::reduce(const Comm& comm, void* buf, size_t count, DataType dt, ReduceOp op, Deadline deadline,
                      double post) {
  const TwoLevel* tl = op == ReduceOp::ADASUM ? nullptr : two_level(comm);
  if (tl != nullptr && prefer_two_level(hierarchy_.allreduce_mode, hierarchy_.model, *tl, count * dtype_size(dt),
                                        OpType::ALLREDUCE, tuning_)) {
    hierarchical_allreduce(*tl, buf, count, dt, op, tuning_, deadline, post);
  } else {
    phv::allreduce(comm, buf, count, dt, op, tuning_, deadline, post);
  }
}

void Executor::run(const Comm& comm, const std::vector<UnitEntry>& unit, Deadline deadline) {
  apply_knobs();
  const Desc& d = *unit.front().agreed;
  if (d.device >= 0 && static_cast<OpType>(d.kind) != OpType::BARRIER) {
    GpuBackend* gpu = gpu_.load(std::memory_order_acquire);
    // Never null here: enqueue creates the backend (or refuses the request) before submitting.
    if (gpu == nullptr) throw_error(ErrorKind::INTERNAL, "a CUDA request reached the executor without a GPU backend");
    run_gpu(*gpu, comm, unit, deadline);
    return;
  }
  std::string op_span = span_name("", d.kind);
  switch (static_cast<OpType>(d.kind)) {
    case OpType::ALLREDUCE:
      allreduce(comm, unit, deadline);
      return;
    case OpType::ALLGATHER:
      spans(unit, op_span, true);
      allgather(comm, unit.front(), deadline);
      break;
    case OpType::BROADCAST:
      spans(unit, op_span, true);
      broadcast(comm, unit.front(), deadline);
      break;
    case OpType::ALLTOALL:
      spans(unit, op_span, true);
      alltoall(comm, unit.front(), deadline);
      break;
    case OpType::REDUCESCATTER:
      spans(unit, op_span, true);
      reducescatter(comm, unit.front(), deadline);
      break;
    case OpType::BARRIER:
      spans(unit, op_span, true);
      phv::barrier(comm, deadline);
      break;
    default:
      throw_error(ErrorKind::INTERNAL, "engine cannot run a ", kind_name(d.kind), " request");
  }
  spans(unit, op_span, false);
}

void Executor::allreduce(const Comm& comm, const std::vector<UnitEntry>& unit, Deadline deadline) {
  const Desc& d = *unit.front().agreed;
  DataType dt = d.dtype;
  size_t esize = dtype_size(dt);
  ReduceOp op = effective_op(d.op);
  double post = effective_postscale(d, comm.size());

  if (unit.size() == 1) {
    // A lone tensor is reduced in its output buffer: at most one copy (input -> output).
    const UnitEntry& e = unit.front();
    size_t count = static_cast<size_t>(d.count());
    uint8_t* buf;
    if (e.op != nullptr) {
      buf = static_cast<uint8_t*>(e.op->req.output);
      if (e.op->req.input != e.op->req.output && count > 0) std::memcpy(buf, e.op->req.input, count * esize);
      if (d.prescale != 1.0) scale_buffer(buf, count, dt, d.prescale);
    } else {
      buf = scratch(count * esize);
      fill_identity(buf, count, dt, op);
    }
    spans(unit, "ALLREDUCE", true);
    if (count > 0) reduce(comm, buf, count, dt, op, deadline, post);
    spans(unit, "ALLREDUCE", false);
    if (e.op != nullptr) e.op->result.output_shape = d.shape;
    return;
  }

  sizes_.clear();
  size_t total = 0;
  for (const UnitEntry& e : unit) {
    sizes_.push_back(e.agreed->bytes());
    total += sizes_.back();
  }
  uint8_t* buf = scratch(total);
  spans(unit, "MEMCPY_IN_FUSION_BUFFER", true);
  size_t off = 0;
  for (size_t i = 0; i < unit.size(); ++i) {
    const UnitEntry& e = unit[i];
    size_t count = sizes_[i] / esize;
    if (e.op != nullptr) {
      if (sizes_[i] > 0) std::memcpy(buf + off, e.op->req.input, sizes_[i]);
      if (d.prescale != 1.0) scale_buffer(buf + off, count, dt, d.prescale);
    } else {
      fill_identity(buf + off, count, dt, op);
    }
    off += sizes_[i];
  }
  spans(unit, "MEMCPY_IN_FUSION_BUFFER", false);
  spans(unit, "ALLREDUCE", true);
  if (total > 0 && op == ReduceOp::ADASUM) {
    counts_.clear();  // Adasum's dot products are per tensor: it needs the requests' boundaries
    for (size_t bytes : sizes_) counts_.push_back(bytes / esize);
    phv::adasum_allreduce(comm, buf, counts_, dt, deadline, post);
  } else if (total > 0) {
    reduce(comm, buf, total / esize, dt, op, deadline, post);
  }
  spans(unit, "ALLREDUCE", false);
  spans(unit, "MEMCPY_OUT_FUSION_BUFFER", true);
  off = 0;
  for (size_t i = 0; i < unit.size(); ++i) {
    const UnitEntry& e = unit[i];
    if (e.op != nullptr) {
      if (sizes_[i] > 0) std::memcpy(e.op->req.output, buf + off, sizes_[i]);
      e.op->result.output_shape = e.agreed->shape;
    }
    off += sizes_[i];
  }
  spans(unit, "MEMCPY_OUT_FUSION_BUFFER", false);
}

void Executor::allgather(const Comm& comm, const UnitEntry& e, Deadline deadline) {
  const Desc& d = *e.agreed;
  size_t row_bytes = static_cast<size_t>(d.row_elements()) * dtype_size(d.dtype);
  std::vector<size_t> bytes(static_cast<size_t>(comm.size()));
  int64_t rows = 0;
  for (int r = 0; r < comm.size(); ++r) {
    int64_t dim0 = (*e.dim0s)[static_cast<size_t>(r)];
    bytes[static_cast<size_t>(r)] = static_cast<size_t>(dim0) * row_bytes;
    rows += dim0;
  }
  OutputBytes out = take_output_buffer(static_cast<size_t>(rows) * row_bytes);
  const TwoLevel* tl = two_level(comm);
  if (tl != nullptr && prefer_two_level(hierarchy_.allgather_mode, hierarchy_.model, *tl,
                                        static_cast<size_t>(rows) * row_bytes, OpType::ALLGATHER, tuning_)) {
    hierarchical_allgatherv(comm, *tl, hierarchy_.host_of, e.op->req.input, out->data(), bytes, tuning_, deadline);
  } else {
    phv::allgatherv(comm, e.op->req.input, out->data(), bytes, tuning_, deadline);
  }
  e.op->result.output = std::move(out);
  e.op->result.output_shape = with_dim0(d.shape, rows);
}

void Executor::broadcast(const Comm& comm, const UnitEntry& e, Deadline deadline) {
  const Desc& d = *e.agreed;
  size_t bytes = d.bytes();
  void* buf = e.op->req.output;
  if (comm.rank() == d.root && e.op->req.input != buf && bytes > 0) std::memcpy(buf, e.op->req.input, bytes);
  if (bytes > 0) phv::broadcast(comm, buf, bytes, d.root, tuning_, deadline);
  e.op->result.output_shape = d.shape;
}

void Executor::alltoall(const Comm& comm, const UnitEntry& e, Deadline deadline) {
  const Request& req = e.op->req;
  int64_t row_elems = 1;
  for (size_t i = 1; i < req.shape.size(); ++i) row_elems *= req.shape[i];
  size_t row_bytes = static_cast<size_t>(row_elems) * dtype_size(req.dtype);
  AlltoallPlan plan = plan_alltoall(comm, req, row_bytes, deadline);
  OutputBytes out = take_output_buffer(static_cast<size_t>(plan.rows) * row_bytes);
  phv::alltoallv(comm, req.input, plan.send_bytes, out->data(), plan.recv_bytes, deadline);
  e.op->result.output = std::move(out);
  e.op->result.output_shape = with_dim0(req.shape, plan.rows);
  e.op->result.received_splits = std::move(plan.recv_splits);
}

void Executor::reducescatter(const Comm& comm, const UnitEntry& e, Deadline deadline) {
  const Desc& d = *e.agreed;
  size_t n = static_cast<size_t>(comm.size());
  int64_t dim0 = d.shape[0];
  int64_t row_elems = d.row_elements();
  // Horovod's split: every rank gets dim0 / n rows, the first dim0 % n ranks one more.
  std::vector<size_t> counts(n);
  for (size_t r = 0; r < n; ++r) {
    int64_t rows = dim0 / static_cast<int64_t>(n) + (static_cast<int64_t>(r) < dim0 % static_cast<int64_t>(n) ? 1 : 0);
    counts[r] = static_cast<size_t>(rows * row_elems);
  }
  const void* input = e.op->req.input;
  size_t total = static_cast<size_t>(d.count());
  if (d.prescale != 1.0) {
    uint8_t* buf = scratch(total * dtype_size(d.dtype));
    std::memcpy(buf, input, total * dtype_size(d.dtype));
    scale_buffer(buf, total, d.dtype, d.prescale);
    input = buf;
  }
  int64_t my_rows = dim0 / static_cast<int64_t>(n) + (comm.rank() < dim0 % static_cast<int64_t>(n) ? 1 : 0);
  size_t mine = counts[static_cast<size_t>(comm.rank())];
  if (total > 0) {
    phv::reducescatter(comm, input, e.op->req.output, counts, d.dtype, effective_op(d.op), tuning_, deadline);
  }
  double post = effective_postscale(d, comm.size());
  if (post != 1.0) scale_buffer(e.op->req.output, mine, d.dtype, post);
  e.op->result.output_shape = with_dim0(d.shape, my_rows);
}

}  // namespace phv
