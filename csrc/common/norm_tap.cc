#include "common/norm_tap.h"

#include <algorithm>

#include "common/sum_of_squares.h"

namespace phv {

double NormTap::before_queue(const void* input, void* output, size_t count, DataType dt) const {
  if (fill_from != nullptr) {
    if (dt == DataType::FLOAT32) {
      float* dst = static_cast<float*>(output);
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(fill_from[i]);
    } else {
      std::copy(fill_from, fill_from + count, static_cast<double*>(output));
    }
  }
  return sumsq_in == nullptr ? 0.0 : sum_of_squares(input, count, dt);
}

void NormTap::reduced(const void* output, size_t count, DataType dt) const {
  if (sumsq_out != nullptr) *sumsq_out += sum_of_squares(output, count, dt);
}

}  // namespace phv
