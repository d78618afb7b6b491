// Bindings of the runtime (contract: pyhorovod/_core.pyi): enum codes, build_info(), the CoreError
// hierarchy and the HvdError translator, the rendezvous store, the option structs. The Communicator
// lives in bind_communicator.cc.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "algorithms/tuning.h"
#include "backends/gpu_backend.h"
#include "backends/backend.h"
#include "bindings/bind_interrupt.h"
#include "common/error.h"
#include "common/sum_of_squares.h"
#include "common/types.h"
#include "rendezvous/tcp_store.h"

namespace py = pybind11;

namespace phv {

void register_communicator(py::module_& m);  // bind_communicator.cc

namespace {

// The one translator of core errors: an HvdError becomes the _core class of its ErrorKind, declared
// below one row per kind, with `.kind` naming it. pyhorovod/errors.py maps these classes to the public
// ones (ValueError, HorovodTimeoutError, HorovodInternalError).
struct ErrorClass {
  ErrorKind kind;
  const char* kind_name;
  const char* class_name;
  bool under_internal;  // derives from InternalError (a failed collective), else straight from CoreError
  const char* doc;
};

constexpr ErrorClass kErrorClasses[] = {
    {ErrorKind::INTERNAL, "INTERNAL", "InternalError", false, "A collective or the bootstrap failed."},
    {ErrorKind::INVALID_ARGUMENT, "INVALID_ARGUMENT", "InvalidArgumentError", false,
     "Bad arguments, detected before any communication (-> ValueError)."},
    {ErrorKind::TIMEOUT, "TIMEOUT", "TimeoutError_", true, "A deadline passed."},
    {ErrorKind::PEER_LOST, "PEER_LOST", "PeerLostError", true, "A peer's connection closed or failed."},
    {ErrorKind::SHUTDOWN, "SHUTDOWN", "ShutdownError", true, "The communicator or engine has been shut down."},
    {ErrorKind::INTERRUPTED, "INTERRUPTED", "InterruptedError_", true,
     "The engine stopped because a waiting call was interrupted (a signal handler raised)."},
};
constexpr int kKinds = sizeof(kErrorClasses) / sizeof(kErrorClasses[0]);
static_assert(kErrorClasses[0].kind == ErrorKind::INTERNAL, "row 0 is the fallback and the others' base");

// The classes by ErrorKind. Leaked on purpose: they live as long as the interpreter, and destroying them
// at exit after Python finalised would crash.
PyObject* g_error_class[kKinds] = {};

const ErrorClass& row_of(ErrorKind kind) {
  for (const ErrorClass& row : kErrorClasses) {
    if (row.kind == kind) return row;
  }
  return kErrorClasses[0];  // an unknown kind is an internal error
}

void raise_core_error(ErrorKind kind, const char* what) {
  const ErrorClass& row = row_of(kind);
  PyObject* cls = g_error_class[&row - kErrorClasses];
  PyObject* exc = PyObject_CallFunction(cls, "s", what);
  if (exc == nullptr) return;  // the call set an error already
  PyObject* name = PyUnicode_FromString(row.kind_name);
  PyObject_SetAttrString(exc, "kind", name);
  Py_XDECREF(name);
  PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
}

PyObject* new_class(py::module_& m, const char* name, PyObject* base, const char* kind, const char* doc) {
  std::string qualified = std::string("pyhorovod._core.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  PyObject_SetAttrString(cls, "kind", py::str(kind).ptr());  // class default; instances carry their own
  m.attr(name) = py::handle(cls);
  return cls;
}

void register_errors(py::module_& m) {
  PyObject* core = new_class(m, "CoreError", PyExc_RuntimeError, "INTERNAL",
                             "Base of every error raised by the C++ core; .kind names the ErrorKind.");
  // Rows in declaration order, so that InternalError (row 0) exists before the classes under it.
  PyObject* internal = nullptr;
  for (int i = 0; i < kKinds; ++i) {
    const ErrorClass& row = kErrorClasses[i];
    PyObject* base = row.under_internal ? internal : core;
    g_error_class[i] = new_class(m, row.class_name, base, row.kind_name, row.doc);
    if (row.kind == ErrorKind::INTERNAL) internal = g_error_class[i];
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const HvdError& e) {
      raise_core_error(e.kind(), e.what());
    }
  });
}

void register_codes(py::module_& m) {
  const std::pair<const char*, DataType> dtypes[] = {{"UINT8", DataType::UINT8},       {"INT8", DataType::INT8},
                                                     {"INT16", DataType::INT16},       {"INT32", DataType::INT32},
                                                     {"INT64", DataType::INT64},       {"FLOAT16", DataType::FLOAT16},
                                                     {"BFLOAT16", DataType::BFLOAT16}, {"FLOAT32", DataType::FLOAT32},
                                                     {"FLOAT64", DataType::FLOAT64},   {"BOOL", DataType::BOOL}};
  for (const auto& d : dtypes) m.attr(d.first) = static_cast<int>(d.second);
  const std::pair<const char*, ReduceOp> ops[] = {{"SUM", ReduceOp::SUM},         {"AVERAGE", ReduceOp::AVERAGE},
                                                  {"MIN", ReduceOp::MIN},         {"MAX", ReduceOp::MAX},
                                                  {"PRODUCT", ReduceOp::PRODUCT}, {"ADASUM", ReduceOp::ADASUM}};
  for (const auto& o : ops) m.attr(o.first) = static_cast<int>(o.second);
  const std::pair<const char*, OpType> types[] = {{"ALLREDUCE", OpType::ALLREDUCE},
                                                  {"ALLGATHER", OpType::ALLGATHER},
                                                  {"BROADCAST", OpType::BROADCAST},
                                                  {"ALLTOALL", OpType::ALLTOALL},
                                                  {"REDUCESCATTER", OpType::REDUCESCATTER},
                                                  {"BARRIER", OpType::BARRIER},
                                                  {"JOIN", OpType::JOIN}};
  for (const auto& t : types) m.attr(t.first) = static_cast<int>(t.second);
}

py::dict build_info() {
  py::dict d;
#ifdef PHV_VERSION
  d["version"] = PHV_VERSION;
#else
  d["version"] = "unknown";
#endif
  d["compiler"] = std::string("gcc/clang ") + __VERSION__;
#ifdef PHV_CXX_FLAGS
  d["cxx_flags"] = PHV_CXX_FLAGS;
#elif defined(__OPTIMIZE__)
  d["cxx_flags"] = "-std=c++17 -O3";
#else
  d["cxx_flags"] = "-std=c++17 (debug)";
#endif
  // What is linked in, not a define: the stub (gpu_backend_stub.cc) answers false in CPU builds.
  d["nccl"] = gpu_backend_built();
  d["cuda"] = gpu_backend_built();
  d["nccl_version"] = nccl_version_built();  // NCCL_VERSION_CODE, as Horovod's nccl_built() returns it
  d["shm"] = true;  // shared-memory rings between ranks of one host (ConnectOptions.shm_enable)
  return d;
}

void register_store(py::module_& m) {
  py::class_<TcpStoreServer>(m, "TcpStoreServer",
                             "The rendezvous key/value store, hosted by the launcher or rank 0 (background thread).")
      .def(py::init([](const std::string& host, int port, py::bytes secret, size_t max_value_bytes,
                       size_t max_total_bytes, double handshake_s, size_t max_connections) {
             StoreLimits limits;
             limits.max_value_bytes = max_value_bytes;
             limits.max_total_bytes = max_total_bytes;
             limits.handshake_s = handshake_s;
             limits.max_connections = max_connections;
             return std::make_unique<TcpStoreServer>(host, port, std::string(secret), limits);
           }),
           py::arg("host"), py::arg("port"), py::arg("secret"),
           py::arg("max_value_bytes") = StoreLimits{}.max_value_bytes,
           py::arg("max_total_bytes") = StoreLimits{}.max_total_bytes,
           py::arg("handshake_s") = StoreLimits{}.handshake_s,
           py::arg("max_connections") = StoreLimits{}.max_connections)
      .def_property_readonly("port", &TcpStoreServer::port)
      .def("close", &TcpStoreServer::close, py::call_guard<py::gil_scoped_release>());

  py::class_<TcpStoreClient>(m, "TcpStore", "Client of TcpStoreServer. Every call proves the secret in the handshake.")
      .def(py::init([](const std::string& host, int port, py::bytes secret, double timeout_s) {
             std::string s(secret);
             return call_interruptible([&] { return std::make_unique<TcpStoreClient>(host, port, s, timeout_s); });
           }),
           py::arg("host"), py::arg("port"), py::arg("secret"), py::arg("timeout_s"))
      .def(
          "set",
          [](TcpStoreClient& s, const std::string& key, py::bytes value) {
            std::string v(value);
            py::gil_scoped_release release;
            s.set(key, v);
          },
          py::arg("key"), py::arg("value"))
      .def(
          "get",
          [](TcpStoreClient& s, const std::string& key, double timeout_s) {
            std::string v = call_interruptible([&] { return s.get(key, timeout_s); });
            return py::bytes(v);
          },
          py::arg("key"), py::arg("timeout_s"))
      .def("add", &TcpStoreClient::add, py::arg("key"), py::arg("delta"), py::call_guard<py::gil_scoped_release>())
      .def(
          "wait",
          [](TcpStoreClient& s, const std::vector<std::string>& keys, double timeout_s) {
            call_interruptible([&] { s.wait(keys, timeout_s); });
          },
          py::arg("keys"), py::arg("timeout_s"))
      .def("check", &TcpStoreClient::check, py::arg("key"), py::call_guard<py::gil_scoped_release>())
      .def("delete_prefix", &TcpStoreClient::delete_prefix, py::arg("prefix"),
           py::call_guard<py::gil_scoped_release>());
}

void register_options(py::module_& m) {
  py::class_<Tuning>(m, "Tuning")
      .def(py::init<>())
      .def_readwrite("alpha_s", &Tuning::alpha_s)
      .def_readwrite("alpha_shm_s", &Tuning::alpha_shm_s)
      .def_readwrite("beta_bytes_per_s", &Tuning::beta_bytes_per_s)
      .def_readwrite("gamma_bytes_per_s", &Tuning::gamma_bytes_per_s)
      .def_readwrite("segment_bytes", &Tuning::segment_bytes)
      .def_readwrite("small_threshold_bytes", &Tuning::small_threshold_bytes)
      .def_readwrite("max_segments_in_flight", &Tuning::max_segments_in_flight);
  m.def("small_message_threshold", &small_message_threshold, py::arg("tuning"), py::arg("world"),
        py::arg("shared_memory") = false,
        "Bytes below which an allreduce over `world` ranks runs recursive doubling instead of the ring.");

  py::class_<ConnectOptions>(m, "ConnectOptions")
      .def(py::init<>())
      .def_readwrite("rank", &ConnectOptions::rank)
      .def_readwrite("size", &ConnectOptions::size)
      .def_readwrite("local_rank", &ConnectOptions::local_rank)
      .def_readwrite("local_size", &ConnectOptions::local_size)
      .def_readwrite("store_host", &ConnectOptions::store_host)
      .def_readwrite("store_port", &ConnectOptions::store_port)
      .def_property(
          "secret", [](const ConnectOptions& o) { return py::bytes(o.secret); },
          [](ConnectOptions& o, py::bytes s) { o.secret = std::string(s); })
      .def_readwrite("bind_host", &ConnectOptions::bind_host)
      .def_readwrite("store_prefix", &ConnectOptions::store_prefix)
      .def_readwrite("connect_timeout_s", &ConnectOptions::connect_timeout_s)
      .def_readwrite("shm_enable", &ConnectOptions::shm_enable)
      .def_readwrite("shm_spin_us", &ConnectOptions::shm_spin_us)
      .def_readwrite("shm_spin_yield", &ConnectOptions::shm_spin_yield)
      .def_readwrite("shm_ring_bytes", &ConnectOptions::shm_ring_bytes)
      .def_readwrite("shm_zero_copy", &ConnectOptions::shm_zero_copy)
      .def_readwrite("shm_direct_bytes", &ConnectOptions::shm_direct_bytes)
      .def_readwrite("shm_direct_refuse_probe", &ConnectOptions::shm_direct_refuse_probe)
      .def_readwrite("tuning", &ConnectOptions::tuning);
}

}  // namespace

void register_runtime(py::module_& m) {
  register_codes(m);
  register_errors(m);
  m.def("build_info", &build_info, "What this extension was built with.");
  // Raw pointer + element count (the noise-scale tap passes tensor.data_ptr()): the caller guarantees
  // that `count` elements of `dtype` are readable there for the call. The GIL is kept: it takes microseconds.
  m.def(
      "sum_of_squares",
      [](uintptr_t ptr, size_t count, int dtype) {
        PHV_CHECK_ARG(ptr != 0 || count == 0, "sum_of_squares: null pointer with ", count, " elements");
        return sum_of_squares(reinterpret_cast<const void*>(ptr), count, static_cast<DataType>(dtype));
      },
      py::arg("ptr"), py::arg("count"), py::arg("dtype"), "Sum of x[i]^2 (float32/float64), in double.");
  register_store(m);
  register_options(m);
  register_communicator(m);
}

}  // namespace phv
