// The noise-scale measurement's hook on one allreduce (pyhorovod/torch/noise_tap.py): the engine calls
// it at fixed points of the request's life and knows nothing of what it measures. Host float32/float64
// allreduce only (the engine's validation refuses anything else).
//
// - sumsq_in: at enqueue, on the caller's thread, sum(input[i]^2) is added to it -- read before the
//   request is queued (an in-place allreduce may overwrite the input once queued), added only once the
//   request is accepted (a rejected request leaves the caller's sum as it was).
// - sumsq_out: once the reduced result is written (on the thread that ran the round), sum(output[i]^2)
//   is added to it, while the output is still in cache. The caller reads it after the request completed.
// - fill_from: the tap's own allreduce of those sums (in place): at enqueue, output[i] = fill_from[i].
//   Enqueued right after the step's last gradient, it carries every sum in the same round.
// This saves the optimizer's hooks a norm call each.
#pragma once
#include <cstddef>
#include "common/types.h"

namespace phv {

struct NormTap {
  double* sumsq_in = nullptr;
  double* sumsq_out = nullptr;
  const double* fill_from = nullptr;

  bool measures() const { return sumsq_in != nullptr || sumsq_out != nullptr; }
  // At enqueue, before the request is queued: writes fill_from into output, and returns the input's
  // squared norm (0 without sumsq_in).
  double before_queue(const void* input, void* output, size_t count, DataType dt) const;
  // At enqueue, once the request was accepted: adds before_queue's measurement.
  void accepted(double input_sumsq) const {
    if (sumsq_in != nullptr) *sumsq_in += input_sumsq;
  }
  // Once the reduced result is in output.
  void reduced(const void* output, size_t count, DataType dt) const;
};

}  // namespace phv
