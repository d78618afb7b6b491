"""How an elastic worker learns its place in each generation, from the driver (`pyhorovod run --min-np ...`).

Terms. A *worker* is one process the elastic driver started; it keeps its worker id (PYHOROVOD_WORKER_ID)
for life, while its rank changes from one *generation* to the next. A generation is one set of workers
that meet at init(): the driver numbers them 0, 1, 2, ... and every store key the engine writes for it
carries that number, so a generation never reads the keys of an earlier one.

The protocol, all through the rendezvous store the driver hosts (keys under PREFIX):

    worker: set  worker/<id>/want      = n            its n-th request for a place (n = 0, 1, ...)
    driver: set  worker/<id>/assign/<n> = JSON record  once every live worker has asked, for all at once
    driver: set  hosts                 = JSON {"version": v, "removed_only": bool}   when hosts change

The driver deletes the keys of a generation (the engine's, under phv/e<gen>/ and pyhvd/e<gen>/) once the
next one has formed, and a worker's keys once it has exited, so a long job leaves no keys behind.

The record is {"gen", "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size", "hostname",
"homogeneous", "hosts_version"},
or {"stop": reason} for a worker the driver lets go (its host left the discovery, or the job is over).
A worker asks at its first init() and at every init() after a shutdown(): `hvd.elastic.run` does
`shutdown(); init()` on a reset, so an elastic reset is the same call sequence as a Horovod one.

The driver answers a request only when every live worker has asked, so a generation never forms while
one of its members still runs the previous one; a worker that died is dropped from the wait.
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from pyhorovod._knobs import BY_NAME as KNOBS

PREFIX = "pyhvd/elastic/"
ELASTIC_ENV = "PYHOROVOD_ELASTIC"        # "1" in every worker an elastic driver starts
WORKER_ID_ENV = "PYHOROVOD_WORKER_ID"    # the worker's id, unique within the job
TIMEOUT_ENV = "HOROVOD_ELASTIC_TIMEOUT"  # seconds a worker waits for its place (the driver's --elastic-timeout)
DEFAULT_TIMEOUT_S = KNOBS[TIMEOUT_ENV].default
_POLL_S = 1.0   # the wait for a place is cut in slices this long, so that signals (Ctrl-C) get through


class WorkerStopped(SystemExit):
    """The driver let this worker go (its host left the discovery, or the job ends). A SystemExit with
    status 0: left uncaught, the worker exits cleanly, which is what the driver waits for."""

    def __init__(self, reason: str):
        super().__init__(0)
        self.reason = reason


@dataclass
class Assignment:
    gen: int
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    hostname: str
    homogeneous: bool
    hosts_version: int   # the driver's hosts record when the generation formed (it includes every change)


def worker_prefix(worker_id: str) -> str:
    """Every key of one worker begins with this (the driver deletes them when the worker is gone)."""
    return f"{PREFIX}worker/{worker_id}/"


def want_key(worker_id: str) -> str:
    return worker_prefix(worker_id) + "want"


def assign_key(worker_id: str, n: int) -> str:
    return worker_prefix(worker_id) + f"assign/{n}"


HOSTS_KEY = PREFIX + "hosts"


def is_elastic(env: Optional[Mapping[str, str]] = None) -> bool:
    env = os.environ if env is None else env
    return env.get(ELASTIC_ENV) == "1"


def worker_id(env: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if env is None else env
    wid = env.get(WORKER_ID_ENV)
    if not wid:
        raise ValueError(f"{ELASTIC_ENV}=1 but {WORKER_ID_ENV} is not set: elastic workers are started by "
                         f"`pyhorovod run --min-np/--max-np/--host-discovery-script ...`")
    return wid


def wait_timeout_s(env: Optional[Mapping[str, str]] = None) -> float:
    env = os.environ if env is None else env
    value = KNOBS[TIMEOUT_ENV].read(env)
    return DEFAULT_TIMEOUT_S if value is None else value


class _Session:
    """This process's store client for the protocol and its request counter."""

    def __init__(self):
        self.lock = threading.Lock()
        self.store = None
        self.store_addr: Optional[Tuple[str, int]] = None
        self.requests = 0
        self.assignment: Optional[Assignment] = None


