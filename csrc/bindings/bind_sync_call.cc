// _core.SyncCall: a prepared synchronous request (contract: pyhorovod/_core.pyi). The Python layer of a
// blocking allreduce checks its arguments once, for the first call with a given (name, op, scales); the
// calls after it hand over only the array. What stays per call is what can change between calls without
// the arguments changing: the array itself. So the call compares the array with the one the request was
// prepared for (same dtype object, same shape, C-contiguous, writable when written in place) and, when
// it differs, returns None without doing anything: the caller then takes its full path, which checks
// everything again (and raises the usual ValueError for a bad array). The engine negotiates every call as
// before (a changed shape on another rank is still a mismatch error), and validates the request.
//
// Why not Engine.run_sync: its twelve converted arguments (a str, a list, ints, floats) and the output
// allocated in Python cost as much as the engine's own work (benchmarks/RESULTS.md, "The express round").
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <vector>

#include "bindings/bind_interrupt.h"
#include "engine/engine.h"

namespace py = pybind11;

namespace phv {

namespace {

class SyncCall {
 public:
  SyncCall(Engine& engine, int op_type, std::string name, int dtype, const py::array& example, int reduce_op,
           double prescale, double postscale, int root, int process_set, double timeout_s, bool inplace)
      : engine_(engine), timeout_s_(timeout_s), inplace_(inplace) {
    PHV_CHECK_ARG(op_type == static_cast<int>(OpType::ALLREDUCE) || op_type == static_cast<int>(OpType::BROADCAST),
                  "SyncCall: op_type must be ALLREDUCE or BROADCAST (an op whose output is its input's shape), got ",
                  op_type);
    request_.type = static_cast<OpType>(op_type);
    request_.name = std::move(name);
    request_.dtype = static_cast<DataType>(dtype);
    request_.reduce_op = static_cast<ReduceOp>(reduce_op);
    request_.prescale = prescale;
    request_.postscale = postscale;
    request_.root = root;
    request_.process_set = process_set;
    descr_ = py::reinterpret_borrow<py::object>(py::detail::array_proxy(example.ptr())->descr);
    for (py::ssize_t i = 0; i < example.ndim(); ++i) {
      dims_.push_back(example.shape(i));
      request_.shape.push_back(example.shape(i));
    }
  }

  // The output array (the input itself in place), or None when `input` is not the array prepared for.
  py::object call(py::handle input) {
    if (!fits(input)) return py::none();
    py::object out = inplace_ ? py::reinterpret_borrow<py::object>(input)
                              : py::array(py::reinterpret_borrow<py::dtype>(descr_), dims_);
    Request r = request_;
    r.input = py::detail::array_proxy(input.ptr())->data;
    r.output = py::detail::array_proxy(out.ptr())->data;
    call_interruptible([&] { return engine_.run_sync(std::move(r), timeout_s_); });
    return out;
  }

 private:
  bool fits(py::handle input) const {
    if (!py::isinstance<py::array>(input)) return false;
    const auto* a = py::detail::array_proxy(input.ptr());
    const int need =
        py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | (inplace_ ? py::detail::npy_api::NPY_ARRAY_WRITEABLE_ : 0);
    if (a->descr != descr_.ptr() || (a->flags & need) != need || a->nd != static_cast<int>(dims_.size())) return false;
    for (size_t i = 0; i < dims_.size(); ++i) {
      if (a->dimensions[i] != dims_[i]) return false;
    }
    return true;
  }

  Engine& engine_;  // kept alive by the Python object (keep_alive below)
  Request request_;
  py::object descr_;  // the numpy dtype object of the prepared array: compared by identity
  std::vector<py::ssize_t> dims_;
  double timeout_s_;
  bool inplace_;
};

}  // namespace

void register_sync_call(py::module_& m) {
  py::class_<SyncCall>(m, "SyncCall")
      .def(py::init<Engine&, int, std::string, int, const py::array&, int, double, double, int, int, double, bool>(),
           py::arg("engine"), py::arg("op_type"), py::arg("name"), py::arg("dtype"), py::arg("example"),
           py::arg("reduce_op"), py::arg("prescale"), py::arg("postscale"), py::arg("root"), py::arg("process_set"),
           py::arg("timeout_s"), py::arg("inplace"), py::keep_alive<1, 2>())
      .def("__call__", &SyncCall::call, py::arg("input"));
}

}  // namespace phv
