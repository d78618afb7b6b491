// The caller's ticket for one enqueued request: returned by enqueue(), given back to poll() and wait().
// A header of its own because both the public Engine and the engine's record of a request (op.h) name
// it, and the record must not depend on the class that hands it out.
#pragma once
#include <cstdint>

namespace phv {

using Handle = int64_t;

}  // namespace phv
