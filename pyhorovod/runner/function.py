"""`pyhorovod.run(func, args, kwargs, np=..., hosts=...)`: Horovod's programmatic launcher.

It starts a job as `pyhorovod run` does, each rank running pyhorovod/runner/task.py, which joins the job
(`init()`), calls func(*args, **kwargs) and hands back its result. The function, its arguments and the
results travel pickled (cloudpickle when installed, so that lambdas and functions defined in __main__ work;
else pickle, which takes importable module-level functions only) through a key/value store of our own
(`_core.TcpStoreServer`, authenticated by a fresh secret), on the address the job's store uses, so that
remote ranks reach it too. A payload is at most 64 MiB (the store's limit on a value).
"""
from __future__ import annotations

import secrets
import sys
from typing import Any, Callable, Dict, List, Optional

FUNC_KEY = "pyhorovod/run/func"
RESULT_KEY = "pyhorovod/run/result/{rank}"
STORE_ENV = "PYHOROVOD_FUNC_STORE"     # host:port of the function's store
SECRET_ENV = "PYHOROVOD_FUNC_SECRET"   # its secret (hex)
MAX_PAYLOAD = 64 << 20                 # bytes: the pickled function, and each rank's pickled result


def pickler():
    try:
        import cloudpickle
        return cloudpickle
    except ImportError:
        import pickle
        return pickle


def run(func: Callable, args=(), kwargs: Optional[Dict[str, Any]] = None, np: int = 1, min_np=None,
        max_np=None, slots=None, reset_limit=None, hosts: Optional[str] = None, hostfile: Optional[str] = None,
        start_timeout: Optional[float] = None, ssh_port: Optional[int] = None,
        ssh_identity_file: Optional[str] = None, disable_cache=None, output_filename: Optional[str] = None,
        verbose: Optional[bool] = None, use_gloo: Optional[bool] = None, use_mpi: Optional[bool] = None,
        mpi_args: Optional[str] = None, network_interface: Optional[str] = None,
        executable: Optional[str] = None) -> List[Any]:
    """Runs func(*args, **kwargs) on np ranks of an initialized job; returns every rank's result, in rank
    order. A rank that raises fails the job: RuntimeError with that rank's traceback. Keywords as
    horovod.run; with an elastic one (min_np, max_np, slots: slots per host, reset_limit) the job is
    elastic (func should be an hvd.elastic.run function) and the result holds the ranks of the last
    generation."""
    if not callable(func):
        raise ValueError(f"pyhorovod.run: func must be callable, got {type(func).__name__}")
    if not isinstance(np, int) or isinstance(np, bool) or np < 1:
        raise ValueError(f"pyhorovod.run: np must be a positive int, got {np!r}")
    elastic = {"--min-np": min_np, "--max-np": max_np, "--slots-per-host": slots, "--reset-limit": reset_limit}
    argv = ["-np", str(np)]
    for flag, value in elastic.items():
        if value is not None:
            argv += [flag, str(value)]
    most = max(v for v in (np, min_np, max_np) if v is not None)
    lo = min_np if min_np is not None else np
    hi = max_np if max_np is not None else max(np, lo)
    if not 1 <= lo <= np <= hi:
        raise ValueError(f"pyhorovod.run: np={np} must lie within min_np={lo} .. max_np={hi} (min_np >= 1)")
    for flag, value in (("-H", hosts), ("--hostfile", hostfile), ("--start-timeout", start_timeout),
                        ("--ssh-port", ssh_port), ("--ssh-identity-file", ssh_identity_file),
                        ("--output-filename", output_filename), ("--mpi-args", mpi_args),
                        ("--network-interfaces", network_interface)):
        if value is not None:
            argv += [flag, str(value)]
    for flag, on in (("--disable-cache", disable_cache), ("--verbose", verbose), ("--gloo", use_gloo),
                     ("--mpi", use_mpi)):
        if on:
            argv.append(flag)
    argv += ["--", executable or sys.executable, "-m", "pyhorovod.runner.task"]

    import os

    from pyhorovod import _core
    from pyhorovod._config import store_limits
    from .cli import run_command

    payload = pickler().dumps((func, tuple(args), dict(kwargs or {})))
    secret = secrets.token_hex(32)
    stores: List[Any] = []

    def store_env(bind_host: str) -> Dict[str, str]:
        # Not the rendezvous store's 1 MiB default per value: the function and each result may take 64 MiB.
        limits = {"max_value_bytes": MAX_PAYLOAD, "max_total_bytes": (most + 1) * MAX_PAYLOAD + (1 << 20)}
        limits.update(store_limits(os.environ))
        server = _core.TcpStoreServer(bind_host, 0, secret.encode(), **limits)
        stores.append((server, bind_host))
        _core.TcpStore(bind_host, server.port, secret.encode(), 10.0).set(FUNC_KEY, payload)
        return {STORE_ENV: f"{bind_host}:{server.port}", SECRET_ENV: secret}

    try:
        code = run_command(argv, prog="pyhorovod.run", extra_env=store_env)
        if not stores:
            raise RuntimeError(f"pyhorovod.run: the job did not start (exit status {code}; see above)")
        server, bind_host = stores[0]
        client = _core.TcpStore(bind_host, server.port, secret.encode(), 10.0)
        size = np
        if any(v is not None for v in elastic.values()):   # the last generation's size
            size = next((r for r in range(most) if not client.check(RESULT_KEY.format(rank=r))), most)
        outcomes = [pickler().loads(client.get(RESULT_KEY.format(rank=r), 1.0))
                    if client.check(RESULT_KEY.format(rank=r)) else None for r in range(size)]
    finally:
        for server, _ in stores:
            server.close()
    for rank, outcome in enumerate(outcomes):
        if outcome is not None and outcome[0] == "error":
            raise RuntimeError(f"pyhorovod.run: rank {rank} raised:\n{outcome[1]}")
    if code != 0:
        raise RuntimeError(f"pyhorovod.run: the job failed with exit status {code} (see the ranks' output)")
    missing = [r for r, outcome in enumerate(outcomes) if outcome is None]
    if missing:
        raise RuntimeError(f"pyhorovod.run: rank(s) {missing} exited without a result")
    return [outcome[1] for outcome in outcomes]
