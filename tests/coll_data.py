"""Inputs and exact expected results for the collective tests (no communication here).

Every rank can build every other rank's input (a pure function of rank, count, dtype, op), so each rank
checks its own result against the reduction computed locally. Inputs are small integers, so sums,
products, minima and maxima are exact in every dtype, float16 and bfloat16 included; only Average over
floats rounds (compared with a tolerance of about one unit in the last place). Integer Average is the
sum divided by size, truncated toward zero (for these sizes the same as trunc(sum * (1/size)) in double);
other integer scaling multiplies in double and truncates (scale_buffer, csrc/common/reduce.h).

bfloat16 has no numpy dtype here: its arrays are uint16 bit patterns passed with dtype="bfloat16". One
float16 variant takes the same path (uint16 bits, dtype="float16") to test the explicit-dtype route.
"""
import dataclasses
from typing import Optional

import numpy as np

SUM, AVERAGE, MIN, MAX, PRODUCT = "Sum", "Average", "Min", "Max", "Product"
OPS = [SUM, AVERAGE, MIN, MAX, PRODUCT]
# 0, 1, primes, 2^k +- 1; the multi-segment count is added by the tests.
COUNTS = [0, 1, 2, 3, 5, 7, 13, 15, 17, 31, 33, 63, 65, 127, 257, 1021, 1023, 1025, 4097]


# rank_values() is periodic in the element index with a period dividing 420 = lcm(2, 3, 4, 5, 7).
PERIOD = 420


@dataclasses.dataclass(frozen=True)
class DType:
    name: str                   # the core's name for it
    np_dtype: Optional[str]     # numpy dtype of the arrays we pass (uint16 bits for the explicit variants)
    explicit: bool = False      # pass dtype=name

    @property
    def signed(self):
        return self.name not in ("uint8", "bool")

    @property
    def is_float(self):
        return self.name in ("float16", "bfloat16", "float32", "float64")

    def kwargs(self):
        return {"dtype": self.name} if self.explicit else {}

    def make(self, values: np.ndarray) -> np.ndarray:
        """values: float64 or bool array of exactly representable numbers -> the array we pass."""
        if self.name == "bfloat16":
            return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        if self.explicit:  # float16 bits in uint16
            return values.astype(np.float16).view(np.uint16)
        return values.astype(self.np_dtype)

    def values(self, arr: np.ndarray) -> np.ndarray:
        """The inverse of make(): float64 (or bool) values of an array we got back."""
        arr = np.asarray(arr)
        if self.name == "bfloat16":
            return (arr.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        if self.explicit:
            return arr.view(np.float16).astype(np.float64)
        return arr if self.name == "bool" else arr.astype(np.float64)

    def rtol(self):
        return {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-6, "float64": 1e-12}.get(self.name, 0.0)


DTYPES = [DType("uint8", "uint8"), DType("int8", "int8"), DType("int16", "int16"), DType("int32", "int32"),
          DType("int64", "int64"), DType("float16", "float16"), DType("bfloat16", "uint16", True),
          DType("float32", "float32"), DType("float64", "float64"), DType("bool", "bool"),
          DType("float16", "uint16", True)]


def ops_for(dt: DType):
    return [op for op in OPS if not (dt.name == "bool" and op == AVERAGE)]


def rank_values(rank: int, count: int, dt: DType, op: str, seed: int = 0) -> np.ndarray:
    """Rank `rank`'s input values (float64, or bool for bool)."""
    i = np.arange(count, dtype=np.int64) + seed
    if dt.name == "bool":
        return ((i * 3 + rank) % (2 if op in (MIN, PRODUCT) else 3)) != 0
    if op == PRODUCT:  # magnitudes 1 or 2: at most 2^5 = 32 over five ranks
        table = np.array([1.0, 2.0, -1.0]) if dt.signed else np.array([1.0, 2.0])
        return table[(i + rank) % len(table)]
    if op in (MIN, MAX):
        v = ((i * 5 + rank * 11) % 7).astype(np.float64)
        return v - 3 if dt.signed else v
    v = ((i * 7 + rank * 3) % 5).astype(np.float64)  # 0..4: sums up to 20 fit int8
    return v - 2 if dt.signed else v


def expected(size: int, count: int, dt: DType, op: str, seed: int = 0, prescale: float = 1.0,
             postscale: float = 1.0) -> np.ndarray:
    """The reduction over ranks 0..size-1, as values (float64/bool), as the core computes it."""
    if count > 2 * PERIOD:  # every input is periodic in the element index: reduce one period, repeat
        return np.resize(expected(size, PERIOD, dt, op, seed, prescale, postscale), count)
    stack = np.stack([rank_values(r, count, dt, op, seed) for r in range(size)]) if count else \
        np.zeros((size, 0), dtype=bool if dt.name == "bool" else np.float64)
    if dt.name == "bool":
        return stack.any(axis=0) if op in (SUM, MAX) else stack.all(axis=0)
    if not dt.is_float:
        stack = np.trunc(stack * prescale)
    else:
        stack = stack * prescale
    red = {SUM: np.sum, AVERAGE: np.sum, MIN: np.min, MAX: np.max, PRODUCT: np.prod}[op](stack, axis=0)
    factor = postscale * (1.0 / size if op == AVERAGE else 1.0)
    if factor != 1.0:
        red = red * factor
        if not dt.is_float:
            red = np.trunc(red)
    return red


def check(got, want: np.ndarray, dt: DType, what: str, exact: bool = True) -> None:
    """exact=False allows ~1 ulp of dt (Average over floats: the scaling rounds)."""
    values = dt.values(got)
    if values.shape != want.shape:
        raise AssertionError(f"{what}: shape {values.shape}, expected {want.shape}")
    if not exact and dt.is_float:
        ok = np.allclose(values, want, rtol=dt.rtol(), atol=0)
    else:
        ok = np.array_equal(values, want)
    if not ok:
        bad = np.flatnonzero(values.ravel() != want.ravel())[:5]
        raise AssertionError(f"{what}: wrong at {bad.tolist()}: got {values.ravel()[bad].tolist()}, "
                             f"expected {want.ravel()[bad].tolist()}")
