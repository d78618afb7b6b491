"""The per-process state: at most one Engine, created by init() and torn down by shutdown().

init() twice is harmless (the second call returns at once); shutdown() then init() starts a fresh
Engine. Each init of a process is a "generation": ranks call init/shutdown in the same order, so the
generation number namespaces the store keys (a second init never sees the first one's keys). The
rendezvous (and the store that rank 0 may host) lives for the whole process, so a re-init under mpirun
or torchrun needs no new broadcast or port. shutdown() is also registered with atexit.

os.fork() of an initialized process: the child gets copies of the engine's sockets and shared memory but
not its threads, so it must never use them (a message it sent would corrupt the parent's stream) and never
run the engine's shutdown (which waits for the missing thread, then closes what the parent still uses).
_forget_after_fork() runs in the child: it abandons the engine and the hosted store without calling into
them (they are leaked, see _leak) and closes its own copies of their sockets (so that the peers still see
the parent's connections close when the parent dies), so the child is not initialized, exits at once, and
its collectives raise ValueError. rank()/size()/... keep answering with the parent's values (a DataLoader worker may
shard its data by them). init() in the child may start a new job, but not rejoin the parent's.
"""
import atexit
import ctypes
import logging
import os
import stat
import threading
import time
from typing import Callable, Dict, List, Optional

from pyhorovod import _bootstrap, _comm, _inert_env, _logging, _rendezvous
from pyhorovod._config import Config
from pyhorovod.elastic import _membership
from pyhorovod.errors import HorovodInternalError, translated

log = logging.getLogger("pyhorovod")
_RETRY_PAUSE_S = 0.2   # between failed elastic inits: no busy loop while the store is unreachable


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
        self.fork_hooks: List[Callable[[], None]] = []
        self.job: Optional[tuple] = None   # _job_membership of the live engine
        self.sockets: set = set()          # _open_sockets() that init() opened (store, mesh, store server)
        # Set in a child forked from an initialized process: the parent's pid (until the child's own
        # init()) and the parent's job membership (the job the child must not join).
        self.forked_from: Optional[int] = None
        self.parent_job: Optional[tuple] = None


_state = _State()

NOT_INITIALIZED = "pyhorovod is not initialized: call pyhorovod.init() first."
# Variables that say where a job meets: two processes with the same rank, size and these are one rank.
_JOB_VARIABLES = ("PYHOROVOD_STORE_ADDR", "PYHOROVOD_STORE_PORT", "HOROVOD_GLOO_RENDEZVOUS_ADDR",
                  "HOROVOD_GLOO_RENDEZVOUS_PORT", "MASTER_ADDR", "MASTER_PORT")


def _job_membership(info: _bootstrap.RankInfo, env) -> tuple:
    return (info.rank, info.size) + tuple(env.get(name) for name in _JOB_VARIABLES)


def _not_initialized_message() -> str:
    if _state.forked_from is None:
        return NOT_INITIALIZED
    return (f"pyhorovod is not initialized in this process (pid {os.getpid()}): it was forked from pid "
            f"{_state.forked_from}, which is initialized, and the engine does not survive a fork. Run "
            f"collectives in the parent, or call pyhorovod.init() here with the rank variables of a new job.")