_session = _Session()


def _client(host: str, port: int, secret: bytes, timeout_s: float):
    from pyhorovod import _core
    if _session.store is None or _session.store_addr != (host, port):
        _session.store = _core.TcpStore(host, port, secret, timeout_s)
        _session.store_addr = (host, port)
    return _session.store


def next_assignment(host: str, port: int, secret: bytes, connect_timeout_s: float,
                    env: Optional[Mapping[str, str]] = None) -> Assignment:
    """Asks the driver for this worker's place in the next generation and waits for it (at most the
    elastic timeout plus a minute: the driver itself gives up on a generation after the elastic timeout).
    Raises WorkerStopped when the driver lets the worker go, HorovodTimeoutError when no answer comes."""
    from pyhorovod import _core
    from pyhorovod.errors import HorovodTimeoutError, translated
    import time

    env = os.environ if env is None else env
    wid = worker_id(env)
    limit_s = wait_timeout_s(env) + 60.0
    with _session.lock:
        with translated():
            store = _client(host, port, secret, connect_timeout_s)
            n = _session.requests
            _session.requests += 1
            store.set(want_key(wid), str(n).encode())
            key = assign_key(wid, n)
            deadline = time.monotonic() + limit_s
            while True:
                try:
                    raw = bytes(store.get(key, min(_POLL_S, max(0.01, deadline - time.monotonic()))))
                    break
                except _core.TimeoutError_:
                    if time.monotonic() >= deadline:
                        raise HorovodTimeoutError(
                            f"elastic worker {wid}: the driver gave no place in a generation within "
                            f"{limit_s:g} s ({TIMEOUT_ENV} + 60 s)") from None
    record = json.loads(raw.decode())
    if "stop" in record:
        raise WorkerStopped(record["stop"])
    a = Assignment(**{f: record[f] for f in Assignment.__dataclass_fields__})
    _session.assignment = a
    return a


def current() -> Optional[Assignment]:
    """This worker's place in its current (or last) generation; None before the first."""
    return _session.assignment


def host_update() -> Tuple[int, bool]:
    """(version, removed_only) of the driver's last host change, read from the store now: version 0 when
    hosts never changed. removed_only: every change since the last generation formed only removed hosts
    (no new worker needs the state broadcast). Only meaningful in an elastic worker after its first init()."""
    from pyhorovod.errors import translated
    with _session.lock:
        if _session.store is None:
            return 0, False
        with translated():
            if not _session.store.check(HOSTS_KEY):
                return 0, False
            record = json.loads(bytes(_session.store.get(HOSTS_KEY, 5.0)).decode())
    return int(record["version"]), bool(record["removed_only"])


def hosts_changed() -> Optional[bool]:
    """None while the hosts are as they were when this worker's generation formed; else removed_only
    (True: only hosts were removed since). Reads the store: rank 0 calls it at a commit and broadcasts."""
    a = _session.assignment
    if a is None:
        return None
    version, removed_only = host_update()
    return removed_only if version > a.hosts_version else None


TARGET_KEY = PREFIX + "target_np"   # rank 0's wish for the worker count; the driver reads it every loop


def request_size(n: int) -> None:
    """Asks the driver for n workers (it clamps to [--min-np, --max-np] and grows onto free slots or lets
    the highest ranks go). Only in an elastic worker after its first init()."""
    from pyhorovod.errors import translated
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"request_size needs a worker count >= 1, got {n!r}")
    with _session.lock:
        if _session.store is None:
            raise ValueError("request_size() works only in a worker of an elastic job (pyhorovod run "
                             "--min-np/--max-np ...), after its first init()")
        with translated():
            _session.store.set(TARGET_KEY, str(n).encode())
