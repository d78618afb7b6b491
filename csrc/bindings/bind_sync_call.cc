// _core.SyncCall: a prepared synchronous request (contract: pyhorovod/_core.pyi). The Python layer of a
// blocking allreduce, broadcast, reducescatter, allgather or alltoall checks its arguments once, for the
// first call with given arguments (name, op, scales, root); the calls after it hand over only the array.
// What stays per call is what can change between calls without the arguments changing: the array itself.
// So the call compares the array with the one the request was prepared for (same dtype object, same shape,
// C-contiguous, writable when written in place) and, when it differs, returns None without doing anything:
// the caller then takes its full path, which checks everything again (and raises the usual ValueError for
// a bad array). The engine checks the request once, when the SyncCall is made (engine/prepared_request.h),
// and negotiates every call as before (a changed shape on another rank is still a mismatch error, or for
// an allgather a new gathered shape). The output: the input itself (in place), a new array of the input's
// shape (allreduce, broadcast) or of out_shape (reducescatter: this rank's block), or the bytes the engine
// allocated, owned by the array (allgather, alltoall: their shape is known only once every rank's is).
//
// Why not Engine.run_sync: its twelve converted arguments (a str, a list, ints, floats) and the output
// allocated in Python cost as much as the engine's own work (benchmarks/RESULTS.md, "The express round").
// Why entry(): calling the SyncCall object goes through its __call__ slot and pybind11's dispatcher
// (argument loaders, overload loop); the builtin function entry() returns is called by the interpreter
// directly, with the array as its one argument. For an unnamed call, entry(busy, by_thread, claim) first
// claims the reusable synchronous name as pyhorovod/_sync_calls.py describes (busy: _api._sync_names_busy,
// by_thread: _api._unnamed_by_thread, claim: the key in busy), in C: in Python that took 0.17 us a call.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <vector>

#include "bindings/bind_interrupt.h"
#include "bindings/owned_array.h"
#include "engine/engine.h"
#include "engine/prepared_request.h"

namespace py = pybind11;

namespace phv {

namespace {

class SyncCall {
 public:
  SyncCall(Engine& engine, int op_type, std::string name, int dtype, const py::array& example, int reduce_op,
           double prescale, double postscale, int root, int process_set, double timeout_s, bool inplace,
           const std::vector<py::ssize_t>& out_shape)
      : engine_(engine), inplace_(inplace) {
    const auto type = static_cast<OpType>(op_type);
    PHV_CHECK_ARG(type == OpType::ALLREDUCE || type == OpType::BROADCAST || type == OpType::REDUCESCATTER ||
                      type == OpType::ALLGATHER || type == OpType::ALLTOALL,
                  "SyncCall: op_type must be ALLREDUCE, BROADCAST, REDUCESCATTER, ALLGATHER or ALLTOALL, got ",
                  op_type);
    PHV_CHECK_ARG(!inplace || type == OpType::ALLREDUCE || type == OpType::BROADCAST,
                  "SyncCall: only an allreduce or a broadcast runs in place");
    PHV_CHECK_ARG(type == OpType::REDUCESCATTER || out_shape.empty(),
                  "SyncCall: out_shape is for a reducescatter (its output is one block of the input)");
    engine_output_ = type == OpType::ALLGATHER || type == OpType::ALLTOALL;
    Request request;
    request.type = type;
    request.name = std::move(name);
    request.dtype = static_cast<DataType>(dtype);
    request.reduce_op = static_cast<ReduceOp>(reduce_op);
    request.prescale = prescale;
    request.postscale = postscale;
    request.root = root;
    request.process_set = process_set;
    descr_ = py::reinterpret_borrow<py::object>(py::detail::array_proxy(example.ptr())->descr);
    for (py::ssize_t i = 0; i < example.ndim(); ++i) {
      dims_.push_back(example.shape(i));
      request.shape.push_back(example.shape(i));
    }
    out_dims_ = type == OpType::REDUCESCATTER ? out_shape : dims_;
    // The example's buffer stands in while the request is checked; each call brings its own. An
    // allgather or alltoall writes into bytes the engine allocates (Result.output).
    request.input = py::detail::array_proxy(example.ptr())->data;
    if (!engine_output_) request.output = const_cast<void*>(request.input);
    prepared_ = engine_.prepare(std::move(request), timeout_s);
  }

  // The output array (the input itself in place), or None when `input` is not the array prepared for.
  py::object call(py::handle input) {
    if (!fits(input)) return py::none();
    const void* in = py::detail::array_proxy(input.ptr())->data;
    if (engine_output_) {
      Result r = call_interruptible([&] { return engine_.run_prepared(*prepared_, in, nullptr); });
      return owned_array(r.output, py::reinterpret_borrow<py::dtype>(descr_), r.output_shape);
    }
    py::object out = inplace_ ? py::reinterpret_borrow<py::object>(input) : new_output(in);
    void* to = py::detail::array_proxy(out.ptr())->data;
    call_interruptible([&] { return engine_.run_prepared(*prepared_, in, to); });
    return out;
  }

