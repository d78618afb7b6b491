"""Process sets: subsets of the ranks that run collectives among themselves (horovod.common.process_sets).

A ProcessSet is registered either statically, `pyhorovod.init(process_sets=[...])` (ids 1, 2, ... in list
order, the same list on every rank), or dynamically with add_process_set() when
HOROVOD_DYNAMIC_PROCESS_SETS=1 (collective over all ranks). The global set, id 0, is every rank.
Ranks inside a set (broadcast's root_rank, ps.rank()) count from 0 in ascending global-rank order.
"""
from typing import List, Optional, Sequence

from pyhorovod import basics
from pyhorovod.errors import translated


class ProcessSet:
    def __init__(self, ranks: Sequence[int]):
        if hasattr(ranks, "Get_size"):
            raise ValueError("ProcessSet from an MPI communicator is not supported; pass a list of ranks")
        ranks = [int(r) for r in ranks]
        if len(set(ranks)) != len(ranks) or any(r < 0 for r in ranks):
            raise ValueError(f"ProcessSet ranks must be distinct non-negative integers, got {ranks}")
        self.ranks: List[int] = sorted(ranks)
        self.process_set_id: Optional[int] = None

    def _invalidate(self):
        self.process_set_id = None

    def size(self) -> Optional[int]:
        return None if self.process_set_id is None else len(self.ranks)

    def rank(self) -> Optional[int]:
        """This process's rank inside the set; -1 if not a member; None if not registered."""
        if self.process_set_id is None:
            return None
        me = basics.rank()
        return self.ranks.index(me) if me in self.ranks else -1

    def included(self) -> Optional[bool]:
        if self.process_set_id is None:
            return None
        return basics.rank() in self.ranks

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0
_registered: List[ProcessSet] = []


def _on_engine_start():
    global_process_set.ranks = list(range(basics.size()))
    global_process_set.process_set_id = 0


def _on_init(static_sets: Sequence[ProcessSet]):
    """Gives the static sets passed to init() their ids (the engine registered them in this order)."""
    for i, ps in enumerate(static_sets, start=1):
        ps.process_set_id = i
        _registered.append(ps)


def _on_shutdown():
    for ps in _registered:
        ps._invalidate()
    _registered.clear()


basics.on_init(_on_engine_start)
basics.on_shutdown(_on_shutdown)
basics.on_fork_child(_on_shutdown)


def as_process_sets(items) -> List[ProcessSet]:
    return [p if isinstance(p, ProcessSet) else ProcessSet(p) for p in (items or [])]


def add_process_set(process_set) -> ProcessSet:
    """Registers a set (a ProcessSet or a list of ranks); collective over all ranks."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError(f"{ps} is already registered")
    n = basics.size()
    if not ps.ranks or ps.ranks[-1] >= n:
        raise ValueError(f"ProcessSet ranks {ps.ranks} must be a non-empty subset of 0..{n - 1}")
    with translated():
        ps.process_set_id = basics.engine().add_process_set(ps.ranks)
    _registered.append(ps)
    return ps


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregisters a set added by add_process_set; collective over all ranks. False if not registered."""
    if process_set.process_set_id in (None, 0):
        return False
    with translated():
        basics.engine().remove_process_set(process_set.process_set_id)
    process_set._invalidate()
    if process_set in _registered:
        _registered.remove(process_set)
    return True


def resolve(process_set) -> ProcessSet:
    """The registered set an op runs on; ValueError unless this rank is a member."""
    if process_set is None:
        process_set = global_process_set
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"process_set must be a ProcessSet, got {type(process_set).__name__}")
    if process_set.process_set_id is None:
        raise ValueError(f"{process_set} is not registered (add_process_set or init(process_sets=...))")
    if process_set.process_set_id != 0 and basics.rank() not in process_set.ranks:
        raise ValueError(f"rank {basics.rank()} is not a member of {process_set}")
    return process_set
