"""Object and index collectives on numpy arrays, for the framework-free elastic states.

broadcast_object: rank 0's picklable object (cloudpickle, as pyhorovod.torch.broadcast_object) to every
rank: first its pickled length, then the bytes. gather_indices: every rank's list of integers, concatenated
in rank order (one int64 allgather; the ranks' lengths may differ).

Names: "elastic.obj.<n>" and "elastic.idx.<n>", n counting this engine's calls. Every rank makes the same
calls in the same order (they are collective), and every rank restarts the count at a new engine, so a
worker that joins at a reset agrees with the survivors.
"""
from typing import Any, Iterable, List

import cloudpickle
import numpy as np

from pyhorovod import basics

_calls = {"obj": 0, "idx": 0}


def _reset_counts():
    for kind in _calls:
        _calls[kind] = 0


basics.on_shutdown(_reset_counts)


def _name(kind: str) -> str:
    _calls[kind] += 1
    return f"elastic.{kind}.{_calls[kind]}"


def broadcast_object(obj: Any, root_rank: int = 0, name: str = None) -> Any:
    """The root's object on every rank (the root gets `obj` itself, the others an unpickled copy)."""
    from pyhorovod import _numpy_ops
    name = name or _name("obj")
    is_root = basics.rank() == root_rank
    payload = np.frombuffer(cloudpickle.dumps(obj), dtype=np.uint8).copy() if is_root else None
    length = np.array([payload.size if is_root else 0], dtype=np.int64)
    _numpy_ops.broadcast_(length, root_rank, name=f"{name}.len")
    if payload is None:
        payload = np.empty(int(length[0]), dtype=np.uint8)
    if payload.size:
        _numpy_ops.broadcast_(payload, root_rank, name=f"{name}.data")
    return obj if is_root else cloudpickle.loads(payload.tobytes())


def gather_indices(indices: Iterable[int]) -> List[int]:
    """Every rank's integers, in rank order."""
    from pyhorovod import _numpy_ops
    mine = np.fromiter(indices, dtype=np.int64)
    return _numpy_ops.allgather(mine, name=_name("idx")).tolist()
