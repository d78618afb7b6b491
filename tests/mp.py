"""Multi-process test harness: run one function (or script) in `size` fresh Python processes, as ranks.

    from mp import run_ranks, WORLD_SIZES

    def body(n):                       # module level, so a child can import it
        import pyhorovod as hvd
        hvd.init()
        ...
        return {"rank": hvd.rank()}    # optional, JSON-serialisable: comes back as RankResult.value

    @pytest.mark.parametrize("size", WORLD_SIZES)
    def test_something(size):
        results = run_ranks(body, size, args=(3,))

How a child finds the function: by module name and the directory of the module's file. The child runs
`python -c <bootstrap>` with that directory and the repository root first on sys.path, imports the module
by name (pytest imports test files the same way: rootdir-relative, no package), and calls
getattr(module, qualname)(*args) with args sent as JSON. So a target must be a module-level function of an
importable file, and args/return values must be JSON-serialisable. A string target "path/to/script.py"
is run as a script with args as argv; "module:function" names a function explicitly.

Each run hosts a fresh rendezvous store (_core.TcpStoreServer on 127.0.0.1, random secret) in this
process, and gives every rank PYHOROVOD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE/STORE_ADDR/STORE_PORT/SECRET
(launcher="pyhorovod"); launcher="torchrun" sets torchrun's variables instead (no store: rank 0 hosts one)
and launcher=None sets none. Inherited rank variables (OMPI_*, PMI_*, SLURM_*, RANK, ...) are removed.
`env` adds variables: a dict for all ranks, or a function rank -> dict.

Deadlines: the whole run is killed after `timeout` seconds (every rank's process group gets SIGKILL), and
once any rank has failed the others get `grace` seconds to finish. A failed run (check=True) raises an
AssertionError with every rank's exit code, stdout and stderr, so each rank's traceback is visible.
The ranks' collective deadline (PYHOROVOD_TIMEOUT_SECONDS) defaults to a fraction of `timeout`, so that a
hang surfaces as a HorovodTimeoutError traceback rather than a kill.
"""
import dataclasses
import inspect
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # the harness itself imports pyhorovod (the store), wherever it is started from
    sys.path.insert(0, ROOT)
WORLD_SIZES = [1, 2, 3, 4, 5]
# Who-am-I and where-to-meet variables a test must not inherit (knobs such as PYHOROVOD_SHM pass through).
_STRIP_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "SLURM_", "MPI_LOCAL", "TORCHELASTIC_")
_STRIP_NAMES = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                "MASTER_ADDR", "MASTER_PORT", "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT",
                "PYHOROVOD_STORE_ADDR", "PYHOROVOD_STORE_PORT", "PYHOROVOD_SECRET", "PYHOROVOD_SECRET_FILE",
                "PYHOROVOD_RESTART_COUNT"}
_STRIP_NAMES |= {f"{p}_{n}" for p in ("PYHOROVOD", "HOROVOD")
                 for n in ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "HOSTNAME")}

_CHILD = r"""
import faulthandler, importlib, json, os, sys
# Before the harness kills a hung rank, every thread's Python stack goes to stderr (shown on failure).
faulthandler.dump_traceback_later(float(os.environ.get("PYHVD_TEST_DUMP_AFTER", "3600")), exit=False)
sys.path[:0] = json.loads(sys.argv[1])
fn = importlib.import_module(sys.argv[2])
for part in sys.argv[3].split("."):
    fn = getattr(fn, part)
value = fn(*json.loads(sys.argv[4]))
with open(sys.argv[5], "w") as f:
    json.dump(value, f)
"""


@dataclasses.dataclass
class RankResult:
    rank: int
    returncode: Optional[int]  # None: killed by the harness (timeout or grace after another failure)
    stdout: str
    stderr: str
    value: Any = None
    killed: bool = False


class RankFailure(AssertionError):
    def __init__(self, message: str, results: List[RankResult]):
        super().__init__(message)
        self.results = results