def init(process_sets=None, env=None, dynamic_process_sets=False, comm=None) -> None:
    """Joins the job: discovers rank and size, meets the other ranks at the store, starts the engine.

    process_sets: a list of rank lists (or objects with .ranks) registered as static process sets with ids
    1, 2, ... in that order, the same on every rank. dynamic_process_sets: allow add_process_set() (as
    HOROVOD_DYNAMIC_PROCESS_SETS=1). comm: the launched ranks (a list, or an mpi4py communicator) that
    form the job (pyhorovod/_comm.py). env: a mapping that replaces os.environ (tests).

    In a worker of the elastic driver a generation that fails to form (a member died or was cut off
    while the engines connected) is not the end: the worker asks for its place in the next one, for at
    most the elastic timeout from the first failure. This holds for the first init() too, so a worker
    that joins while another fails is not lost with it.
    """
    env = os.environ if env is None else env
    if comm is not None or not _membership.is_elastic(env):
        _init_once(process_sets, env, dynamic_process_sets, comm)
        return
    first_failure = None
    while True:
        try:
            _init_once(process_sets, env, dynamic_process_sets, None)
            return
        except HorovodInternalError as e:
            now = time.monotonic()
            first_failure = now if first_failure is None else first_failure
            limit_s = _membership.wait_timeout_s(env)
            if now - first_failure > limit_s:
                raise HorovodInternalError(
                    f"elastic init: the generation kept failing to form for {limit_s:g} s "
                    f"({_membership.TIMEOUT_ENV}); last error: {e}") from e
            first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
            log.warning("pyhorovod elastic: the generation failed to form (%s); asking for the next one",
                        first_line)
            time.sleep(_RETRY_PAUSE_S)


def _init_once(process_sets, env, dynamic_process_sets, comm) -> None:
    with _state.lock:
        if _state.engine is not None:
            return
        sockets_before = _open_sockets()
        config = Config.from_env(env)
        _logging.set_up(env)
        _logging.attach_stderr()
        config.dynamic_process_sets = config.dynamic_process_sets or dynamic_process_sets
        info = _bootstrap.discover(env)
        if _state.parent_job is not None and info.size > 1 and _job_membership(info, env) == _state.parent_job:
            raise ValueError(
                f"pyhorovod.init() in a process forked from rank {info.rank} of {info.size} (pid "
                f"{_state.forked_from}): its environment still names the parent's job, which the child "
                f"would join as a second rank {info.rank}. Give the child the rank variables of a new job "
                f"(or none, for a job of its own), or run the collectives in the parent.")
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
        gen_tag = f"{job}g{gen}"
        if comm is None and _membership.is_elastic(env):
            # The elastic driver gives this worker its place; its generation number names the keys.
            with translated():
                a = _membership.next_assignment(rdv.host, rdv.port, rdv.secret, config.connect_timeout_s, env)
            info = _bootstrap.RankInfo(a.rank, a.size, a.local_rank, a.local_size, a.cross_rank, a.cross_size,
                                       source="elastic", homogeneous=a.homogeneous)
            gen_tag = f"e{a.gen}"
        with translated():
            if not (info.is_complete() and info.homogeneous is not None):
                from pyhorovod import _core
                store = _core.TcpStore(rdv.host, rdv.port, rdv.secret, config.connect_timeout_s)
                info = _bootstrap.exchange_topology(info, store, f"pyhvd/{gen_tag}/topology",
                                                    _bootstrap.hostname(config.hostname),
                                                    config.connect_timeout_s)
            bind = _rendezvous.bind_address(info.local_size, info.size, config.iface, rdv.host, rdv.port)
            sets = [list(getattr(ps, "ranks", ps)) for ps in (process_sets or [])]
            opts = config.engine_options(
                rank=info.rank, size=info.size, local_rank=info.local_rank, local_size=info.local_size,
                cross_rank=info.cross_rank, cross_size=info.cross_size, store_host=rdv.host,
                store_port=rdv.port, secret=rdv.secret, bind_host=bind, store_prefix=f"phv/{gen_tag}",
                process_sets=sets)
            from pyhorovod import _core
            engine = _core.Engine(opts)
        _state.engine, _state.info, _state.config, _state.comm = engine, info, config, comm
        _state.job, _state.forked_from = _job_membership(info, env), None
        _state.sockets |= _open_sockets() - sockets_before
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
    """Leaves the job: stops the engine and closes its connections.

    Handles still pending fail with HorovodInternalError. Harmless when not initialized; a later
    :func:`init` starts afresh. Also runs at interpreter exit.
    """
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


def on_fork_child(hook: Callable[[], None]) -> None:
    """hook runs in a child forked from an initialized process, after the engine was abandoned: it drops
    the state that belonged to the parent's engine. It must not wait on locks the parent held (only the
    forking thread survives a fork): replace them."""
    _state.fork_hooks.append(hook)


