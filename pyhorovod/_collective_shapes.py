"""Shape rules that every front (numpy, CUDA arrays) applies the same way before a request is made."""
import operator
from typing import List

import numpy as np


def at_least_1d(shape, what: str) -> None:
    if len(shape) == 0:
        raise ValueError(f"{what}: needs at least one dimension (got a scalar)")


def check_splits(splits, rows: int, n: int) -> List[int]:
    """The alltoall splits as a list of ints ([] for an equal split: splits None, rows divisible by n)."""
    if splits is None:
        if rows % n:
            raise ValueError(f"alltoall: without splits the first dimension ({rows}) must divide "
                             f"evenly among {n} ranks")
        return []
    if type(splits) in (list, tuple) and set(map(type, splits)) <= {int}:
        values = list(splits)  # the common case, without numpy's conversion (1 us of a 6 us call)
    else:
        try:
            values = [operator.index(s) for s in np.asarray(splits).ravel().tolist()]
        except TypeError:
            raise ValueError(f"alltoall: splits must be integers, got {splits!r}") from None
    check_split_values(values, rows, n)
    return values


def check_split_values(values: List[int], rows: int, n: int) -> None:
    """Integer splits of `rows` rows among a set of n ranks: one per rank, none negative, adding up."""
    if len(values) != n:
        raise ValueError(f"alltoall: {len(values)} splits given for a process set of size {n}")
    if values and min(values) < 0:
        raise ValueError(f"alltoall: splits must be non-negative, got {values}")
    if sum(values) != rows:
        raise ValueError(f"alltoall: splits add up to {sum(values)} but the first dimension is {rows}")


def reducescatter_shape(shape, set_ranks, me: int):
    """This rank's block of a reducescatter: dim0 // n rows, one more for the first dim0 % n set ranks."""
    n, index = len(set_ranks), set_ranks.index(me)
    rows = shape[0] // n + (1 if index < shape[0] % n else 0)
    return (rows,) + tuple(shape[1:])
