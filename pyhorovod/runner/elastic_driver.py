"""The elastic driver behind `pyhorovod run --min-np/--max-np/--host-discovery-script ...`: a job that
keeps running when workers fail or hosts come and go.

It hosts the rendezvous store, starts workers (spawn.py) on the hosts that discovery.py reports, and
forms generations (generation.py) through the protocol of pyhorovod/elastic/_membership.py. Each loop:
  1. reap: a worker that exited non-zero (or died of a signal) failed: its host goes on the blacklist
     (blacklist.py) and the other workers there are let go at the next generation; one that exited 0
     returned from train, after which the job only winds down;
  2. plan: workers on hosts that left the discovery (or were blacklisted) are marked to be let go; new
     workers start on free slots up to the target (-np at first, --max-np once hosts were added, or what
     rank 0 asks for through the target key: autoscaling); a change that kills nobody bumps the store's
     hosts record -- for new workers once they have started and asked -- so that the running workers
     raise HostsUpdatedInterrupt at their next commit and ask for a place;
  3. form: once every live worker has asked, the ones staying get their places and the others
     {"stop"}. Survivors that hit a collective error ask by themselves after restoring their state.
The job ends with 0 once every worker has exited after one returned from train; with 1 and a message
naming the reason when fewer than --min-np workers are available for longer than --elastic-timeout,
when --reset-limit resets have been used up, or when every host is blacklisted for good.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from pyhorovod.elastic import _membership as proto

from . import generation, output
from .blacklist import Blacklist
from .discovery import HostDiscovery
from .hosts import SlotInfo
from .launch import LaunchOptions, start_store
from .ranks import RankProcess, stop_ranks
from .spawn import spawn_rank

TICK_S = 0.05


@dataclass
class ElasticOptions:
    launch: LaunchOptions          # command, local hosts, store address, knobs, output, agent, grace
    discovery: HostDiscovery
    np: int
    min_np: int
    max_np: int
    elastic_timeout_s: float = 600.0
    reset_limit: Optional[int] = None
    cooldown_range: Optional[Tuple[float, float]] = None
    # Once a member of the running generation asks for a place (it failed, or heard of a change), the others
    # must ask within this many seconds; one that does not is cut off or hung: stopped, its host blacklisted.
    reset_timeout_s: float = 60.0
    autoscaled: bool = False   # rank 0's autoscaler owns the target: an added host does not raise it to max_np


class _Fatal(Exception):
    """The job cannot go on; the text says why."""


class Worker:
    def __init__(self, seq: int, hostname: str, proc: RankProcess):
        self.seq = seq
        self.id = str(seq)
        self.hostname = hostname
        self.proc = proc
        self.asked = -1           # the last request number read from the store
        self.answered = -1        # the last request number answered
        self.rank: Optional[int] = None
        self.release = False      # let go at the next generation
        self.stopped = False      # was given {"stop"} (its exit with 0 is expected)
        self.reaped = False

    @property
    def running(self) -> bool:
        return self.proc.running

    @property
    def holds_slot(self) -> bool:
        """Started and not yet reaped. A worker that exits between the reap and the plan of one loop keeps
        its slot until the next reap has seen its exit (and blacklisted its host if it failed): otherwise
        the plan would start a replacement on a host about to be blacklisted."""
        return not self.reaped

    def where(self) -> str:
        rank = f"rank {self.rank}, " if self.rank is not None else ""
        return f"worker {self.seq} ({rank}host {self.hostname}, pid {self.proc.proc.pid})"


class ElasticDriver:
    def __init__(self, opts: ElasticOptions):
        self.opts = opts
        self.workers: List[Worker] = []
        self.wake = threading.Event()
        self.interrupt: Optional[int] = None
        self.output_closed = False
        self.blacklist = Blacklist(opts.cooldown_range)
        self.gen = -1                     # the last generation formed
        self.resets = 0
        self.target = opts.np
        self.known_hosts = set(opts.discovery.current())
        self.hosts_version = 0
        self.removed_only = True          # every host change since the last generation removed hosts
        self.finished: Optional[Worker] = None   # the first worker that returned from train
        self.below_since: Optional[float] = None
        self.last_failure = ""
        self._removal_pending = False
        self._joining: set = set()         # workers started while a generation runs, not yet placed
        self._join_announced = False      # the members were told of them
        self.asking_since: Optional[float] = None   # when a member of the running generation first asked
        self.formed_at: Dict[int, float] = {}    # generation -> monotonic time it formed (benchmarks)
        self._secret_dir: Optional[str] = None
        self._store = None
        self._client = None

    # ---- the loop ---------------------------------------------------------------------------------
    def run(self) -> int:
        opts = self.opts.launch
        secret_hex = secrets.token_hex(32)
        self._store = start_store(opts.bind_host, secret_hex.encode())
        from pyhorovod import _core
        self._client = _core.TcpStore(opts.bind_host, self._store.port, secret_hex.encode(), 30.0)
        self._secret_hex = secret_hex
        if opts.secret_in_file:
            self._secret_dir = tempfile.mkdtemp(prefix="pyhorovod-")
        output.emit(f"elastic job: -np {self.opts.np}, --min-np {self.opts.min_np}, --max-np {self.opts.max_np}; "
                    f"store on {opts.bind_host}:{self._store.port}", verbose_only=True, verbose=opts.verbose)
        try:
            return self._loop()
        except _Fatal as e:
            output.emit(f"job failed: {e}")
            return 1
        finally:
            self._stop_all(signal.SIGTERM)
            self.opts.discovery.close()
            self._store.close()
            if self._secret_dir:
                shutil.rmtree(self._secret_dir, ignore_errors=True)

    def _loop(self) -> int:
        while True:
            if self.interrupt is not None:
                name = signal.Signals(self.interrupt).name
                output.emit(f"received {name}: stopping all workers")
                self._stop_all(self.interrupt)
                return 128 + self.interrupt
            if self.output_closed:
                self._stop_all(signal.SIGTERM)
                return 128 + signal.SIGPIPE
            self._reap()
            if self.finished is not None and not any(w.running for w in self.workers):
                return 0
            self._read_requests()
            self._plan()
            self._form()
            self._check_size()
            self.wake.wait(TICK_S)
            self.wake.clear()

    # ---- 1. reap ----------------------------------------------------------------------------------
    def _reap(self) -> None:
        for w in self.workers:
            if w.running or w.reaped:
                continue
            w.reaped = True
            self._client.delete_prefix(proto.worker_prefix(w.id))
            code = w.proc.returncode
            if code == 0:
                if not w.stopped and self.finished is None:
                    self.finished = w
                    output.emit(f"{w.where()} returned from train; the job ends once every worker has exited")
                continue
            if w.proc.stopped_by_launcher:
                continue
            what = w.where() + w.proc.describe_exit().split(")", 1)[1]   # "... was killed by SIGKILL ..."
            cooldown = self.blacklist.add(w.hostname)
            for other in self.workers:
                if other.hostname == w.hostname and other.running and not other.release:
                    self._let_go(other, f"its host {w.hostname} is blacklisted")
            span = "for the rest of the job" if cooldown == float("inf") else f"for {cooldown:.1f} s"
            self.last_failure = f"{what}; host {w.hostname} blacklisted {span}"
            output.emit(self.last_failure)
            tail = w.proc.pumps[1].tail_text() or w.proc.pumps[0].tail_text()
            if tail:
                output.emit(f"last output of worker {w.seq}:\n"
                            + output.indent(tail.splitlines(keepends=True)).rstrip("\n"))

    # ---- 2. plan ----------------------------------------------------------------------------------
    def _usable_hosts(self) -> Dict[str, int]:
        return {h: n for h, n in self.opts.discovery.current().items() if not self.blacklist.blocked(h)}

    def _plan(self) -> None:
        hosts = self._usable_hosts()
        discovered = set(self.opts.discovery.current())
        if discovered - self.known_hosts and not self.opts.autoscaled:
            self.target = self.opts.max_np   # hosts were added: grow as far as allowed
        self.known_hosts |= discovered
        self._read_target()
        for w in self.workers:
            if w.holds_slot and not w.release and w.hostname not in hosts:
                self._let_go(w, f"host {w.hostname} is no longer in the discovery (or is blacklisted)")
        staying = [w for w in self.workers if w.holds_slot and not w.release]
        if len(staying) > self.target:   # shrink on request: the highest ranks go
            for w in sorted(staying, key=lambda w: (w.rank is None, w.rank if w.rank is not None else 0,
                                                   w.seq))[self.target:]:
                self._let_go(w, f"the job shrinks to {self.target} worker(s)")
            staying = [w for w in staying if not w.release]
        if self.finished is None:
            for host, slots in hosts.items():
                free = slots - sum(1 for w in staying if w.hostname == host)
                while free > 0 and len(staying) < min(self.target, self.opts.max_np):
                    staying.append(self._start(host))
                    if self.gen >= 0:
                        self._joining.add(staying[-1])
                    free -= 1
        # The members hear of new workers only once these have started and asked for a place, so that
        # the job does not wait in init() through a newcomer's start-up (interpreter, imports, data).
        self._joining = {w for w in self._joining if w.running and w.answered < 0}
        join_ready = bool(self._joining) and all(w.asked > w.answered for w in self._joining)
        announce_join = join_ready and not self._join_announced
        if (announce_join or self._removal_pending) and self.gen >= 0:
            if announce_join:
                self.removed_only = False
                self._join_announced = True
            self._announce_hosts()
        self._removal_pending = False

    def _let_go(self, w: Worker, why: str) -> None:
        """w leaves at the next generation; the others hear of it at their next commit."""
        w.release = True
        self._removal_pending = True
        output.emit(f"{w.where()}: {why}; the worker leaves at the next generation")

    def _announce_hosts(self) -> None:
        self.hosts_version += 1
        record = {"version": self.hosts_version, "removed_only": self.removed_only}
        self._client.set(proto.HOSTS_KEY, json.dumps(record).encode())

    def _read_target(self) -> None:
        if not self._client.check(proto.TARGET_KEY):
            return
        try:
            wanted = int(bytes(self._client.get(proto.TARGET_KEY, 1.0)).decode())
        except ValueError:
            return
        wanted = max(self.opts.min_np, min(self.opts.max_np, wanted))
        if wanted != self.target:
            output.emit(f"rank 0 asks for {wanted} workers (was {self.target})")
            self.target = wanted

    def _start(self, host: str) -> Worker:
        seq = len(self.workers)
        env = dict(self.opts.launch.env)
        env.update({proto.ELASTIC_ENV: "1", proto.WORKER_ID_ENV: str(seq), proto.TIMEOUT_ENV:
                    f"{self.opts.elastic_timeout_s:g}", "PYHOROVOD_HOSTNAME": host, "HOROVOD_HOSTNAME": host,
                    "PYHOROVOD_STORE_ADDR": self.opts.launch.bind_host,
                    "PYHOROVOD_STORE_PORT": str(self._store.port)})
        w = Worker(seq, host, self._spawn(seq, host, env))
        self.workers.append(w)
        output.emit(f"started worker {seq} on {host}", verbose_only=True, verbose=self.opts.launch.verbose)
        return w

    def _spawn(self, seq: int, host: str, env: Dict[str, str]) -> RankProcess:
        """Starts worker seq on host with env (the secret not included); a driver that starts its workers
        by other means (Ray actors: pyhorovod/ray/elastic.py) replaces this method."""
        opts = self.opts.launch
        if self._secret_dir and host in opts.local_hosts:
            path = os.path.join(self._secret_dir, f"secret.{seq}")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(self._secret_hex)
        # The output is prefixed with the worker's number: its rank changes from one generation to the next.
        slot = SlotInfo(rank=seq, size=0, hostname=host, local_rank=0, local_size=0, cross_rank=0, cross_size=0)
        try:
            return spawn_rank(opts, slot, env, self._secret_hex, self.wake, self._on_output_closed,
                              self._secret_dir if host in opts.local_hosts else None)
        except OSError as e:
            raise _Fatal(f"cannot start a worker on {host} ({opts.command[0]!r}): {e}") from None

    def _on_output_closed(self) -> None:
        self.output_closed = True
        self.wake.set()

    # ---- 3. form ----------------------------------------------------------------------------------
    def _read_requests(self) -> None:
        for w in self.workers:
            if not w.running or w.asked > w.answered:
                continue
            key = proto.want_key(w.id)
            if self._client.check(key):
                n = int(bytes(self._client.get(key, 1.0)).decode())
                if n > w.answered:
                    w.asked = n

    def _answer(self, w: Worker, record: dict) -> None:
        if w.answered >= 0:
            self._client.delete_prefix(proto.assign_key(w.id, w.answered))   # read long ago
        self._client.set(proto.assign_key(w.id, w.asked), json.dumps(record).encode())
        w.answered = w.asked

    def _form(self) -> None:
        live = [w for w in self.workers if w.running]
        if not live:
            return
        silent = [w for w in live if w.asked <= w.answered]
        if silent:
            self._watch_silent(live, silent)
            return   # someone still runs the last generation
        self.asking_since = None
        if self.finished is not None:
            for w in live:
                w.stopped = True
                self._answer(w, {"stop": f"worker {self.finished.seq} returned from train: the job is done"})
            return
        staying = [w for w in live if not w.release]
        if len(staying) < self.opts.min_np:
            return   # wait for hosts (_check_size ends the wait after --elastic-timeout)
        if self.gen >= 0:
            self.resets += 1
            if self.opts.reset_limit is not None and self.resets > self.opts.reset_limit:
                raise _Fatal(f"the job was reset {self.opts.reset_limit} time(s), the --reset-limit; "
                             f"the last failure: {self.last_failure or 'a change of hosts'}")
        self.gen += 1
        members = [generation.Member(w.id, w.hostname, w.rank, w.seq) for w in staying]
        records = generation.records(self.gen, generation.order(members), self.hosts_version)
        by_id = {w.id: w for w in staying}
        for wid, record in records.items():
            by_id[wid].rank = record["rank"]
        for w in live:
            if w.release:
                w.stopped = True
                w.rank = None
                self._answer(w, {"stop": f"host {w.hostname} left the job"})
            else:
                self._answer(w, records[w.id])
        if self.gen > 0:   # every member of the last generation has left it: its keys are garbage
            for prefix in (f"phv/e{self.gen - 1}/", f"pyhvd/e{self.gen - 1}/"):
                self._client.delete_prefix(prefix)
        self.removed_only = True
        self._join_announced = False
        self.formed_at[self.gen] = time.monotonic()
        ranks = ", ".join(f"{w.seq}@{w.hostname}->{w.rank}" for w in sorted(staying, key=lambda w: w.rank))
        output.emit(f"generation {self.gen}: {len(staying)} worker(s) (worker@host->rank: {ranks})")

    def _watch_silent(self, live: List[Worker], silent: List[Worker]) -> None:
        members_asking = [w for w in live if w.rank is not None and w.asked > w.answered]
        if not members_asking:
            self.asking_since = None   # only new workers wait: the members ask at their next commit
            return
        now = time.monotonic()
        if self.asking_since is None:
            self.asking_since = now
            return
        if now - self.asking_since <= self.opts.reset_timeout_s:
            return
        for w in silent:
            cooldown = self.blacklist.add(w.hostname)
            span = "for the rest of the job" if cooldown == float("inf") else f"for {cooldown:.1f} s"
            self.last_failure = (f"{w.where()} did not ask for a place within {self.opts.reset_timeout_s:g} s of "
                                 f"the others (cut off or hung); host {w.hostname} blacklisted {span}")
            output.emit(self.last_failure + "; stopping it")
            w.proc.signal(signal.SIGKILL)
        self.asking_since = None

    # ---- size and ending --------------------------------------------------------------------------
    def _check_size(self) -> None:
        if self.finished is not None:
            return
        staying = [w for w in self.workers if w.running and not w.release]
        if len(staying) >= self.opts.min_np:
            self.below_since = None
            return
        now = time.monotonic()
        hosts = self.opts.discovery.current()
        if hosts and self.blacklist.permanent() and all(self.blacklist.blocked(h) for h in hosts) and not staying:
            raise _Fatal(f"every host is blacklisted ({', '.join(sorted(hosts))}); the last failure: "
                         f"{self.last_failure}")
        if not self.opts.discovery.dynamic and self.blacklist.permanent():
            usable = sum(n for h, n in self._usable_hosts().items())
            if usable < self.opts.min_np:   # fixed hosts, failed ones out for good: nothing can come back
                why = f"; the last failure: {self.last_failure}" if self.last_failure else ""
                raise _Fatal(f"only {usable} slot(s) left on hosts that are not blacklisted, fewer than --min-np "
                             f"{self.opts.min_np}, and the hosts are fixed (no --host-discovery-script){why}")
        if self.below_since is None:
            self.below_since = now
            if self.gen >= 0:
                output.emit(f"{len(staying)} worker(s) left, fewer than --min-np {self.opts.min_np}: waiting up to "
                            f"{self.opts.elastic_timeout_s:g} s (--elastic-timeout) for hosts")
        elif now - self.below_since > self.opts.elastic_timeout_s:
            why = f"; the last failure: {self.last_failure}" if self.last_failure else ""
            raise _Fatal(f"only {len(staying)} worker(s) available, fewer than --min-np {self.opts.min_np}, for "
                         f"longer than --elastic-timeout {self.opts.elastic_timeout_s:g} s{why}")

    def _stop_all(self, sig: int) -> None:
        stop_ranks([w.proc for w in self.workers], sig, self.opts.launch.kill_grace_s)


def run_elastic(opts: ElasticOptions) -> int:
    driver = ElasticDriver(opts)

    def on_signal(signum, _frame):
        driver.interrupt = signum
        driver.wake.set()

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, on_signal) for s in handled}
    try:
        return driver.run()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