def clean_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """os.environ without inherited rank/rendezvous variables, plus ROOT on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_STRIP_PREFIXES) and k not in _STRIP_NAMES}
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env.setdefault("OMP_NUM_THREADS", "1")  # ranks share 2 cores: no BLAS thread pools
    env.update(extra or {})
    return env


def connect_options_from_env(prefix: str = ""):
    """A rank's _core.ConnectOptions for a raw Communicator, from the variables run_ranks sets (rank,
    size, store, secret; every rank on this host), with keys under `prefix` and a 30 s connect timeout."""
    from pyhorovod import _core
    o = _core.ConnectOptions()
    o.rank = int(os.environ["PYHOROVOD_RANK"])
    o.size = int(os.environ["PYHOROVOD_SIZE"])
    o.local_rank, o.local_size = o.rank, o.size
    o.store_host = os.environ["PYHOROVOD_STORE_ADDR"]
    o.store_port = int(os.environ["PYHOROVOD_STORE_PORT"])
    o.secret = os.environ["PYHOROVOD_SECRET"].encode()
    o.store_prefix = prefix
    o.connect_timeout_s = 30
    return o


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _target_argv(target, args, result_path) -> List[str]:
    if isinstance(target, str) and target.endswith(".py"):
        return [sys.executable, target] + [str(a) for a in args]
    if isinstance(target, str):
        module, _, qualname = target.partition(":")
        paths = [ROOT, os.path.join(ROOT, "tests")]
    else:
        module, qualname = target.__module__, target.__qualname__
        paths = [os.path.dirname(os.path.abspath(inspect.getfile(target))), ROOT]
        if module == "__main__":
            module = os.path.splitext(os.path.basename(inspect.getfile(target)))[0]
    return [sys.executable, "-c", _CHILD, json.dumps(paths), module, qualname, json.dumps(list(args)),
            result_path]


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_ranks(target: Union[Callable, str], size: int, timeout: float = 60, env=None, args: Sequence = (),
              check: bool = True, launcher: Optional[str] = "pyhorovod", grace: float = 10.0,
              collective_timeout: Optional[float] = None) -> List[RankResult]:
    """Runs target in `size` rank processes; returns their results in rank order (see module doc)."""
    from pyhorovod import _core

    server = None
    base: Dict[str, str] = {}
    if launcher == "pyhorovod":
        secret = secrets.token_hex(16)
        server = _core.TcpStoreServer("127.0.0.1", 0, secret.encode())
        base = {"PYHOROVOD_SIZE": str(size), "PYHOROVOD_LOCAL_SIZE": str(size),
                "PYHOROVOD_STORE_ADDR": "127.0.0.1", "PYHOROVOD_STORE_PORT": str(server.port),
                "PYHOROVOD_SECRET": secret}
    elif launcher == "torchrun":
        base = {"WORLD_SIZE": str(size), "LOCAL_WORLD_SIZE": str(size), "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(free_port()), "PYHOROVOD_STORE_PORT": str(free_port())}
    elif launcher is not None:
        raise ValueError(f"launcher={launcher!r}: use 'pyhorovod', 'torchrun' or None")
    ct = collective_timeout if collective_timeout is not None else max(5.0, timeout * 0.6)
    base.setdefault("PYHOROVOD_TIMEOUT_SECONDS", f"{ct:g}")
    base.setdefault("PYHOROVOD_CONNECT_TIMEOUT_SECONDS", f"{ct:g}")
    base["PYHVD_TEST_DUMP_AFTER"] = f"{max(1.0, timeout - 2):g}"

    tmp = tempfile.mkdtemp(prefix="pyhvd-mp-")
    procs, files = [], []
    try:
        for r in range(size):
            rank_env = dict(base)
            if launcher == "pyhorovod":
                rank_env.update(PYHOROVOD_RANK=str(r), PYHOROVOD_LOCAL_RANK=str(r))
            elif launcher == "torchrun":
                rank_env.update(RANK=str(r), LOCAL_RANK=str(r))
            rank_env.update((env(r) if callable(env) else env) or {})
            rank_env = {k: v for k, v in rank_env.items() if v is not None}
            out_path, err_path, res_path = (os.path.join(tmp, f"{r}.{x}") for x in ("out", "err", "json"))
            out, err = open(out_path, "w"), open(err_path, "w")
            files.append((out, err, out_path, err_path, res_path))
            procs.append(subprocess.Popen(_target_argv(target, args, res_path), stdout=out, stderr=err,
                                          env=clean_env(rank_env), cwd=ROOT, start_new_session=True))
        killed = _watch(procs, timeout, grace)
    finally:
        for p in procs:
            if p.poll() is None:
                _kill(p)
                p.wait()
        if server is not None:
            server.close()
    results = []
    for r, (p, (out, err, out_path, err_path, res_path)) in enumerate(zip(procs, files)):
        out.close()
        err.close()
        value = None
        if os.path.exists(res_path):
            with open(res_path) as f:
                value = json.load(f)
        with open(out_path, errors="replace") as fo, open(err_path, errors="replace") as fe:
            results.append(RankResult(r, None if r in killed else p.returncode, fo.read(), fe.read(), value,
                                      r in killed))
    if check and any(res.returncode != 0 for res in results):
        raise RankFailure(format_failure(target, size, results, timeout), results)
    return results


def _watch(procs: List[subprocess.Popen], timeout: float, grace: float) -> set:
    """Waits for every process; kills all at the deadline, or the rest `grace` s after a failure."""
    deadline = time.monotonic() + timeout
    killed = set()
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return killed
        now = time.monotonic()
        if any(c not in (None, 0) for c in codes):
            deadline = min(deadline, now + grace)
        if now >= deadline:
            for r, p in enumerate(procs):
                if p.poll() is None:
                    _kill(p)
                    p.wait()
                    killed.add(r)
            return killed
        time.sleep(0.02)


def format_failure(target, size: int, results: List[RankResult], timeout: float) -> str:
    name = target if isinstance(target, str) else f"{target.__module__}.{target.__qualname__}"
    lines = [f"{name} failed at world size {size}:"]
    for res in results:
        status = f"killed (timeout {timeout:g}s or grace after another rank failed)" if res.killed \
            else f"exit code {res.returncode}"
        lines.append(f"===== rank {res.rank}: {status}")
        lines.append(f"----- rank {res.rank} stdout:\n{res.stdout.rstrip()}")
        lines.append(f"----- rank {res.rank} stderr:\n{res.stderr.rstrip()}")
    return "\n".join(lines)
