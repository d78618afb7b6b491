// Blocking calls that listen to signals. The core waits with the GIL released, and Python runs signal
// handlers only between bytecodes of the main thread: without help, Ctrl-C during a collective whose
// peer never comes would be handled only at the collective's deadline. call_interruptible() runs a call
// without the GIL and, on the main thread, installs an interrupt check (common/interrupt.h) that takes
// the GIL once per slice and runs the pending handlers (PyErr_CheckSignals). A handler that returns
// leaves the wait alone; one that raises (KeyboardInterrupt) makes the wait throw INTERRUPTED, and the
// call then raises the handler's exception in place of the core's error. Other threads get no check
// (Python runs handlers on the main thread only), so they never take the GIL for it.
#pragma once
#include <pybind11/pybind11.h>

#include <type_traits>

#include "common/error.h"
#include "common/interrupt.h"

namespace phv {

// The exception a signal handler raised during a call, kept until the call returns to Python.
class PythonSignals {
 public:
  PythonSignals() = default;
  PythonSignals(const PythonSignals&) = delete;
  PythonSignals& operator=(const PythonSignals&) = delete;
  ~PythonSignals();  // with the GIL

  static bool check(void* self);  // an InterruptCheck: takes the GIL, runs the handlers
  bool raised() const { return type_ != nullptr; }
  [[noreturn]] void raise();      // with the GIL: makes the kept exception the current one

 private:
  PyObject* type_ = nullptr;
  PyObject* value_ = nullptr;
  PyObject* traceback_ = nullptr;
};

bool on_main_thread();  // with the GIL

// Runs fn() without the GIL (see above). Called with the GIL.
template <typename F>
auto call_interruptible(F&& fn) -> decltype(fn()) {
  namespace py = pybind11;
  using R = decltype(fn());
  if (!on_main_thread()) {
    py::gil_scoped_release release;
    return fn();
  }
  PythonSignals signals;
  try {
    InterruptScope scope(&PythonSignals::check, &signals);
    if constexpr (std::is_void_v<R>) {
      {
        py::gil_scoped_release release;
        fn();
      }
      if (signals.raised()) signals.raise();  // a handler raised just as the call completed
    } else {
      R result = [&] {
        py::gil_scoped_release release;
        return fn();
      }();
      if (signals.raised()) signals.raise();
      return result;
    }
  } catch (const HvdError&) {
    if (signals.raised()) signals.raise();
    throw;
  }
}

}  // namespace phv