  // call() as a builtin function of one argument that holds a reference to this SyncCall's object; with
  // busy given (not None), one that claims the synchronous name around the call (see above).
  static py::object entry(py::object self, py::object busy, py::object by_thread, py::object claim) {
    static PyMethodDef def = {"prepared_call", reinterpret_cast<PyCFunction>(&SyncCall::run_entry), METH_O,
                              "SyncCall.__call__ without pybind11's dispatch"};
    PHV_CHECK_ARG(busy.is_none() || (PyDict_Check(busy.ptr()) && PyDict_Check(by_thread.ptr())),
                  "SyncCall.entry: busy and by_thread must be dicts");
    auto* state = new EntryState{self_of(self), self, busy.is_none() ? py::object() : busy, by_thread, claim};
    PyObject* capsule = PyCapsule_New(state, kCapsuleName, [](PyObject* cap) {
      delete static_cast<EntryState*>(PyCapsule_GetPointer(cap, kCapsuleName));
    });
    if (capsule == nullptr) {
      delete state;
      throw py::error_already_set();
    }
    py::object fn = py::reinterpret_steal<py::object>(PyCFunction_New(&def, capsule));
    Py_DECREF(capsule);
    if (!fn) throw py::error_already_set();
    return fn;
  }

 private:
  static constexpr const char* kCapsuleName = "pyhorovod._core.SyncCall";

  // What an entry's capsule owns: the SyncCall (kept alive by its Python object) and, for an unnamed
  // call, the claim's dicts and key (busy empty for a named call).
  struct EntryState {
    SyncCall* call;
    py::object owner;
    py::object busy, by_thread, claim;
  };

  static SyncCall* self_of(py::handle owner) { return owner.cast<SyncCall*>(); }

  // call(input) holding the claim: None (nothing run) when another thread holds it, or has unnamed
  // requests in flight (an entry of by_thread other than ours); the claim is dropped afterwards whatever
  // happens, as dict.pop(claim, None) would.
  static py::object claimed_call(EntryState& st, py::handle input) {
    py::object me = py::reinterpret_steal<py::object>(PyLong_FromUnsignedLong(PyThread_get_thread_ident()));
    if (!me) throw py::error_already_set();
    const Py_ssize_t others = PyDict_Size(st.by_thread.ptr());
    if (others > 1) return py::none();
    if (others == 1) {
      const int mine = PyDict_Contains(st.by_thread.ptr(), me.ptr());
      if (mine < 0) throw py::error_already_set();
      if (mine == 0) return py::none();
    }
    PyObject* holder = PyDict_SetDefault(st.busy.ptr(), st.claim.ptr(), me.ptr());  // borrowed
    if (holder == nullptr) throw py::error_already_set();
    const int same = PyObject_RichCompareBool(holder, me.ptr(), Py_EQ);
    if (same < 0) throw py::error_already_set();
    if (same == 0) return py::none();
    struct Unclaim {
      PyObject* busy;
      PyObject* claim;
      ~Unclaim() {
        if (PyDict_DelItem(busy, claim) < 0) PyErr_Clear();  // already gone (a shutdown cleared it)
      }
    } unclaim{st.busy.ptr(), st.claim.ptr()};
    return st.call->call(input);
  }

  static PyObject* run_entry(PyObject* capsule, PyObject* input) {
    try {
      auto* st = static_cast<EntryState*>(PyCapsule_GetPointer(capsule, kCapsuleName));
      return (st->busy ? claimed_call(*st, input) : st->call->call(input)).release().ptr();
    } catch (py::error_already_set& e) {
      e.restore();
    } catch (...) {
      py::detail::try_translate_exceptions();  // the module's translators: HvdError -> its CoreError class
    }
    return nullptr;
  }

  // A new C-contiguous array of out_dims_ for the input at `in` (owned_array.h).
  py::object new_output(const void* in) const {
    PyObject* out = new_output_array(descr_.ptr(), out_dims_, in);
    if (out == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(out);
  }

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
  std::shared_ptr<PreparedRequest> prepared_;
  py::object descr_;  // the numpy dtype object of the prepared array: compared by identity
  std::vector<py::ssize_t> dims_;  // the input's shape, which a call's array must have
  std::vector<py::ssize_t> out_dims_;  // the output's, when the caller allocates it
  bool engine_output_ = false;  // allgather, alltoall: the engine allocates the output
  bool inplace_;
};

}  // namespace

void register_sync_call(py::module_& m) {
  py::class_<SyncCall>(m, "SyncCall")
      .def(py::init<Engine&, int, std::string, int, const py::array&, int, double, double, int, int, double, bool,
                    const std::vector<py::ssize_t>&>(),
           py::arg("engine"), py::arg("op_type"), py::arg("name"), py::arg("dtype"), py::arg("example"),
           py::arg("reduce_op"), py::arg("prescale"), py::arg("postscale"), py::arg("root"), py::arg("process_set"),
           py::arg("timeout_s"), py::arg("inplace"), py::arg("out_shape") = std::vector<py::ssize_t>(),
           py::keep_alive<1, 2>())
      .def("__call__", &SyncCall::call, py::arg("input"))
      .def("entry", &SyncCall::entry, py::arg("busy") = py::none(), py::arg("by_thread") = py::none(),
           py::arg("claim") = py::none());
}

}  // namespace phv
