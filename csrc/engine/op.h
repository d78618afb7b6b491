// One enqueued request as the engine tracks it from enqueue() to wait().
//
// Ownership: the handle table (callers' side) and, while the request is pending, the engine thread's
// pending table both hold a shared_ptr, so a caller that gives up waiting never frees an Op the engine
// thread still uses. Fields under "engine thread" are touched only by that thread; the completion
// fields are written under the engine mutex before `done` is set.
#pragma once
#include <cstdint>
#include <string>
#include "common/error.h"
#include "common/types.h"
#include "engine/descriptor.h"
#include "engine/handle.h"
#include "engine/request.h"

namespace phv {

struct Op {
  Handle handle = 0;
  Request req;
  Desc desc;          // what the ranks must agree on (desc.key() is the key)
  int64_t seq = 0;    // request number on this rank, quoted in errors ("request #12")
  int set_index = 0;  // this rank's position in the process set
  double timeout_s = 0;
  Deadline deadline;
  Clock::time_point enqueued;

  // engine thread
  bool held = false;          // member of a group whose other members have not all been enqueued yet
  bool reported = false;      // descriptor sent to the coordinator (it keeps it until the key resolves)
  bool expired_sent = false;  // deadline passed and reported: waiting for the TIMEOUT verdict

  // completion (under the engine mutex)
  bool done = false;
  bool failed = false;
  ErrorKind error_kind = ErrorKind::INTERNAL;
  std::string error;
  Result result;

  // Back to the state of the Op this one was copied from (a prepared request's blueprint) before its first
  // run. req and desc stay as they are: the engine writes them only for members of a group (runner.cc),
  // and a prepared request is never one. Cheaper than copying the blueprint again (six vectors, four
  // strings), which a 4 B allreduce notices.
  void restart() {
    handle = 0;
    seq = 0;
    held = reported = expired_sent = done = failed = false;
    error_kind = ErrorKind::INTERNAL;
    error.clear();
    result = Result{};
  }

  // "allreduce 'grad.3' (request #12)" -- how errors name this request.
  std::string label() const {
    std::string s = std::string(kind_name(desc.kind)) + " '" + desc.name + "'";
    if (desc.set != 0) s += " in process set " + std::to_string(desc.set);
    return s + " (request #" + std::to_string(seq) + ")";
  }
};

}  // namespace phv
