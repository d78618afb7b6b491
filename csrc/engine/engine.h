// The background engine: one thread per process owns the request queue, negotiates with the other ranks
// which named requests are ready everywhere, fuses small allreduces, runs collectives on the backend and
// completes handles. See docs/architecture.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include "algorithms/hierarchy.h"
#include "engine/engine_options.h"
#include "engine/handle.h"
#include "engine/request.h"

namespace phv {

struct PreparedRequest;

class Engine {
 public:
  explicit Engine(const EngineOptions& options);  // collective: connects and starts the thread
  ~Engine();                                      // shutdown() if still running

  // Returns at once. Throws HvdError(INVALID_ARGUMENT) for bad arguments or a name already in flight.
  Handle enqueue(Request request, double timeout_s /* <=0: options.timeout_s */);
  bool poll(Handle handle);
  // Waits (caller must not hold the GIL). Throws the request's error. Releases the handle. Wait and
  // run_sync give up with INTERRUPTED when the calling thread's interrupt check says stop (interrupt.h).
  Result wait(Handle handle);
  // enqueue() + wait() for a caller that waits right away (same checks and errors; caller must not
  // hold the GIL): the calling thread runs the negotiation round, the background thread is not woken.
  Result run_sync(Request request, double timeout_s /* <=0: options.timeout_s */);
  // A named request checked once (as enqueue() checks it), then run by run_prepared() with each call's
  // buffers: run_sync() without rebuilding the request (engine/prepared_request.h).
  std::shared_ptr<PreparedRequest> prepare(Request request, double timeout_s);
  Result run_prepared(PreparedRequest& prepared, const void* input, void* output);

  int add_process_set(const std::vector<int>& ranks);  // collective over all ranks; returns id
  void remove_process_set(int id);                      // collective over all ranks
  std::vector<int> process_set_ranks(int id) const;
  std::vector<int> process_set_ids() const;

  void start_timeline(const std::string& path, bool mark_cycles);
  void stop_timeline();
  void set_knobs(const EngineKnobs& knobs);
  const Hierarchy& hierarchy() const;  // the host layout and fitted model found at init

  // Stops the thread after the ranks agree (or after a timeout); pending handles fail with SHUTDOWN.
  void shutdown();
  // True once an interrupt check of a waiting caller said stop (EngineCore::interrupted): the engine is
  // stopping or stopped, and only shutdown() is left to call.
  bool interrupted() const;

  // The highest number n of an automatic name "<prefix>n" that another rank made and this rank never
  // submitted, learnt from that request's failure (0: none); see engine/auto_name.h.
  int64_t auto_name_floor(const std::string& prefix) const;

  int rank() const;
  int size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace phv
