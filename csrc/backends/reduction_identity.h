// The identity of a reduction, which a rank contributes for a tensor it does not have (it joined).
#pragma once
#include <cstddef>
#include "common/types.h"

namespace phv {

// Fills buf with the identity of op: 0 for SUM/AVERAGE and ADASUM (a zero vector leaves Adasum's other
// operand as it is), 1 for PRODUCT, the largest value for MIN (+inf for floats), the lowest for MAX
// (-inf for floats).
void fill_identity(void* buf, size_t count, DataType dt, ReduceOp op);

}  // namespace phv
