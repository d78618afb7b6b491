// A numpy array over bytes the engine allocated (an allgather's or alltoall's output) that owns them: a
// capsule holds the shared_ptr, so the bytes live exactly as long as the array, and nothing is copied.
// new_output_array: a new, uninitialized output of another collective, on the same memory when large.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/output_bytes.h"
#include "engine/output_pool.h"
#include "transport/cross_memory.h"

namespace phv {

// `dtype` and `shape` describe the bytes (their product times the item size is bytes->size()); no bytes
// (an empty output) gives a new empty array of that shape.
template <typename Shape>
pybind11::array owned_array(const OutputBytes& bytes, const pybind11::dtype& dtype, const Shape& shape) {
  namespace py = pybind11;
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  if (!bytes) return py::array(dtype, dims);
  py::capsule owner(new OutputBytes(bytes), [](void* p) { delete static_cast<OutputBytes*>(p); });
  return py::array(dtype, dims, bytes->data(), owner);
}

// A new C-contiguous array of `shape` for a collective's output (allreduce, broadcast, reducescatter not in
// place), contents unspecified. From kPooledNewOutputBytes up its memory comes from the engine's output pool
// (output_pool.h), placed within its line like the input at `input` (copy_phase): numpy's own large arrays
// are mapped afresh by every call, and their first touch (page faults, the kernel zeroing huge pages) cost
// a third of an asynchronous 64 MiB allreduce at 2 ranks (18.4 ms against 12.1 pooled). Smaller ones:
// numpy's constructor, from malloc's heap. Returns nullptr with a Python error set when numpy fails.
inline PyObject* new_output_array(PyObject* dtype, const std::vector<pybind11::ssize_t>& shape, const void* input) {
  namespace py = pybind11;
  const auto item = static_cast<size_t>(py::reinterpret_borrow<py::dtype>(dtype).itemsize());
  size_t bytes = item;
  for (py::ssize_t d : shape) bytes *= static_cast<size_t>(d);
  if (bytes >= kPooledNewOutputBytes) {
    const size_t phase = copy_phase(reinterpret_cast<uintptr_t>(input), item);
    try {
      return owned_array(take_output_buffer(bytes, phase), py::reinterpret_borrow<py::dtype>(dtype), shape)
          .release()
          .ptr();
    } catch (py::error_already_set& e) {
      e.restore();
      return nullptr;
    }
  }
  // numpy's constructor itself: pybind11's array(dtype, shape) first copies the shape and computes strides,
  // a third of the cost of a small call's allocation.
  auto& api = py::detail::npy_api::get();
  Py_INCREF(dtype);  // the constructor takes over one reference to the dtype
  return api.PyArray_NewFromDescr_(api.PyArray_Type_, dtype, static_cast<int>(shape.size()),
                                   const_cast<Py_intptr_t*>(shape.data()), nullptr, nullptr, 0, nullptr);
}

}  // namespace phv
