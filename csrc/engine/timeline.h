// Chrome trace ("Trace Event Format", JSON array form) of what the engine did, written by rank 0 (the
// coordinator: it alone sees when each rank became ready). Opens in ui.perfetto.dev and chrome://tracing.
//
// One track (tid) per tensor, named by a thread_name metadata event. Spans (B/E pairs):
//   NEGOTIATE_<OP>   first rank ready -> all ready (an instant mark "rank r ready" per rank inside it)
//   QUEUE            agreed -> this rank starts running it
//   MEMCPY_IN_FUSION_BUFFER, <OP> (the collective), MEMCPY_OUT_FUSION_BUFFER
// and, with mark_cycles, an instant "CYCLE_START" on track 0 for every round that did something.
//
// Crash safety: the file starts with "[" and every event is written as ",\n{...}" after the first, whole
// lines at a time with one write() per round, so a process killed at any point leaves a file that is a
// valid trace once a "]" is appended (the viewers accept the missing "]"); stop() closes the array.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include "common/types.h"
#include "engine/descriptor.h"

namespace phv {

class Timeline {
 public:
  ~Timeline();
  void start(const std::string& path, bool mark_cycles);  // throws HvdError(INVALID_ARGUMENT) if unwritable
  void stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }
  bool mark_cycles() const { return mark_cycles_; }

  void begin(const Key& key, const std::string& span, Clock::time_point t);
  void end(const Key& key, const std::string& span, Clock::time_point t, const std::string& error = "");
  void mark(const Key& key, const std::string& what, Clock::time_point t);
  void cycle(Clock::time_point t);
  void flush();  // writes the buffered lines (engine thread, once per round)

 private:
  int track(const Key& key);  // caller holds mu_
  void event(const char* ph, const std::string& name, int tid, Clock::time_point t, const std::string& args);

  std::mutex mu_;
  std::atomic<bool> active_{false};
  bool mark_cycles_ = false;
  int fd_ = -1;
  bool first_ = true;
  Clock::time_point origin_;
  std::string pending_;
  std::unordered_map<Key, int, KeyHash> tracks_;
};

std::string span_name(const char* prefix, DescKind kind);  // e.g. ("NEGOTIATE_", allreduce) -> NEGOTIATE_ALLREDUCE

}  // namespace phv
