"""Who am I and where is everybody: rank discovery from the environment, and the job topology.

Terms (as in Horovod): rank/size over the whole job; local_rank/local_size among the processes of one
host; cross_rank/cross_size among the processes that share my local_rank (one per host when every host
runs the same number of processes).

Discovery order (docs/launching.md); the first source whose variables are set wins and is logged at
debug level on the "pyhorovod" logger:

    1. pyhorovod  PYHOROVOD_RANK, PYHOROVOD_SIZE [, PYHOROVOD_LOCAL_RANK/LOCAL_SIZE/CROSS_RANK/CROSS_SIZE]
    2. horovod    HOROVOD_RANK, HOROVOD_SIZE [, HOROVOD_LOCAL_RANK/LOCAL_SIZE/CROSS_RANK/CROSS_SIZE]
    3. torchrun   RANK, WORLD_SIZE [, LOCAL_RANK, LOCAL_WORLD_SIZE]       (store at MASTER_ADDR)
    4. openmpi    OMPI_COMM_WORLD_RANK, _SIZE [, _LOCAL_RANK, _LOCAL_SIZE]
    5. pmi        PMI_RANK, PMI_SIZE [, MPI_LOCALRANKID, MPI_LOCALNRANKS]  (MPICH / Intel MPI hydra)
    6. slurm      SLURM_PROCID, SLURM_NTASKS [, SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE + SLURM_NODEID],
                  only inside a job step (SLURM_STEP_ID set: a batch script itself is not a step)
    7. single     rank 0 of 1

Whatever a source does not give (local and cross values) is derived after the rendezvous: every rank
publishes (hostname, local_rank or None) in the store and all compute the same answer
(derive_topology). The hostname is PYHOROVOD_HOSTNAME / HOROVOD_HOSTNAME if set, else gethostname().
"""
import dataclasses
import json
import logging
import re
import socket
from typing import List, Mapping, Optional, Sequence, Tuple

from pyhorovod._env_values import get_int, get_str

log = logging.getLogger("pyhorovod")


@dataclasses.dataclass
class RankInfo:
    rank: int
    size: int
    local_rank: Optional[int] = None
    local_size: Optional[int] = None
    cross_rank: Optional[int] = None
    cross_size: Optional[int] = None
    source: str = "single"
    homogeneous: Optional[bool] = None  # every host runs the same number of ranks

    def is_complete(self) -> bool:
        return None not in (self.local_rank, self.local_size, self.cross_rank, self.cross_size)


