// sum of x[i]^2 over a host buffer: the local squared gradient norm |g_k|^2 of the noise-scale
// measurement (pyhorovod/torch/noise_tap.py), taken in every gradient's hook. A direct call costs a few
// microseconds where a torch norm kernel call costs ~14 us inside backward, which the measurement's small
// overhead budget cannot afford.
#pragma once
#include <cstddef>
#include "common/types.h"

namespace phv {

// float32 and float64 only (INVALID_ARGUMENT otherwise). Accumulates in double, in several independent
// partial sums (so the order differs from a sequential sum by rounding only).
double sum_of_squares(const void* buf, size_t count, DataType dt);

}  // namespace phv
