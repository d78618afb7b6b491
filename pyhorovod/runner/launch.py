"""The job launcher behind `pyhorovod run`: starts every rank, hosts the rendezvous store, relays output,
fails fast, restarts.

One *attempt* = one start of all ranks. The launcher
  1. creates a per-job secret (32 random bytes, hex) and hosts the rendezvous store
     (`_core.TcpStoreServer`) on a free port of `bind_host` (loopback when all ranks are local);
  2. starts local ranks directly and remote ranks through the rsh agent (ssh; see remote.py), each in its
     own process group (so that a signal reaches the rank's children too), with the rank variables in
     its environment and the secret in the environment or in a 0600 file -- never on a command line
     (the file is one per rank, in a 0700 directory under $XDG_RUNTIME_DIR or the temp directory;
     each rank deletes its file once read, the launcher the directory at exit).
     Each starts through ranks.EXEC_WRAPPER, which makes it die with the launcher (no preexec_fn);
  3. relays output with `[rank]<stdout>:` prefixes (output.py), only --ranks-filter's ranks on the console;
  4. watches: the first rank to exit non-zero or die fails the attempt; the others get SIGTERM, then
     SIGKILL after `kill_grace_s`; ranks that have not reached rendezvous (the ready key below) within
     `start_timeout_s` fail it too, by name. Ctrl-C (SIGINT) or SIGTERM to the launcher is forwarded to
     every rank's process group, then SIGKILL after the grace period. When the launcher's own output
     is closed (`| head`), every rank is stopped and the launcher exits 141, as after SIGPIPE.
A failed attempt is retried up to `max_restarts` times with PYHOROVOD_RESTART_COUNT = 1, 2, ...
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set

from . import output, remote
from .hosts import SlotInfo
from .ranks import RankProcess, stop_ranks
from .spawn import spawn_rank

RESTART_ENV = "PYHOROVOD_RESTART_COUNT"
# A rank has "reached rendezvous" when one of these store keys exists ("{rank}" = its rank). Its first
# init() sets one of the first two on arrival, before it waits for anybody: the topology record
# (pyhorovod/_bootstrap.py exchange_topology, prefix "pyhvd/g0/topology" from basics.py) when ranks span
# hosts, else the address it publishes for the TCP mesh (csrc/transport/tcp_mesh.cc, prefix "phv/g0").
# The third is for scripts that rendezvous by other means. Polled for --start-timeout.
READY_KEYS = ("pyhvd/g0/topology/host/{rank}", "phv/g0/tcp/addr/{rank}", "pyhorovod/ready/{rank}")

EXIT_START_TIMEOUT = 124   # as timeout(1)
EXIT_CANNOT_START = 127    # as a shell's "command not found"


@dataclass
class LaunchOptions:
    command: List[str]
    slots: List[SlotInfo]
    local_hosts: Sequence[str]          # hostnames (as in slots) that are this machine
    bind_host: str                      # address the store listens on; exported as PYHOROVOD_STORE_ADDR
    env: Dict[str, str] = field(default_factory=dict)   # knobs for every rank (HOROVOD_FUSION_THRESHOLD...)
    start_timeout_s: float = 30.0
    # True: every rank must reach rendezvous within start_timeout_s of the launch. False (the default
    # timeout): within start_timeout_s of the first rank that reached it -- so a job whose ranks take long
    # to import or load data before init(), or never call it, is not stopped, yet a rank that never
    # arrives while the others wait for it is.
    start_timeout_strict: bool = False
    output_dir: Optional[str] = None     # each rank's output also goes (without prefixes) to files here
    console_ranks: Optional[Set[int]] = None   # only these ranks' output reaches the console (None: all)
    prefix_timestamp: bool = False      # each output line begins with the local time
    verbose: bool = False
    max_restarts: int = 0
    agent: Sequence[str] = remote.DEFAULT_AGENT
    secret_in_file: bool = False
    kill_grace_s: float = 3.0
    cwd: str = field(default_factory=os.getcwd)


@dataclass
class Outcome:
    code: int                 # the launcher's exit status
    message: str = ""
    restartable: bool = False
    failed_rank: Optional[int] = None
    quiet: bool = False       # nothing to report (the reader of our output went away)


def rank_env(slot: SlotInfo, store_addr: str, store_port: int, restart: int,
             knobs: Dict[str, str]) -> Dict[str, str]:
    """The variables that tell one rank who it is and where to rendezvous (secret not included)."""
    env = dict(knobs)
    coords = {"RANK": slot.rank, "SIZE": slot.size, "LOCAL_RANK": slot.local_rank,
              "LOCAL_SIZE": slot.local_size, "CROSS_RANK": slot.cross_rank, "CROSS_SIZE": slot.cross_size}
    for name, value in coords.items():
        env[f"PYHOROVOD_{name}"] = str(value)
        env[f"HOROVOD_{name}"] = str(value)  # what Horovod's own launcher exports; scripts read these
    env["PYHOROVOD_HOSTNAME"] = env["HOROVOD_HOSTNAME"] = slot.hostname
    env["PYHOROVOD_STORE_ADDR"] = store_addr
    env["PYHOROVOD_STORE_PORT"] = str(store_port)
    env[RESTART_ENV] = str(restart)
    return env


def start_store(bind_host: str, secret: bytes):
    try:
        from pyhorovod import _core  # noqa: F401 -- only to report a missing build before the store starts
    except ImportError as e:
        raise RuntimeError(f"pyhorovod._core is not built ({e}); run `make build` or `pip install .`") from None
    from pyhorovod._rendezvous import host_store
    return host_store(bind_host, 0, secret, os.environ)


def write_secret_files(secret_hex: str, ranks: Sequence[int]) -> str:
    """A fresh 0700 directory with a 0600 file "secret.<rank>" per rank holding the secret; returns the
    directory. A rank deletes its own file once read (PYHOROVOD_SECRET_FILE_ONCE), so that a launcher
    killed by SIGKILL leaves no secret behind once its ranks have started."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = runtime if runtime and os.path.isdir(runtime) and os.access(runtime, os.W_OK) else None
    directory = tempfile.mkdtemp(prefix="pyhorovod-", dir=base)
    for rank in ranks:
        fd = os.open(os.path.join(directory, f"secret.{rank}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret_hex)
    return directory


class Attempt:
    """One start of every rank; run() returns its Outcome after every rank has stopped."""

    def __init__(self, opts: LaunchOptions, restart: int):
        self.opts = opts
        self.restart = restart
        self.ranks: List[RankProcess] = []
        self.wake = threading.Event()
        self.interrupt: Optional[int] = None   # signal number received by the launcher
        self.output_closed = False             # the reader of the launcher's output went away
        self._secret_dir: Optional[str] = None

    def _spawn(self, slot: SlotInfo, job_env: Dict[str, str], secret_hex: str) -> RankProcess:
        header = None if self.restart == 0 else f"----- pyhorovod: restart {self.restart} -----"
        return spawn_rank(self.opts, slot, job_env, secret_hex, self.wake, self._output_closed,
                          self._secret_dir, header)

    def _output_closed(self) -> None:
        self.output_closed = True
        self.wake.set()

    def run(self) -> Outcome:
        opts = self.opts
        secret_hex = secrets.token_hex(32)
        store = start_store(opts.bind_host, secret_hex.encode())
        try:
            output.emit(f"store on {opts.bind_host}:{store.port}; {len(opts.slots)} ranks; "
                        f"restart {self.restart}", verbose_only=True, verbose=opts.verbose)
            if opts.secret_in_file:
                self._secret_dir = write_secret_files(
                    secret_hex, [s.rank for s in opts.slots if s.hostname in opts.local_hosts])
            for slot in opts.slots:
                job_env = rank_env(slot, opts.bind_host, store.port, self.restart, opts.env)
                try:
                    self.ranks.append(self._spawn(slot, job_env, secret_hex))
                except OSError as e:
                    return Outcome(EXIT_CANNOT_START, f"cannot start rank {slot.rank} ({opts.command[0]!r}): {e}")
                if self.interrupt is not None:
                    break
            return self._watch(store.port, secret_hex.encode())
        finally:
            self._stop_all(signal.SIGTERM)
            store.close()
            if self._secret_dir:
                shutil.rmtree(self._secret_dir, ignore_errors=True)

    # ---- watching ---------------------------------------------------------------------------------
    def _watch(self, store_port: int, secret: bytes) -> Outcome:
        opts = self.opts
        launched = time.monotonic()
        probe = _ReadyProbe(opts.bind_host, store_port, secret, len(opts.slots))
        while True:
            if self.interrupt is not None:
                name = signal.Signals(self.interrupt).name
                output.emit(f"received {name}: stopping all ranks")
                self._stop_all(self.interrupt)
                return Outcome(128 + self.interrupt, f"interrupted by {name}")
            if self.output_closed:
                # As a shell pipeline expects of a writer whose reader left (`| head`): stop, quietly,
                # with the status of death by SIGPIPE.
                self._stop_all(signal.SIGTERM)
                return Outcome(128 + signal.SIGPIPE, "the launcher's output was closed", quiet=True)
            failed = [r for r in self.ranks if not r.running and r.returncode != 0]
            if failed:
                first = min(failed, key=lambda r: r.exit_time)
                return self._fail(first)
            if all(not r.running for r in self.ranks):
                return Outcome(0)
            if probe.pending:
                probe.poll([r.slot.rank for r in self.ranks if not r.running])
                since = launched if opts.start_timeout_strict else probe.first_ready
                if probe.pending and since is not None and time.monotonic() >= since + opts.start_timeout_s:
                    names = ", ".join(f"{r} ({opts.slots[r].hostname})" for r in sorted(probe.pending))
                    start = "the launch" if opts.start_timeout_strict else "the first rank's arrival"
                    msg = (f"rank(s) {names} did not reach rendezvous within --start-timeout "
                           f"{opts.start_timeout_s:g} s of {start}{probe.error_note()}")
                    output.emit(msg + "; stopping all ranks")
                    return Outcome(EXIT_START_TIMEOUT, msg, restartable=True)
            self.wake.wait(0.1)
            self.wake.clear()

    def _fail(self, trigger: RankProcess) -> Outcome:
        """trigger: the first rank seen to exit non-zero. Once all are stopped, the rank whose failure
        began first (failure_time) is the one reported: often not the first to exit (see failure_time)."""
        others = [r.slot.rank for r in self.ranks if r.running]
        what = trigger.describe_exit()
        output.emit(f"{what}; stopping {'ranks ' + str(others) if others else 'the job'}")
        self._stop_all(signal.SIGTERM)
        # Causes before echoes: a rank that failed of anything but a collective error (an exception of
        # its own, a signal, a bare exit code) wins over the ranks whose collectives failed because of it;
        # among equals the earliest failure. Arrival times alone cannot decide: output lines of ranks
        # that fail a millisecond apart may reach the launcher in either order.
        timed = [(r.consequential(), r.failure_time(), r.slot.rank, r) for r in self.ranks
                 if r.failure_time() is not None]
        # A rank that failed without a sign of its own (SIGSTOPped, hung: the launcher had to stop it)
        # counts as a cause from the moment the first rank's errors named it.
        silent = self._silent_ranks([t[3] for t in timed])
        timed += [(False, when, rank.slot.rank, rank) for rank, (when, _) in silent.items()]
        first = min(timed, key=lambda x: x[:3])[3] if timed else trigger
        if first is not trigger:
            if first in silent:
                what = (f"rank {first.slot.rank} (host {first.slot.hostname}, pid {first.proc.pid}) stopped "
                        f"responding (rank(s) {silent[first][1]} name it as the first failure) and was stopped "
                        f"by the launcher")
            elif first.stopped_by_launcher:  # e.g. still in its atexit shutdown when the others had gone
                what = (f"rank {first.slot.rank} (host {first.slot.hostname}, pid {first.proc.pid}) failed "
                        f"first and was stopped while exiting")
            else:
                what = first.describe_exit()
        # The other failed ranks: echoes when their errors are collective errors (or name a rank as the
        # first failure), else failures of their own that merely came later (ranks that never met, each
        # exiting on its own: one did not cause the other).
        rest = [r for r in self.ranks if r is not first and (r.failure_time() is not None or r in silent)]
        echoes = sorted(r.slot.rank for r in rest if r.consequential())
        own = sorted(r.slot.rank for r in rest if not r.consequential())
        if echoes:
            output.emit(f"rank {first.slot.rank} failed first; the errors of rank(s) {echoes} followed from it")
        if own:
            output.emit(f"rank(s) {own} also failed, with errors of their own")
        tail = first.pumps[1].tail_text() or first.pumps[0].tail_text()
        if tail:
            output.emit(f"last output of rank {first.slot.rank} (the first to fail):\n"
                        + output.indent(tail.splitlines(keepends=True)).rstrip("\n"))
        code = first.exit_status() if not first.stopped_by_launcher else trigger.exit_status()
        return Outcome(code or 1, what, restartable=True, failed_rank=first.slot.rank)

    def _silent_ranks(self, failed: List[RankProcess]) -> Dict[RankProcess, tuple]:
        """Ranks without a failure of their own that the errors of `failed` name as the first failure:
        {rank: (when the first of those errors began, [ranks naming it])}."""
        by_rank = {r.slot.rank: r for r in self.ranks}
        named: Dict[RankProcess, tuple] = {}
        for r in failed:
            target = by_rank.get(r.silent_rank())
            if target is None or target.failure_time() is not None:
                continue
            when, by = named.get(target, (r.failure_time(), []))
            named[target] = (min(when, r.failure_time()), sorted(by + [r.slot.rank]))
        return named

    def _stop_all(self, sig: int) -> None:
        stop_ranks(self.ranks, sig, self.opts.kill_grace_s)


class _ReadyProbe:
    """Which ranks have set their ready key in the store (a client connection of our own)."""

    def __init__(self, host: str, port: int, secret: bytes, size: int):
        # One rank has nobody to meet: nothing to watch.
        self.pending = set(range(size)) if size > 1 else set()
        self.first_ready: Optional[float] = None
        self._args = (host, port, secret)
        self._client = None
        self._last = 0.0
        self._error: Optional[str] = None

    def poll(self, exited: Sequence[int]) -> None:
        self.pending.difference_update(exited)   # a rank that finished cleanly did rendezvous
        now = time.monotonic()
        if now - self._last < 0.2:
            return
        self._last = now
        try:
            if self._client is None:
                from pyhorovod import _core
                self._client = _core.TcpStore(*self._args, 5.0)
            for rank in sorted(self.pending):
                if any(self._client.check(k.format(rank=rank)) for k in READY_KEYS):
                    self.pending.discard(rank)
                    if self.first_ready is None:
                        self.first_ready = now
        except Exception as e:  # noqa: BLE001 -- a probe failure must not kill the job; reported at timeout
            self._error = str(e)
            self._client = None

    def error_note(self) -> str:
        return f" (the launcher's own store check failed: {self._error})" if self._error else ""


def run_job(opts: LaunchOptions) -> int:
    """Runs the job with restarts; returns the launcher's exit status."""
    current: List[Optional[Attempt]] = [None]
    stopping: List[Optional[int]] = [None]

    def on_signal(signum, _frame):
        stopping[0] = signum
        if current[0] is not None:
            current[0].interrupt = signum
            current[0].wake.set()

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, on_signal) for s in handled}
    try:
        restart = 0
        while True:
            attempt = Attempt(opts, restart)
            current[0] = attempt
            if stopping[0] is not None:
                return 128 + stopping[0]
            outcome = attempt.run()
            if outcome.code == 0:
                return 0
            if outcome.quiet:
                return outcome.code
            if not outcome.restartable or restart >= opts.max_restarts or stopping[0] is not None:
                if opts.max_restarts and outcome.restartable:
                    output.emit(f"giving up after {restart} restart(s)")
                output.emit(f"job failed: {outcome.message}")
                return outcome.code
            restart += 1
            output.emit(f"restarting the job (restart {restart} of {opts.max_restarts}) after: {outcome.message}")
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
