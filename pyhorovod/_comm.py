"""init(comm=...): a job made of some of the launched processes, and MPI communicators as rank lists.

`comm` is a list of ranks of the launched job (MPI_COMM_WORLD's numbering under mpirun) or an mpi4py
communicator. Its members form the job: rank = position in the list (for a communicator, its own rank),
size = its length; local and cross ranks are derived among the members. Processes that call init() with
disjoint lists form independent jobs side by side, as with Horovod.

Where the members meet:
- the launcher's store (`pyhorovod run`, or PYHOROVOD_STORE_ADDR): shared, with every key under a tag
  derived from the member list, so jobs of different member lists never see each other's keys;
- under mpirun without a store: the first member hosts one and sends its address over the communicator
  (a rank list becomes one with MPI_Comm_create_group, collective over the members only);
- under torchrun: the first member hosts the store on MASTER_PORT + 1 + its launched rank (one port per
  job of members).
"""
import hashlib
import json
from typing import List, Optional, Sequence

from pyhorovod._bootstrap import RankInfo


def is_mpi_comm(obj) -> bool:
    return hasattr(obj, "Get_group") and hasattr(obj, "Get_size")


def world_ranks_of(comm) -> List[int]:
    """The MPI_COMM_WORLD ranks of an mpi4py communicator's members, in the communicator's rank order."""
    from mpi4py import MPI
    group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        ranks = group.Translate_ranks(list(range(comm.Get_size())), world)
    finally:
        group.Free()
        world.Free()
    return [int(r) for r in ranks]


def job_ranks(comm, init_comm=None) -> List[int]:
    """The ranks, as a job made by init(comm=init_comm) numbers them, of an mpi4py communicator's
    members (ProcessSet(comm)); ValueError for a member outside that job."""
    world = world_ranks_of(comm)
    if init_comm is None:
        return world
    members = world_ranks_of(init_comm) if is_mpi_comm(init_comm) else [int(r) for r in init_comm]
    outside = [w for w in world if w not in members]
    if outside:
        raise ValueError(f"ProcessSet(comm): launched ranks {outside} of the communicator are not in this "
                         f"job (init(comm=...) took {members})")
    return [members.index(w) for w in world]


def members_of(comm, world_size: int) -> List[int]:
    """comm (a rank list or an mpi4py communicator) as a list of launched ranks; ValueError if invalid."""
    if is_mpi_comm(comm):
        members = world_ranks_of(comm)
    else:
        if isinstance(comm, (str, bytes)) or not hasattr(comm, "__iter__"):
            raise ValueError(f"init(comm=...): expected a list of ranks or an mpi4py communicator, got "
                             f"{type(comm).__name__}")
        members = []
        for r in comm:
            if isinstance(r, bool) or not isinstance(r, int):
                raise ValueError(f"init(comm=...): ranks must be integers, got {r!r}")
            members.append(int(r))
    if not members:
        raise ValueError("init(comm=...): the list of ranks is empty")
    if len(set(members)) != len(members):
        raise ValueError(f"init(comm={members}): a rank appears twice")
    bad = [r for r in members if not 0 <= r < world_size]
    if bad:
        raise ValueError(f"init(comm={members}): ranks {bad} are outside the {world_size} launched processes")
    return members


def restrict(info: RankInfo, members: Sequence[int]) -> RankInfo:
    """This process's place in the job of `members` (local and cross values to be derived)."""
    if info.rank not in members:
        raise ValueError(f"init(comm={list(members)}): this process (launched rank {info.rank}) is not one of "
                         f"the ranks; call init(comm=...) only on the members")
    return RankInfo(rank=list(members).index(info.rank), size=len(members), source=info.source)


def tag(members: Optional[Sequence[int]]) -> str:
    """The store-key prefix of a job of `members` ("" for the whole launched job)."""
    if members is None:
        return ""
    return "c" + hashlib.sha256(",".join(map(str, members)).encode()).hexdigest()[:12] + "/"


def mpi_comm_for(comm, members: Sequence[int]):
    """The mpi4py communicator over which a job of `members` shares its store address under mpirun."""
    if is_mpi_comm(comm):
        return comm
    from mpi4py import MPI
    world = MPI.COMM_WORLD.Get_group()
    group = world.Incl(list(members))
    try:
        return MPI.COMM_WORLD.Create_group(group)
    finally:
        group.Free()
        world.Free()


_SETS_BUF = 1 << 16  # bytes per rank of the set-list exchange: JSON, never pickle


def union_of_sets(local: Sequence[List[int]], init_comm, world_size: int) -> List[List[int]]:
    """Every rank's list of static process sets, merged in rank order (first appearance wins), so that
    all ranks register the same sets even when each passed only the sets of its own communicators
    (Horovod's ProcessSet(MPI_Comm_split(...)) pattern). Collective over the job's communicator."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD if init_comm is None else \
        mpi_comm_for(init_comm, members_of(init_comm, world_size))
    data = json.dumps([list(map(int, ranks)) for ranks in local]).encode()
    if len(data) > _SETS_BUF:
        raise ValueError(f"init(process_sets=...): {len(local)} process sets do not fit the exchange buffer")
    send = bytearray(_SETS_BUF)
    send[:len(data)] = data
    recv = bytearray(_SETS_BUF * comm.Get_size())
    comm.Allgather([send, MPI.BYTE], [recv, MPI.BYTE])
    merged: List[List[int]] = []
    for r in range(comm.Get_size()):
        chunk = bytes(recv[r * _SETS_BUF:(r + 1) * _SETS_BUF]).rstrip(b"\0")
        for ranks in json.loads(chunk.decode()):
            if ranks not in merged:
                merged.append(ranks)
    return merged
