// The pybind11 module pyhorovod._core. Thin: each area registers itself (contract: pyhorovod/_core.pyi).
#include <pybind11/pybind11.h>

namespace phv {
void register_runtime(pybind11::module_& m);  // bind_runtime.cc: enums, errors, store, Communicator
void register_ops(pybind11::module_& m);      // bind_ops.cc: Engine
void register_sync_call(pybind11::module_& m);  // bind_sync_call.cc: SyncCall
}  // namespace phv

PYBIND11_MODULE(_core, m) {
  m.doc() = "pyhorovod C++ core: rendezvous, transports, collective algorithms, engine";
  phv::register_runtime(m);
  phv::register_ops(m);
  phv::register_sync_call(m);
}
