// Adasum's pairwise combination of two vectors (Maleki et al., 2020, "Scaling Distributed Training with
// Adaptive Summation"), for the float types:
//
//   adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b
//
// Orthogonal vectors add (a.b = 0), equal vectors average (a.b = |a|^2 = |b|^2), and in between the
// part the two have in common is counted once. "a.b" and the norms are those of whole tensors; the
// kernels below work on pieces of them so that an algorithm can sum partial dot products across ranks
// first. Dot products and norms accumulate in float64; the combination is computed in float64 and
// stored in the tensor's type (16-bit floats through float32, rounding to nearest even).
#pragma once
#include <cstddef>
#include "common/types.h"

namespace phv {

// Partial dot products of two pieces: mine.theirs, mine.mine, theirs.theirs.
struct AdasumDots {
  double ab = 0, aa = 0, bb = 0;
};

// True for the types Adasum is defined on: float16, bfloat16, float32, float64.
bool adasum_dtype(DataType dt);

// Adds the dot products of the n-element pieces `mine` and `theirs` to dots.
void adasum_dots(const void* mine, const void* theirs, size_t n, DataType dt, AdasumDots& dots);

// The coefficients (of a, of b) for whole-tensor dot products. A zero vector's coefficient is 1: its
// term is zero whatever the coefficient, and 0/0 must not turn the other term into NaN.
void adasum_coefficients(const AdasumDots& dots, double& coef_a, double& coef_b);

// dst[i] = c_dst * dst[i] + c_src * src[i] for i < n (dst and src must not overlap).
void adasum_combine_into(void* dst, const void* src, size_t n, DataType dt, double c_dst, double c_src);

}  // namespace phv
