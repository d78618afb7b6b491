// Buffer-protocol access for the bindings: a held Py_buffer that must be C-contiguous (and writable
// where the core writes into it). Failures are HvdError(INVALID_ARGUMENT), raised before any
// communication. Construct and destroy with the GIL held; the pointer may be used without it.
#pragma once
#include <Python.h>

#include <string>

#include "common/error.h"

namespace phv {

// What the core does with a caller's buffer: only reads it (an input), or writes into it (an output).
enum class BufferAccess { READ, WRITE };

class BufferView {
 public:
  BufferView(PyObject* obj, BufferAccess access, const char* name) {
    const bool writable = access == BufferAccess::WRITE;
    int flags = PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &view_, flags) != 0) {
      PyErr_Clear();
      bool readable = false;
      if (writable && PyObject_GetBuffer(obj, &view_, PyBUF_STRIDES) == 0) {
        PyBuffer_Release(&view_);
        readable = true;
      } else {
        PyErr_Clear();
      }
      throw_error(ErrorKind::INVALID_ARGUMENT, name,
                  readable ? " must be writable (got a read-only buffer)"
                           : " must support the buffer protocol with C-contiguous memory (e.g. a numpy array), got ",
                  readable ? "" : Py_TYPE(obj)->tp_name);
    }
    held_ = true;
    if (!PyBuffer_IsContiguous(&view_, 'C')) throw_error(ErrorKind::INVALID_ARGUMENT, name, " must be C-contiguous");
  }
  ~BufferView() {
    if (held_) PyBuffer_Release(&view_);
  }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;

  void* data() const { return view_.buf; }
  size_t bytes() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

}  // namespace phv