# Objects of the parent's engine that a forked child must never destroy: their destructors join threads
# that do not exist in the child and close sockets and shared memory the parent still uses. Each gets one
# reference that is never released, so neither garbage collection nor interpreter exit frees it.
def _leak(obj) -> None:
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def _open_sockets() -> set:
    """(fd, st_dev, st_ino) of this process's open sockets (Linux; elsewhere empty). The inode tells a
    socket from a later one that reuses its number."""
    found = set()
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        try:
            st = os.fstat(int(name))
        except (OSError, ValueError):
            continue
        if stat.S_ISSOCK(st.st_mode):
            found.add((int(name), st.st_dev, st.st_ino))
    return found


def _close_inherited_sockets() -> None:
    # close() of a forked copy only drops the child's reference (shutdown(2) would cut the parent's).
    if not _state.sockets:
        return   # never initialized (e.g. the launcher's own forks): nothing to look at
    for fd, dev, ino in _state.sockets & _open_sockets():
        os.close(fd)
    _state.sockets = set()


def _forget_after_fork() -> None:
    # Runs in the forked child (os.register_at_fork), in its only thread.
    _state.lock = threading.RLock()   # another parent thread may have held it at the fork
    engine = _state.engine
    _close_inherited_sockets()
    for rdv in _state.rendezvous.values():
        if rdv.server is not None:
            _leak(rdv.server)   # a store this rank hosts: its thread stays in the parent
            rdv.server = None
    _state.rendezvous = {}   # a new job in the child finds its own store
    _state.generation = {}
    _state.parent_job = _state.job or _state.parent_job
    if engine is None:
        return
    _leak(engine)
    _state.engine = None
    _state.forked_from = os.getppid()
    for hook in list(_state.fork_hooks):
        hook()


os.register_at_fork(after_in_child=_forget_after_fork)


def is_initialized() -> bool:
    """True while this process has a live engine: False before init(), after shutdown(), and in a
    child forked from an initialized process (until the child's own init())."""
    return _state.engine is not None


def engine():
    """The live Engine; ValueError (as Horovod) when init() has not been called."""
    e = _state.engine
    if e is None:
        raise ValueError(_not_initialized_message())
    return e


def _info() -> _bootstrap.RankInfo:
    if _state.engine is None and _state.forked_from is None:
        raise ValueError(NOT_INITIALIZED)
    return _state.info


def rank() -> int:
    """This process's rank in the job: 0 to size() - 1.

    Raises:
        ValueError: before :func:`init` (a process forked from an initialized rank keeps its parent's
            answer, so that DataLoader workers can shard data by it).
    """
    return _info().rank


def size() -> int:
    """The number of ranks in the job. Raises ValueError before :func:`init`, as :func:`rank`."""
    return _info().size


def local_rank() -> int:
    """This process's rank among the ranks on its host: 0 to local_size() - 1 (e.g. its GPU index)."""
    return _info().local_rank


def local_size() -> int:
    """The number of ranks on this process's host."""
    return _info().local_size


def cross_rank() -> int:
    """The index of this process's host among the hosts that run a rank with its local rank."""
    return _info().cross_rank


def cross_size() -> int:
    """The number of ranks that have this process's local rank (one per host on a homogeneous job)."""
    return _info().cross_size


def is_homogeneous() -> bool:
    """True when every host runs the same number of ranks."""
    return bool(_info().homogeneous)


def rank_source() -> str:
    """Which launcher's variables gave this process its rank.

    Returns:
        One of ``"pyhorovod"``, ``"horovod"``, ``"torchrun"``, ``"openmpi"``, ``"pmi"``, ``"slurm"`` or
        ``"single"`` (no launcher: a job of one process). pyhorovod's own addition.
    """
    return _info().source


# Log lines name this rank; looked up per line, so that a replaced basics.rank is seen too.
_logging.rank_source = lambda: rank()
