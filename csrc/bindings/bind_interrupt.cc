#include "bindings/bind_interrupt.h"

#include <pythread.h>

namespace py = pybind11;

namespace phv {

PythonSignals::~PythonSignals() {
  Py_XDECREF(type_);
  Py_XDECREF(value_);
  Py_XDECREF(traceback_);
}

bool PythonSignals::check(void* self) {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return false;
  auto* s = static_cast<PythonSignals*>(self);
  if (s->type_ == nullptr) PyErr_Fetch(&s->type_, &s->value_, &s->traceback_);
  else PyErr_Clear();
  return true;
}

void PythonSignals::raise() {
  PyErr_Restore(type_, value_, traceback_);  // steals the references
  type_ = value_ = traceback_ = nullptr;
  throw py::error_already_set();
}

bool on_main_thread() {
  static const unsigned long main_ident =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  return PyThread_get_thread_ident() == main_ident;
}

}  // namespace phv
