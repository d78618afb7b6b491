// _core.Communicator: collectives on the calling thread over a TcpBackend, no engine (the raw core,
// for algorithm tests and benchmarks). Arguments are checked here, before any communication; the GIL
// is released around every call that talks to other ranks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <numeric>

#include "algorithms/algorithms.h"
#include "backends/backend.h"
#include "bindings/bind_buffer.h"
#include "bindings/bind_interrupt.h"
#include "common/error.h"
#include "common/reduce.h"

namespace py = pybind11;

namespace phv {
namespace {

DataType check_dtype(int code) {
  PHV_CHECK_ARG(code >= 0 && code <= static_cast<int>(DataType::BOOL), "unknown dtype code ", code);
  return static_cast<DataType>(code);
}

ReduceOp check_op(int code) {
  PHV_CHECK_ARG(code >= 0 && code <= static_cast<int>(ReduceOp::ADASUM), "unknown reduce op code ", code);
  return static_cast<ReduceOp>(code);
}

Deadline check_timeout(double timeout_s) {
  PHV_CHECK_ARG(timeout_s > 0, "timeout_s must be > 0, got ", timeout_s);
  return deadline_after(timeout_s);
}

size_t sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

class Communicator {
 public:
  explicit Communicator(const ConnectOptions& options) : backend_(std::make_unique<TcpBackend>(options)) {
    rank_ = options.rank;
    size_ = options.size;
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The agreed single-copy threshold (Transport::direct_bytes; 0: off, e.g. when the probe was refused).
  size_t direct_bytes() const { return backend_ ? backend_->transport().direct_bytes() : 0; }
  size_t broadcast_direct_bytes() const { return backend_ ? backend_->transport().broadcast_direct_bytes() : 0; }

  void allreduce(py::object buf, int dtype, int op, double timeout_s, const std::string& algorithm) {
    DataType dt = check_dtype(dtype);
    ReduceOp rop = check_op(op);
    PHV_CHECK_ARG(algorithm == "auto" || algorithm == "ring" || algorithm == "small",
                  "algorithm must be 'auto', 'ring' or 'small', got '", algorithm, "'");
    Deadline deadline = check_timeout(timeout_s);
    BufferView b(buf.ptr(), BufferAccess::WRITE, "buf");
    size_t es = dtype_size(dt);
    PHV_CHECK_ARG(b.bytes() % es == 0, "buf has ", b.bytes(), " bytes, not a multiple of the ", dtype_name(dt),
                  " element size ", es);
    size_t count = b.bytes() / es;
    // AVERAGE is SUM with a postscale of 1/size, as the engine does it.
    ReduceOp kernel_op = rop == ReduceOp::AVERAGE ? ReduceOp::SUM : rop;
    double post = rop == ReduceOp::AVERAGE ? 1.0 / size_ : 1.0;
    run([&](TcpBackend& be) {
      if (algorithm == "ring") {
        ring_allreduce(be.world(), b.data(), count, dt, kernel_op, be.tuning(), deadline, post);
      } else if (algorithm == "small") {
        small_allreduce(be.world(), b.data(), count, dt, kernel_op, deadline);
        if (post != 1.0) scale_buffer(b.data(), count, dt, post);
      } else {
        phv::allreduce(be.world(), b.data(), count, dt, kernel_op, be.tuning(), deadline, post);
      }
    });
  }

  void allgatherv(py::object send, py::object recv, const std::vector<size_t>& bytes_per_rank, double timeout_s) {
    Deadline deadline = check_timeout(timeout_s);
    PHV_CHECK_ARG(bytes_per_rank.size() == static_cast<size_t>(size_), "bytes_per_rank has ", bytes_per_rank.size(),
                  " entries, expected one per rank (", size_, ")");
    BufferView s(send.ptr(), BufferAccess::READ, "send");
    BufferView r(recv.ptr(), BufferAccess::WRITE, "recv");
    PHV_CHECK_ARG(s.bytes() == bytes_per_rank[rank_], "send has ", s.bytes(), " bytes but bytes_per_rank[", rank_,
                  "] is ", bytes_per_rank[rank_]);
    PHV_CHECK_ARG(r.bytes() == sum(bytes_per_rank), "recv has ", r.bytes(), " bytes but bytes_per_rank sums to ",
                  sum(bytes_per_rank));
    run([&](TcpBackend& be) {
      phv::allgatherv(be.world(), s.data(), r.data(), bytes_per_rank, be.tuning(), deadline);
    });
  }

  void broadcast(py::object buf, int root, double timeout_s) {
    Deadline deadline = check_timeout(timeout_s);
    PHV_CHECK_ARG(root >= 0 && root < size_, "root ", root, " is not in [0, ", size_, ")");
    BufferView b(buf.ptr(), BufferAccess::WRITE, "buf");
    run([&](TcpBackend& be) { phv::broadcast(be.world(), b.data(), b.bytes(), root, be.tuning(), deadline); });
  }

  void alltoallv(py::object send, const std::vector<size_t>& send_bytes, py::object recv,
                 const std::vector<size_t>& recv_bytes, double timeout_s) {
    Deadline deadline = check_timeout(timeout_s);
    PHV_CHECK_ARG(send_bytes.size() == static_cast<size_t>(size_) && recv_bytes.size() == static_cast<size_t>(size_),
                  "send_bytes and recv_bytes need one entry per rank (", size_, "), got ", send_bytes.size(), " and ",
                  recv_bytes.size());
    BufferView s(send.ptr(), BufferAccess::READ, "send");
    BufferView r(recv.ptr(), BufferAccess::WRITE, "recv");
    PHV_CHECK_ARG(s.bytes() == sum(send_bytes), "send has ", s.bytes(), " bytes but send_bytes sums to ",
                  sum(send_bytes));
    PHV_CHECK_ARG(r.bytes() == sum(recv_bytes), "recv has ", r.bytes(), " bytes but recv_bytes sums to ",
                  sum(recv_bytes));
    run([&](TcpBackend& be) { phv::alltoallv(be.world(), s.data(), send_bytes, r.data(), recv_bytes, deadline); });
  }

  void reducescatter(py::object input, py::object output, const std::vector<size_t>& counts, int dtype, int op,
                     double timeout_s) {
    DataType dt = check_dtype(dtype);
    ReduceOp rop = check_op(op);
    Deadline deadline = check_timeout(timeout_s);
    PHV_CHECK_ARG(counts.size() == static_cast<size_t>(size_), "counts has ", counts.size(),
                  " entries, expected one per rank (", size_, ")");
    BufferView in(input.ptr(), BufferAccess::READ, "input");
    BufferView out(output.ptr(), BufferAccess::WRITE, "output");
    size_t es = dtype_size(dt);
    PHV_CHECK_ARG(in.bytes() == sum(counts) * es, "input has ", in.bytes(), " bytes but counts sum to ", sum(counts),
                  " elements of ", es, " bytes");
    PHV_CHECK_ARG(out.bytes() == counts[rank_] * es, "output has ", out.bytes(), " bytes but counts[", rank_, "] is ",
                  counts[rank_], " elements of ", es, " bytes");
    ReduceOp kernel_op = rop == ReduceOp::AVERAGE ? ReduceOp::SUM : rop;
    run([&](TcpBackend& be) {
      phv::reducescatter(be.world(), in.data(), out.data(), counts, dt, kernel_op, be.tuning(), deadline);
      if (rop == ReduceOp::AVERAGE) scale_buffer(out.data(), counts[rank_], dt, 1.0 / size_);
    });
  }

  void barrier(double timeout_s) {
    Deadline deadline = check_timeout(timeout_s);
    run([&](TcpBackend& be) { phv::barrier(be.world(), deadline); });
  }

  void close() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    backend_.reset();
  }

