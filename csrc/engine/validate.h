// Checks a Request before it is enqueued (bad arguments raise at once, before any communication) and
// builds its descriptor. Throws HvdError(INVALID_ARGUMENT) naming the request and what is wrong.
#pragma once
#include "engine/descriptor.h"
#include "engine/process_set.h"
#include "engine/request.h"

namespace phv {

// set_size: size of request.process_set (already checked to exist and contain this rank).
Desc validate_request(const Request& request, int set_size);

}  // namespace phv
