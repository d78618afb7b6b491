// Python bindings of the engine (contract: pyhorovod/_core.pyi): EngineOptions, Result, Engine.
// Blocking calls (constructor, wait, run_sync, add/remove_process_set, shutdown) release the GIL; all but
// shutdown (which is bounded) run signal handlers while they wait (bind_interrupt.h). HvdError is
// translated to the _core.*Error classes by bind_runtime.cc.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/bind_buffer.h"
#include "bindings/bind_interrupt.h"
#include "bindings/owned_array.h"
#include "engine/engine.h"

namespace py = pybind11;

namespace phv {

namespace {

// A flat uint8 array over the engine's output bytes that owns them (owned_array.h): no copy.
py::object output_array(const Result& r) {
  if (!r.output) return py::none();
  std::vector<py::ssize_t> flat{static_cast<py::ssize_t>(r.output->size())};
  return owned_array(r.output, py::dtype::of<uint8_t>(), flat);
}

// Engine-allocated device memory (allgather/alltoall of CUDA tensors) as a flat uint8 buffer exposing
// __cuda_array_interface__: torch.as_tensor / cupy.asarray wrap it without a copy and keep this object
// (hence the memory) alive. The data is complete when the request completes, so no stream is given.
struct DeviceBuffer {
  std::shared_ptr<void> mem;
  size_t nbytes = 0;
  int device = -1;
};

py::object output_object(const Result& r) {
  if (r.device_output) return py::cast(DeviceBuffer{r.device_output, r.device_output_bytes, r.device});
  return output_array(r);
}

// The address of a host buffer: an int is taken as a pointer, anything else must expose a C-contiguous
// buffer (writable for outputs). The caller keeps the object alive for the whole (synchronous) call.
void* host_pointer(py::handle obj, BufferAccess access) {
  const bool writable = access == BufferAccess::WRITE;
  if (PyLong_Check(obj.ptr())) return reinterpret_cast<void*>(obj.cast<uintptr_t>());
  if (py::isinstance<py::array>(obj)) {  // any dtype (the buffer protocol refuses e.g. ml_dtypes' bfloat16)
    auto arr = py::reinterpret_borrow<py::array>(obj);
    if (writable) return arr.mutable_data();  // throws if read-only
    return const_cast<void*>(arr.data());
  }
  Py_buffer view;
  if (PyObject_GetBuffer(obj.ptr(), &view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) != 0)
    throw py::error_already_set();
  void* p = view.buf;
  PyBuffer_Release(&view);
  return p;
}

}  // namespace

void register_ops(py::module_& m) {
  m.attr("POOLED_OUTPUT_BYTES") = kPooledNewOutputBytes;
  m.def(
      "empty_output",
      [](const py::dtype& dtype, const std::vector<py::ssize_t>& shape, uintptr_t input) {
        PyObject* out = new_output_array(dtype.ptr(), shape, reinterpret_cast<const void*>(input));
        if (out == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::array>(out);
      },
      py::arg("dtype"), py::arg("shape"), py::arg("input"));
  py::class_<EngineOptions>(m, "EngineOptions")
      .def(py::init<>())
      .def_readwrite("connect", &EngineOptions::connect)
      .def_readwrite("cross_rank", &EngineOptions::cross_rank)
      .def_readwrite("cross_size", &EngineOptions::cross_size)
      .def_readwrite("fusion_threshold_bytes", &EngineOptions::fusion_threshold_bytes)
      .def_readwrite("fusion_max_tensor_bytes", &EngineOptions::fusion_max_tensor_bytes)
      .def_readwrite("cycle_time_ms", &EngineOptions::cycle_time_ms)
      .def_readwrite("cache_capacity", &EngineOptions::cache_capacity)
      .def_readwrite("stall_check_s", &EngineOptions::stall_check_s)
      .def_readwrite("stall_shutdown_s", &EngineOptions::stall_shutdown_s)
      .def_readwrite("stall_check_disable", &EngineOptions::stall_check_disable)
      .def_readwrite("timeline_path", &EngineOptions::timeline_path)
      .def_readwrite("timeline_mark_cycles", &EngineOptions::timeline_mark_cycles)
      .def_readwrite("timeout_s", &EngineOptions::timeout_s)
      .def_readwrite("dynamic_process_sets", &EngineOptions::dynamic_process_sets)
      .def_readwrite("process_sets", &EngineOptions::process_sets)
      .def_readwrite("gpu_path", &EngineOptions::gpu_path)
      .def_readwrite("copy_path_adapt", &EngineOptions::copy_path_adapt)
      .def_readwrite("allreduce_path_adapt", &EngineOptions::allreduce_path_adapt)
      .def_readwrite("hierarchical_allreduce", &EngineOptions::hierarchical_allreduce)
      .def_readwrite("hierarchical_allgather", &EngineOptions::hierarchical_allgather)
      .def_readwrite("host_name", &EngineOptions::host_name)
      .def_property(
          "log_level", [](const EngineOptions& o) { return static_cast<int>(o.log_level); },
          [](EngineOptions& o, int level) {
            if (level < 0 || level > static_cast<int>(LogLevel::FATAL)) {
              throw py::value_error("log_level must be 0 (trace) .. 5 (fatal), got " + std::to_string(level));
            }
            o.log_level = static_cast<LogLevel>(level);
          });

  py::class_<DeviceBuffer>(m, "DeviceBuffer")
      .def_readonly("nbytes", &DeviceBuffer::nbytes)
      .def_readonly("device", &DeviceBuffer::device)
      .def_property_readonly("ptr", [](const DeviceBuffer& b) { return reinterpret_cast<uintptr_t>(b.mem.get()); })
      .def_property_readonly("__cuda_array_interface__", [](const DeviceBuffer& b) {
        py::dict d;
        d["shape"] = py::make_tuple(b.nbytes);
        d["typestr"] = "|u1";
        d["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(b.mem.get()), false);
        d["strides"] = py::none();
        d["version"] = 3;
        return d;
      });

  py::class_<Result>(m, "Result")
      .def_property_readonly("output", &output_object)
      .def_readonly("output_shape", &Result::output_shape)
      .def_readonly("received_splits", &Result::received_splits)
      .def_readonly("value", &Result::value);

  py::class_<Engine>(m, "Engine")
      .def(py::init([](const EngineOptions& options) {
             return call_interruptible([&] { return std::make_unique<Engine>(options); });
           }),
           py::arg("options"))
      .def(
          "enqueue",
          [](Engine& e, int op_type, std::string name, int dtype, std::vector<int64_t> shape, uintptr_t input_ptr,
             uintptr_t output_ptr, int reduce_op, double prescale, double postscale, int root,
             std::vector<int64_t> splits, int process_set, int device, int64_t group, int64_t group_size,
             double timeout_s, int64_t stream, uintptr_t sumsq_in, uintptr_t sumsq_out, uintptr_t fill_from) {
            Request r;
            r.type = static_cast<OpType>(op_type);
            r.name = std::move(name);
            r.dtype = static_cast<DataType>(dtype);
            r.shape = std::move(shape);
            r.input = reinterpret_cast<const void*>(input_ptr);
            r.output = reinterpret_cast<void*>(output_ptr);
            r.reduce_op = static_cast<ReduceOp>(reduce_op);
            r.prescale = prescale;
            r.postscale = postscale;
            r.root = root;
            r.splits = std::move(splits);
            r.process_set = process_set;
            r.device = device;
            r.stream = stream;
            r.group = group;
            r.group_size = group_size;
            r.norm_tap.sumsq_in = reinterpret_cast<double*>(sumsq_in);
            r.norm_tap.sumsq_out = reinterpret_cast<double*>(sumsq_out);
            r.norm_tap.fill_from = reinterpret_cast<const double*>(fill_from);
            return e.enqueue(std::move(r), timeout_s);
          },
          py::arg("op_type"), py::arg("name"), py::arg("dtype"), py::arg("shape"), py::arg("input_ptr"),
          py::arg("output_ptr"), py::arg("reduce_op") = 0, py::arg("prescale") = 1.0, py::arg("postscale") = 1.0,
          py::arg("root") = 0, py::arg("splits") = std::vector<int64_t>{}, py::arg("process_set") = 0,
          py::arg("device") = -1, py::arg("group") = 0, py::arg("group_size") = 0, py::arg("timeout_s") = 0.0,
          py::arg("stream") = 0, py::arg("sumsq_in") = 0, py::arg("sumsq_out") = 0, py::arg("fill_from") = 0)
      .def("poll", &Engine::poll, py::arg("handle"))
      .def(
          "wait", [](Engine& e, Handle h) { return call_interruptible([&] { return e.wait(h); }); }, py::arg("handle"))
      // The synchronous fast path (pyhorovod's allreduce/broadcast/... without _async): positional
      // arguments only (keyword parsing costs microseconds), host buffers given as objects exposing the
      // buffer protocol (or raw int pointers), one GIL release for enqueue + wait.
      .def(
          "run_sync",
          [](Engine& e, int op_type, std::string name, int dtype, std::vector<int64_t> shape, py::handle input,
             py::handle output, int reduce_op, double prescale, double postscale, int root, int process_set,
             double timeout_s, std::vector<int64_t> splits) {
            Request r;
            r.type = static_cast<OpType>(op_type);
            r.name = std::move(name);
            r.dtype = static_cast<DataType>(dtype);
            r.shape = std::move(shape);
            r.input = host_pointer(input, BufferAccess::READ);
            r.output = output.is_none() ? nullptr : host_pointer(output, BufferAccess::WRITE);
            r.reduce_op = static_cast<ReduceOp>(reduce_op);
            r.prescale = prescale;
            r.postscale = postscale;
            r.root = root;
            r.process_set = process_set;
            r.splits = std::move(splits);
            // An allreduce or broadcast into a given output has nothing else to say (its shape is the
            // input's): returning None saves building a Result object on the latency path.
            const bool in_output = (r.type == OpType::ALLREDUCE || r.type == OpType::BROADCAST) && r.output != nullptr;
            Result res = call_interruptible([&] { return e.run_sync(std::move(r), timeout_s); });
            if (in_output) return py::object(py::none());
            return py::object(py::cast(std::move(res)));
          },
          py::arg("op_type"), py::arg("name"), py::arg("dtype"), py::arg("shape"), py::arg("input"), py::arg("output"),
          py::arg("reduce_op"), py::arg("prescale"), py::arg("postscale"), py::arg("root"), py::arg("process_set"),
          py::arg("timeout_s"), py::arg("splits") = std::vector<int64_t>())
      // A blocking numpy alltoall with splits: run_sync's request, answered with (output, received splits)
      // as arrays built here (the output owning the engine's bytes, the splits as int32), because building
      // a Result object and converting its fields in Python cost three times the engine's own work.
      .def(
          "alltoall_sync",
          [](Engine& e, std::string name, int dtype, const py::array& input, std::vector<int64_t> splits,
             int process_set, double timeout_s) {
            Request r;
            r.type = OpType::ALLTOALL;
            r.name = std::move(name);
            r.dtype = static_cast<DataType>(dtype);
            r.shape.assign(input.shape(), input.shape() + input.ndim());
            r.input = host_pointer(input, BufferAccess::READ);
            r.splits = std::move(splits);
            r.process_set = process_set;
            Result res = call_interruptible([&] { return e.run_sync(std::move(r), timeout_s); });
            py::array_t<int32_t> received(static_cast<py::ssize_t>(res.received_splits.size()));
            int32_t* to = received.mutable_data();
            for (size_t i = 0; i < res.received_splits.size(); ++i)
              to[i] = static_cast<int32_t>(res.received_splits[i]);
            return py::make_tuple(owned_array(res.output, input.dtype(), res.output_shape), received);
          },
          py::arg("name"), py::arg("dtype"), py::arg("input"), py::arg("splits"), py::arg("process_set"),
          py::arg("timeout_s"))
      .def(
          "add_process_set",
          [](Engine& e, const std::vector<int>& ranks) {
            return call_interruptible([&] { return e.add_process_set(ranks); });
          },
          py::arg("ranks"))
      .def(
          "remove_process_set", [](Engine& e, int id) { call_interruptible([&] { e.remove_process_set(id); }); },
          py::arg("id"))
      .def("process_set_ranks", &Engine::process_set_ranks, py::arg("id"))
      .def("process_set_ids", &Engine::process_set_ids)
      .def("auto_name_floor", &Engine::auto_name_floor, py::arg("prefix"))
      .def("start_timeline", &Engine::start_timeline, py::arg("path"), py::arg("mark_cycles") = false)
      .def("stop_timeline", &Engine::stop_timeline)
      .def(
          "set_knobs",
          [](Engine& e, int64_t fusion_threshold_bytes, double cycle_time_ms, int hierarchical_allreduce,
             int64_t segment_bytes) {
            EngineKnobs k{fusion_threshold_bytes, cycle_time_ms, hierarchical_allreduce, segment_bytes};
            e.set_knobs(k);
          },
          py::arg("fusion_threshold_bytes") = -1, py::arg("cycle_time_ms") = -1.0,
          py::arg("hierarchical_allreduce") = -2, py::arg("segment_bytes") = -1)
      .def("hierarchy",
           [](const Engine& e) {
             const Hierarchy& h = e.hierarchy();
             py::dict d;
             d["host_of"] = h.host_of;
             d["allreduce_mode"] = h.allreduce_mode;
             d["allgather_mode"] = h.allgather_mode;
             auto fit = [](const RingFit& f) { return py::make_tuple(f.alpha_s, f.beta_bytes_per_s); };
             d["flat"] = fit(h.model.flat);
             d["local"] = fit(h.model.local);
             d["cross"] = fit(h.model.cross);
             d["two_level_from_bytes"] = h.model.two_level_from_bytes;
             return d;
           })
      .def("shutdown", &Engine::shutdown, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("interrupted", &Engine::interrupted)
      .def_property_readonly("rank", &Engine::rank)
      .def_property_readonly("size", &Engine::size);
}

}  // namespace phv