 private:
  // Runs fn on the backend without the GIL, one call at a time, running signal handlers while it waits
  // (bind_interrupt.h; a raising handler breaks the communicator's connections).
  template <typename F>
  void run(F&& fn) {
    call_interruptible([&] {
      std::lock_guard<std::mutex> lock(mu_);
      if (!backend_) throw_error(ErrorKind::SHUTDOWN, "rank ", rank_, ": the communicator has been closed");
      fn(*backend_);
    });
  }

  std::mutex mu_;
  std::unique_ptr<TcpBackend> backend_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

void register_communicator(py::module_& m) {
  py::class_<Communicator>(m, "Communicator",
                           "Collectives on the calling thread, no engine: the raw core. Buffers are C-contiguous "
                           "buffer-protocol objects (numpy arrays); dtype is a DataType code.")
      .def(py::init([](const ConnectOptions& options) {
             return call_interruptible([&] { return std::make_unique<Communicator>(options); });
           }),
           py::arg("options"))
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def_property_readonly("direct_bytes", &Communicator::direct_bytes)
      .def_property_readonly("broadcast_direct_bytes", &Communicator::broadcast_direct_bytes)
      .def("allreduce", &Communicator::allreduce, py::arg("buf"), py::arg("dtype"), py::arg("op"), py::arg("timeout_s"),
           py::arg("algorithm") = "auto")
      .def("allgatherv", &Communicator::allgatherv, py::arg("send"), py::arg("recv"), py::arg("bytes_per_rank"),
           py::arg("timeout_s"))
      .def("broadcast", &Communicator::broadcast, py::arg("buf"), py::arg("root"), py::arg("timeout_s"))
      .def("alltoallv", &Communicator::alltoallv, py::arg("send"), py::arg("send_bytes"), py::arg("recv"),
           py::arg("recv_bytes"), py::arg("timeout_s"))
      .def("reducescatter", &Communicator::reducescatter, py::arg("input"), py::arg("output"), py::arg("counts"),
           py::arg("dtype"), py::arg("op"), py::arg("timeout_s"))
      .def("barrier", &Communicator::barrier, py::arg("timeout_s"))
      .def("close", &Communicator::close);
}

}  // namespace phv
