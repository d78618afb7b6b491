"""A tiny elastic driver for the worker-side tests: the protocol of pyhorovod/elastic/_membership.py,
without hosts, discovery or blacklists (the launcher's own tests use the real driver).

    driver = TinyDriver(elastic_body, workers=3, args=(out_dir,), timeout=120)
    driver.start()
    driver.wait_for(lambda: ...)      # e.g. a worker's progress file
    driver.kill(1)                    # SIGKILL worker 1
    driver.add_worker()               # a fourth worker (publish_hosts() makes the others reset for it)
    results = driver.finish()         # mp.RankResult per worker, in worker order

It hosts the store, starts each worker as mp.py's harness starts a rank (a module-level function run in a
fresh process) but with PYHOROVOD_ELASTIC=1 and PYHOROVOD_WORKER_ID=w<i> instead of rank variables, and
answers requests from a thread: once every live worker has asked (want/<id> = n above the last answered
n), it writes assign/<id>/<n> for all of them at once, ranks in worker order (so survivors keep their
relative order and the lowest surviving worker is rank 0). publish_hosts() writes the hosts record.
"""
import json
import os
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from typing import Callable, List, Optional

import mp
from pyhorovod import _core
from pyhorovod.elastic import _membership


class TinyDriver:
    def __init__(self, target: Callable, workers: int, args=(), timeout: float = 120.0, env=None,
                 phantom_in_first: bool = False):
        self.target, self.args, self.timeout = target, list(args), timeout
        # The first generation gets one more member, a worker id that never runs, so that it cannot form
        # (as when a member dies while the engines connect): the live workers must ask again.
        self.phantom_in_first = phantom_in_first
        self.secret = secrets.token_hex(16)
        self.server = _core.TcpStoreServer("127.0.0.1", 0, self.secret.encode())
        self.store = _core.TcpStore("127.0.0.1", self.server.port, self.secret.encode(), 10.0)
        self.ids = [f"w{i}" for i in range(workers)]
        self.answered = {wid: -1 for wid in self.ids}
        self.generations: List[List[str]] = []   # the worker ids of each generation, in rank order
        self.extra_env = env or {}
        self.tmp = tempfile.mkdtemp(prefix="pyhvd-elastic-")
        self.procs: List[subprocess.Popen] = []
        self.files = []
        self.killed = set()
        self.hosts_version = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.error: Optional[BaseException] = None

    def start(self) -> None:
        for i in range(len(self.ids)):
            self._spawn(i)
        self._deadline = time.monotonic() + self.timeout
        self._thread.start()

    def add_worker(self) -> int:
        """Starts one more worker (it asks for a place at its init); returns its index."""
        wid = f"w{len(self.ids)}"
        self.answered[wid] = -1
        self.ids.append(wid)
        self._spawn(len(self.ids) - 1)
        return len(self.ids) - 1

    def _spawn(self, i: int) -> None:
        collective_s = f"{max(10.0, self.timeout * 0.3):g}"
        env = {"PYHOROVOD_ELASTIC": "1", "PYHOROVOD_WORKER_ID": self.ids[i], "PYHOROVOD_STORE_ADDR": "127.0.0.1",
               "PYHOROVOD_STORE_PORT": str(self.server.port), "PYHOROVOD_SECRET": self.secret,
               "PYHOROVOD_TIMEOUT_SECONDS": collective_s, "PYHOROVOD_CONNECT_TIMEOUT_SECONDS": collective_s,
               "HOROVOD_ELASTIC_TIMEOUT": collective_s,
               "PYHVD_TEST_DUMP_AFTER": f"{max(1.0, self.timeout - 2):g}", **self.extra_env}
        paths = [os.path.join(self.tmp, f"{i}.{x}") for x in ("out", "err", "json")]
        out, err = open(paths[0], "w"), open(paths[1], "w")
        self.files.append((out, err, *paths))
        argv = mp._target_argv(self.target, self.args, paths[2])
        self.procs.append(subprocess.Popen(argv, stdout=out, stderr=err, env=mp.clean_env(env), cwd=mp.ROOT,
                                           start_new_session=True))

    def _live(self) -> List[int]:
        return [i for i, p in enumerate(self.procs) if p.poll() is None]

    def _asked(self, wid: str) -> int:
        key = _membership.want_key(wid)
        return int(bytes(self.store.get(key, 1.0)).decode()) if self.store.check(key) else -1

    def _serve(self) -> None:
        try:
            while not self._stop.is_set():
                live = self._live()
                asks = {i: self._asked(self.ids[i]) for i in live}
                if live and all(asks[i] > self.answered[self.ids[i]] for i in live):
                    self._assign(live, asks)
                time.sleep(0.02)
        except BaseException as e:  # noqa: BLE001 -- reported by finish()
            self.error = e

    def _assign(self, live: List[int], asks) -> None:
        gen = len(self.generations)
        self.generations.append([self.ids[i] for i in live]
                                + (["phantom"] if self.phantom_in_first and gen == 0 else []))
        size = len(self.generations[-1])
        for rank, i in enumerate(live):
            record = {"gen": gen, "rank": rank, "size": size, "local_rank": rank, "local_size": size,
                      "cross_rank": 0, "cross_size": 1, "hostname": "localhost", "homogeneous": True,
                      "hosts_version": self.hosts_version}
            wid = self.ids[i]
            self.store.set(_membership.assign_key(wid, asks[i]), json.dumps(record).encode())
            self.answered[wid] = asks[i]

    def publish_hosts(self, version: int, removed_only: bool) -> None:
        self.hosts_version = version
        record = {"version": version, "removed_only": removed_only}
        self.store.set(_membership.HOSTS_KEY, json.dumps(record).encode())

    def kill(self, i: int) -> None:
        os.killpg(self.procs[i].pid, signal.SIGKILL)
        self.procs[i].wait()
        self.killed.add(i)

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        while not condition():
            if time.monotonic() > self._deadline or not self._live():
                self.finish(check=False)
                raise AssertionError(f"timed out waiting for {what}\n" + self.report())
            time.sleep(0.05)

    def finish(self, check: bool = True) -> List[mp.RankResult]:
        """Waits for every worker (at most until the deadline, then kills them); returns their results."""
        while self._live() and time.monotonic() < self._deadline:
            time.sleep(0.05)
        timed_out = set(self._live())
        for i in timed_out:
            os.killpg(self.procs[i].pid, signal.SIGKILL)
            self.procs[i].wait()
        self._stop.set()
        self._thread.join(5)
        self.server.close()
        self.results = []
        for i, (p, (out, err, out_path, err_path, res_path)) in enumerate(zip(self.procs, self.files)):
            out.close()
            err.close()
            value = json.load(open(res_path)) if os.path.exists(res_path) else None
            with open(out_path, errors="replace") as fo, open(err_path, errors="replace") as fe:
                self.results.append(mp.RankResult(i, None if i in timed_out else p.returncode, fo.read(),
                                                  fe.read(), value, i in timed_out))
        if check:
            assert self.error is None, f"the tiny driver failed: {self.error!r}"
            bad = [r for r in self.results if r.rank not in self.killed and r.returncode != 0]
            assert not bad, self.report()
        return self.results

    def report(self) -> str:
        results = getattr(self, "results", [])
        lines = [f"generations: {self.generations}"]
        for r in results:
            lines.append(f"===== worker {r.rank}: exit {r.returncode}{' (timed out)' if r.killed else ''}")
            lines.append(f"----- stderr:\n{r.stderr.rstrip()[-4000:]}")
        return "\n".join(lines)


def events(out_dir: str, worker: int) -> List[dict]:
    """The JSON lines a worker body wrote to <out_dir>/w<worker>.log."""
    path = os.path.join(out_dir, f"w{worker}.log")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
