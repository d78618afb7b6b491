"""The per-process state: at most one Engine, created by init() and torn down by shutdown().

init() twice is harmless (the second call returns at once); shutdown() then init() starts a fresh
Engine. Each init of a process is a "generation": ranks call init/shutdown in the same order, so the
generation number namespaces the store keys (a second init never sees the first one's keys). The
rendezvous (and the store that rank 0 may host) lives for the whole process, so a re-init under mpirun
or torchrun needs no new broadcast or port. shutdown() is also registered with atexit.
"""
import atexit
import logging
import os
import threading
from typing import Callable, Dict, List, Optional

from pyhorovod import _bootstrap, _comm, _inert_env, _rendezvous
from pyhorovod._config import Config
from pyhorovod.errors import translated

log = logging.getLogger("pyhorovod")


class _State:
    def __init__(self):
        self.lock = threading.RLock()
        self.engine = None
        self.info: Optional[_bootstrap.RankInfo] = None
        self.config: Optional[Config] = None
        # By job tag (pyhorovod/_comm.py: "" for the whole launched job): a rendezvous lives for the whole
        # process, and each job counts its own generations.
        self.rendezvous: Dict[str, _rendezvous.Rendezvous] = {}
        self.generation: Dict[str, int] = {}
        self.comm = None  # init(comm=...)'s argument: the launched ranks (or communicator) of this job
        self.atexit_registered = False
        self.shutdown_hooks: List[Callable[[], None]] = []
        self.init_hooks: List[Callable[[], None]] = []


_state = _State()

NOT_INITIALIZED = "pyhorovod has not been initialized; use pyhorovod.init()."


def init(process_sets=None, env=None, dynamic_process_sets=False, comm=None) -> None:
    """Joins the job: discovers rank and size, meets the other ranks at the store, starts the engine.

    process_sets: a list of rank lists (or objects with .ranks) registered as static process sets with ids
    1, 2, ... in that order, the same on every rank. dynamic_process_sets: allow add_process_set() (as
    HOROVOD_DYNAMIC_PROCESS_SETS=1). comm: the launched ranks (a list, or an mpi4py communicator) that
    form the job (pyhorovod/_comm.py). env: a mapping that replaces os.environ (tests).
    """
    with _state.lock:
        if _state.engine is not None:
            return
        env = os.environ if env is None else env
        config = Config.from_env(env)
        config.dynamic_process_sets = config.dynamic_process_sets or dynamic_process_sets
        info = _bootstrap.discover(env)
        members = None if comm is None else _comm.members_of(comm, info.size)
        job = _comm.tag(members)
        if members is not None:
            info = _comm.restrict(info, members)
        rdv = _state.rendezvous.get(job)
        if rdv is None:
            mpi_comm = None
            if members is not None and info.source in ("openmpi", "pmi") and not _rendezvous.has_store(env):
                mpi_comm = _comm.mpi_comm_for(comm, members)
            with translated():
                rdv = _state.rendezvous[job] = _rendezvous.locate(
                    info, config, env, mpi_comm=mpi_comm, port_offset=0 if members is None else members[0])
        gen = _state.generation.get(job, 0)
        _state.generation[job] = gen + 1
        with translated():
            if not (info.is_complete() and info.homogeneous is not None):
                from pyhorovod import _core
                store = _core.TcpStore(rdv.host, rdv.port, rdv.secret, config.connect_timeout_s)
                info = _bootstrap.exchange_topology(info, store, f"pyhvd/{job}g{gen}/topology",
                                                    _bootstrap.hostname(config.hostname),
                                                    config.connect_timeout_s)
            bind = _rendezvous.bind_address(info.local_size, info.size, config.iface, rdv.host, rdv.port)
            sets = [list(getattr(ps, "ranks", ps)) for ps in (process_sets or [])]
            opts = config.engine_options(
                rank=info.rank, size=info.size, local_rank=info.local_rank, local_size=info.local_size,
                cross_rank=info.cross_rank, cross_size=info.cross_size, store_host=rdv.host,
                store_port=rdv.port, secret=rdv.secret, bind_host=bind, store_prefix=f"phv/{job}g{gen}",
                process_sets=sets)
            from pyhorovod import _core
            engine = _core.Engine(opts)
        _state.engine, _state.info, _state.config, _state.comm = engine, info, config, comm
        if not _state.atexit_registered:
            atexit.register(_atexit_shutdown)
            _state.atexit_registered = True
        log.debug("pyhorovod: initialized rank %d/%d (local %d/%d, cross %d/%d) via %s, store %s:%d (%s)",
                  info.rank, info.size, info.local_rank, info.local_size, info.cross_rank, info.cross_size,
                  info.source, rdv.host, rdv.port, rdv.how)
        _inert_env.report_once(env, info.rank)
        for hook in list(_state.init_hooks):
            hook()


def shutdown() -> None:
    """Stops the engine (pending handles fail). Safe to call when not initialized."""
    with _state.lock:
        engine = _state.engine
        if engine is None:
            return
        try:
            with translated():
                engine.shutdown()
        finally:
            _state.engine = None
            # Only now, with the engine thread gone, may the buffers kept alive for it be released.
            for hook in list(_state.shutdown_hooks):
                hook()


def _atexit_shutdown():
    try:
        shutdown()
    except Exception as e:  # noqa: BLE001 -- at exit there is nobody left to raise to
        log.warning("pyhorovod: shutdown at exit failed: %s", e)
    for rdv in _state.rendezvous.values():
        rdv.close()


def on_shutdown(hook: Callable[[], None]) -> None:
    _state.shutdown_hooks.append(hook)


def on_init(hook: Callable[[], None]) -> None:
    _state.init_hooks.append(hook)


def launched_size(env=None) -> int:
    """The number of launched processes (before init(comm=...) picks some of them)."""
    return _bootstrap.discover(os.environ if env is None else env).size


def init_comm():
    """init()'s comm= argument (None: the whole launched job)."""
    return _state.comm


def is_initialized() -> bool:
    return _state.engine is not None


def engine():
    """The live Engine; ValueError (as Horovod) when init() has not been called."""
    e = _state.engine
    if e is None:
        raise ValueError(NOT_INITIALIZED)
    return e


def _info() -> _bootstrap.RankInfo:
    if _state.engine is None:
        raise ValueError(NOT_INITIALIZED)
    return _state.info


def rank() -> int:
    return _info().rank


def size() -> int:
    return _info().size


def local_rank() -> int:
    return _info().local_rank


def local_size() -> int:
    return _info().local_size


def cross_rank() -> int:
    return _info().cross_rank


def cross_size() -> int:
    return _info().cross_size


def is_homogeneous() -> bool:
    """True when every host runs the same number of ranks."""
    return bool(_info().homogeneous)


def rank_source() -> str:
    """Which environment the rank came from: pyhorovod, horovod, torchrun, openmpi, pmi, slurm, single."""
    return _info().source
