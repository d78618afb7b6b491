"""Process sets: subsets of the ranks that run collectives among themselves (horovod.common.process_sets).

A ProcessSet is registered either statically, `pyhorovod.init(process_sets=[...])` (ids 1, 2, ... in list
order, the same list on every rank), or dynamically with add_process_set() when
HOROVOD_DYNAMIC_PROCESS_SETS=1 (collective over all ranks). The global set, id 0, is every rank.
ps.rank() counts from 0 in ascending global-rank order; root_rank arguments are global ranks (as Horovod).
"""
from typing import List, Optional, Sequence, Union

from pyhorovod import _comm, basics
from pyhorovod.errors import translated


class ProcessSet:
    """A subset of the job's ranks that runs collectives among themselves (``process_set=``).

    A set is usable once registered: passed to ``init(process_sets=[...])`` (the same list on every
    rank, ids 1, 2, ... in order), or added later with :func:`add_process_set` when dynamic sets are
    on. Ranks inside the set count from 0 in ascending global-rank order, but ``root_rank`` arguments
    stay global ranks, as in Horovod.

    Args:
        ranks: the job's ranks that form the set, or an mpi4py communicator (its members, mapped
            through the communicator the job was made of: ``MPI_COMM_WORLD`` or ``init(comm=...)``'s).

    Attributes:
        ranks: the member ranks, sorted.
        process_set_id: the id while registered (0 for the global set), else None.

    Raises:
        ValueError: ranks that repeat or are negative.
    """

    def __init__(self, ranks: Sequence[int]):
        self._comm = None
        if _comm.is_mpi_comm(ranks):
            self._comm = ranks
            ranks = _comm.job_ranks(ranks, basics.init_comm()) if basics.is_initialized() else \
                _comm.world_ranks_of(ranks)
        ranks = [int(r) for r in ranks]
        if len(set(ranks)) != len(ranks) or any(r < 0 for r in ranks):
            raise ValueError(f"ProcessSet ranks must be distinct non-negative integers, got {ranks}")
        self.ranks: List[int] = sorted(ranks)
        self.process_set_id: Optional[int] = None

    def _invalidate(self):
        self.process_set_id = None

    def size(self) -> Optional[int]:
        """The number of ranks in the set; None while the set is not registered."""
        return None if self.process_set_id is None else len(self.ranks)

    def rank(self) -> Optional[int]:
        """This process's rank inside the set; -1 if not a member; None if not registered."""
        if self.process_set_id is None:
            return None
        me = basics.rank()
        return self.ranks.index(me) if me in self.ranks else -1

    def included(self) -> Optional[bool]:
        """Whether this process is a member; None while the set is not registered."""
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


def _bind_to_job(static_sets: Sequence[ProcessSet], init_comm, world_size: int) -> List[ProcessSet]:
    """Before init(comm=init_comm) registers them: sets made from a communicator get the job's ranks,
    and since each rank may hold only its own communicators' sets, the ranks merge their lists (every
    rank must register the same sets). Returns the list to register; the caller's objects are in it."""
    if all(ps._comm is None for ps in static_sets):
        return list(static_sets)
    for ps in static_sets:
        if ps._comm is not None:
            ps.ranks = sorted(_comm.job_ranks(ps._comm, init_comm))
    merged = _comm.union_of_sets([ps.ranks for ps in static_sets], init_comm, world_size)
    mine = {tuple(ps.ranks): ps for ps in reversed(static_sets)}
    return [mine.get(tuple(ranks)) or ProcessSet(ranks) for ranks in merged]


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


def add_process_set(process_set: Union[ProcessSet, Sequence[int]]) -> ProcessSet:
    """Registers a process set after :func:`init`; every rank of the job must call it, in the same order.

    Needs dynamic process sets: ``init(process_sets="dynamic")`` or ``HOROVOD_DYNAMIC_PROCESS_SETS=1``.

    Args:
        process_set: a :class:`ProcessSet`, or a list of ranks.

    Returns:
        The registered :class:`ProcessSet` (the one passed in, when it was one).

    Raises:
        ValueError: the set is already registered, empty, names a rank beyond the job, or dynamic
            process sets are off.
    """
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
    """Unregisters a process set added by :func:`add_process_set`; every rank of the job must call it.

    Returns:
        True when the set was removed; False when it was not registered (or is the global set).
    """
    if process_set.process_set_id in (None, 0):
        return False
    with translated():
        basics.engine().remove_process_set(process_set.process_set_id)
    process_set._invalidate()
    if process_set in _registered:
        _registered.remove(process_set)
    return True


def resolve(process_set) -> ProcessSet:
    """The registered set an op runs on; ValueError unless pyhorovod is initialized (so that no check of an
    argument against the set's ranks speaks before that does) and this rank is a member."""
    basics.engine()
    if process_set is None:
        process_set = global_process_set
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"process_set must be a ProcessSet, got {type(process_set).__name__}")
    if process_set.process_set_id is None:
        raise ValueError(f"{process_set} is not registered (add_process_set or init(process_sets=...))")
    if process_set.process_set_id != 0 and basics.rank() not in process_set.ranks:
        raise ValueError(f"rank {basics.rank()} is not a member of {process_set}")
    return process_set
