// A prepared request: one synchronous request checked once and then run again and again with new
// buffers (the blocking small allreduce a training loop repeats; bindings/bind_sync_call.cc).
//
// Why. Each run_sync() builds its Op afresh: a heap block, the name and shape copied twice, the process
// set looked up and the request validated. For a 4 B allreduce that is a tenth of the call's work, and
// none of it can change between two calls with the same arguments on one engine (the global process
// set never changes size; an elastic resize makes a new engine). So the checked Op is kept as a
// blueprint; the first run copies it into the reusable Op, and each later run only resets that Op's
// per-run state (Op::restart): no allocation, no copy of the name and shape. The reusable Op is taken
// only when nobody else holds it (an interrupted wait can leave it in the engine's tables) and no other
// thread is running this request; otherwise the run copies the blueprint into a fresh Op, as run_sync
// would.
#pragma once
#include <atomic>
#include <memory>
#include "engine/op.h"

namespace phv {

struct PreparedRequest {
  Op blueprint;  // the validated Op, without buffers, handle or times
  std::shared_ptr<Op> reusable;  // the Op of the last run on the owning thread
  std::atomic<bool> in_use{false};  // a run holds `reusable`
};

}  // namespace phv