# name -> variables for (rank, size, local_rank, local_size, cross_rank, cross_size); None: not given.
_SOURCES = [
    ("pyhorovod", ("PYHOROVOD_RANK", "PYHOROVOD_SIZE", "PYHOROVOD_LOCAL_RANK", "PYHOROVOD_LOCAL_SIZE",
                   "PYHOROVOD_CROSS_RANK", "PYHOROVOD_CROSS_SIZE")),
    ("horovod", ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                 "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE")),
    ("torchrun", ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", None, None)),
    ("openmpi", ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE", None, None)),
    ("pmi", ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", None, None)),
    ("slurm", ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", None, None, None)),
]
# Our own and Horovod's variables are explicit: half of a pair is a mistake worth an error. The others
# are generic names (RANK alone may mean anything), so an incomplete pair just skips the source.
_STRICT = {"pyhorovod", "horovod"}


def parse_tasks_per_node(text: str) -> List[int]:
    """Expands Slurm's compressed SLURM_STEP_TASKS_PER_NODE, e.g. "2(x3),1" -> [2, 2, 2, 1]."""
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise ValueError(f"environment variable SLURM_STEP_TASKS_PER_NODE={text!r} is not in Slurm's "
                             f"'N(xK),M' format")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def _read_source(name: str, names: Sequence[Optional[str]], env: Mapping[str, str]) -> Optional[RankInfo]:
    rank_var, size_var = names[0], names[1]
    if name == "slurm":
        if get_str(env, "SLURM_STEP_ID") is None:
            return None
        if get_str(env, size_var) is None:
            size_var = "SLURM_STEP_NUM_TASKS"
    have_rank, have_size = get_str(env, rank_var) is not None, get_str(env, size_var) is not None
    if not (have_rank or have_size):
        return None
    if not (have_rank and have_size):
        if name in _STRICT:
            missing = size_var if have_rank else rank_var
            raise ValueError(f"environment variable {missing} must be set together with "
                             f"{rank_var if have_rank else size_var}")
        return None
    vals = [get_int(env, v, minimum=0) if v else None for v in names]
    vals[1] = get_int(env, size_var, minimum=1)
    info = RankInfo(*vals, source=name)
    if name == "slurm":
        info.local_size = _slurm_local_size(env)
    _validate(info, names)
    return info


def _slurm_local_size(env: Mapping[str, str]) -> Optional[int]:
    per_node = get_str(env, "SLURM_STEP_TASKS_PER_NODE")
    node = get_int(env, "SLURM_NODEID", minimum=0)
    if per_node is None or node is None:
        return None
    counts = parse_tasks_per_node(per_node)
    if node >= len(counts):
        raise ValueError(f"SLURM_NODEID={node} is outside SLURM_STEP_TASKS_PER_NODE={per_node!r}")
    return counts[node]


def _validate(info: RankInfo, names: Sequence[Optional[str]]) -> None:
    pairs = [(info.rank, info.size, names[0], names[1]),
             (info.local_rank, info.local_size, names[2], names[3]),
             (info.cross_rank, info.cross_size, names[4], names[5])]
    for r, s, rv, sv in pairs:
        if r is not None and s is not None and not r < s:
            raise ValueError(f"environment: {rv}={r} must be < {sv or 'the size'}={s}")
    if info.local_size is not None and info.local_size > info.size:
        raise ValueError(f"environment: {names[3] or 'local size'}={info.local_size} exceeds "
                         f"{names[1]}={info.size}")
    if info.local_rank is not None and info.local_rank >= info.size:
        raise ValueError(f"environment: {names[2]}={info.local_rank} must be < {names[1]}={info.size}")


def discover(env: Mapping[str, str]) -> RankInfo:
    """Rank and size from the first source in the discovery order; local/cross values as far as given."""
    for name, names in _SOURCES:
        info = _read_source(name, names, env)
        if info is not None:
            log.debug("pyhorovod: rank %d of %d from %s variables", info.rank, info.size, name)
            return _fill_trivial(info)
    log.debug("pyhorovod: no rank variables set; running as a single process")
    return _fill_trivial(RankInfo(0, 1, source="single"))


def _fill_trivial(info: RankInfo) -> RankInfo:
    """What follows without talking to anybody: one process, or all ranks on this host."""
    if info.size == 1:
        return dataclasses.replace(info, local_rank=0, local_size=1, cross_rank=0, cross_size=1,
                                   homogeneous=True)
    if info.local_size == info.size and info.local_rank is not None:
        return dataclasses.replace(info, cross_rank=0, cross_size=1, homogeneous=True)
    return info


def hostname(configured: Optional[str]) -> str:
    return configured or socket.gethostname()


def derive_topology(rank: int, entries: Sequence[Tuple[str, Optional[int]]], given: RankInfo) -> RankInfo:
    """Completes `given` from every rank's (hostname, local_rank or None), listed in rank order.

    Hosts group the ranks; without a given local_rank, a rank's local_rank is its position among the
    ranks of its host (ascending). The cross group of rank r is every rank with r's local_rank, ascending.
    Values that the environment gave are kept.
    """
    size = len(entries)
    hosts = [h for h, _ in entries]
    local_ranks = []
    for r, (host, given_lr) in enumerate(entries):
        local_ranks.append(given_lr if given_lr is not None else hosts[:r].count(host))
    my_host = hosts[rank]
    per_host = {h: hosts.count(h) for h in hosts}
    cross_group = [r for r in range(size) if local_ranks[r] == local_ranks[rank]]
    out = dataclasses.replace(given)
    if out.local_rank is None:
        out.local_rank = local_ranks[rank]
    if out.local_size is None:
        out.local_size = per_host[my_host]
    if out.cross_rank is None:
        out.cross_rank = cross_group.index(rank)
    if out.cross_size is None:
        out.cross_size = len(cross_group)
    out.homogeneous = len(set(per_host.values())) == 1
    return out


def exchange_topology(info: RankInfo, store, prefix: str, host: str, timeout_s: float) -> RankInfo:
    """Publishes (host, local_rank) under prefix and derives the missing values. Collective."""
    if info.is_complete() and info.homogeneous is not None:
        return info
    store.set(f"{prefix}/host/{info.rank}", json.dumps([host, info.local_rank]).encode())
    keys = [f"{prefix}/host/{r}" for r in range(info.size)]
    try:
        store.wait(keys, timeout_s)
    except Exception as e:
        from pyhorovod import _core
        if not isinstance(e, _core.TimeoutError_):
            raise
        # Name the ranks, not just the store keys, that never arrived.
        from pyhorovod.errors import HorovodTimeoutError
        try:
            missing = [r for r, key in enumerate(keys) if not store.check(key)]
        except Exception:  # noqa: BLE001 -- the store itself went away: the original text says enough
            missing = []
        who = f"ranks {missing} never arrived at the rendezvous" if missing else "the rendezvous did not complete"
        raise HorovodTimeoutError(f"rank {info.rank}: {who} within {timeout_s:g} s "
                                  f"(PYHOROVOD_CONNECT_TIMEOUT_SECONDS): {e}") from e
    entries = []
    for key in keys:
        h, lr = json.loads(bytes(store.get(key, timeout_s)).decode())
        entries.append((h, lr))
    return derive_topology(info.rank, entries, info)
