// A numpy array over bytes the engine allocated (an allgather's or alltoall's output) that owns them: a
// capsule holds the shared_ptr, so the bytes live exactly as long as the array, and nothing is copied.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/output_bytes.h"

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

}  // namespace phv
