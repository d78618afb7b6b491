"""Elastic training: how fast a job recovers from a killed worker, takes in a new host, and what commits cost.

    flock /tmp/bench.lock python3 benchmarks/elastic_recovery.py --rounds 3 --steady-rounds 4
    python3 benchmarks/elastic_recovery.py --parts steady --steady-steps 150

The job (this file with --job) trains shared/anchors.md's 4.2M MLP (1024->1024x3->1000, batch 32 per
rank, SGD, one thread per rank) and prints one record per step: time.time() after the step, its
worker id, pid, rank and size. Under the elastic driver it is an hvd.elastic.run job with a TorchState
committed every --commit-every steps; it also records restore() (the worker saw the failure) and the
reset callback (the new generation is formed and initialized).

Parts (all timed by the clock of this one machine):
  kill    4 -> 3: SIGKILL to the highest-ranked worker (a pid learnt from its records) once every worker
          has done --warm steps at 4; measured: the kill to the first step completed at size 3 (by rank 0),
          split into kill -> first survivor's restore (detection), -> the driver's "generation" line
          (forming), -> rank 0's reset callback (init), -> first step (sync broadcast + one step).
  add     3 -> 4: a new host name is added to the discovery file; measured: the write to the first step
          completed by the new worker, split into: the write -> the new process runs (discovery interval,
          the driver's spawn), its imports (torch, pyhorovod) and model, -> the driver's "generation" line (it
          asked, and the running workers reached a commit), -> its init returned, the optimizer and state,
          -> its first step (the sync broadcast of the state, one step); and the running workers' pause:
          rank 0's last step at 3 to its first at 4.
          One launch does --rounds kill/add cycles (each kill blacklists a host; each add is a new name).
  steady  the same job at 4 ranks on one host: elastic (pyhorovod run --min-np 4 --max-np 4, commit every
          --commit-every steps) against fixed (plain pyhorovod run, no state, no commits), launched in
          alternation (fixed, elastic, elastic, fixed, ...); per launch the median step interval of rank 0
          after --warm steps; the ratio of the medians over launches, and each pair's ratio.
"""
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common as C  # noqa: E402
from synthetic import add_mlp_args, build_model  # noqa: E402

DISCOVERY_INTERVAL_S = 1.0   # the driver runs the discovery script this often


# ------------------------------------------------------------------ the job (one per worker)

def job(args):
    started = time.time()
    import torch
    import torch.nn.functional as F
    import pyhorovod.torch as hvd
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    # Model and plain optimizer before init(), as a joining worker should (the others wait in their sync
    # for what it does after init); torch's first optimizer imports torch._dynamo, seconds on this machine.
    args.model = "mlp"
    model = build_model(args)
    sgd = torch.optim.SGD(model.parameters(), lr=0.001)
    imported = time.time()
    hvd.init()
    # A newcomer's start-up, for the add part: process start, imports and model built, place got.
    C.emit(dict(kind="startup", started=started, imported=imported, t=time.time(), pid=os.getpid(),
                worker=os.environ.get("PYHOROVOD_WORKER_ID", str(hvd.rank()))))
    optimizer = hvd.DistributedOptimizer(sgd, named_parameters=model.named_parameters())
    x = torch.randn(args.batch, args.input)
    y = torch.randint(0, args.classes, (args.batch,))
    worker = os.environ.get("PYHOROVOD_WORKER_ID", str(hvd.rank()))

    def record(kind, **fields):
        C.emit(dict(kind=kind, t=time.time(), worker=worker, pid=os.getpid(), rank=hvd.rank(),
                    size=hvd.size(), **fields))

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    if args.job == "fixed":
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        for i in range(args.steps):
            step()
            record("step", step=i + 1)
        hvd.shutdown()
        return

    class State(hvd.elastic.TorchState):
        def restore(self):
            record("restore")
            super().restore()

    state = State(model=model, optimizer=optimizer, steps=0)
    state.register_reset_callbacks([lambda: record("reset")])
    record("ready")   # model, optimizer and state built: train (its first sync) comes next

    @hvd.elastic.run
    def train(state):
        while state.steps < args.steps:
            step()
            state.steps += 1
            record("step", step=state.steps)
            if state.steps % args.commit_every == 0:
                state.commit()

    train(state)
    hvd.shutdown()


# ------------------------------------------------------------------ the benchmark side

class Launch:
    """A launcher run whose merged output is read by a thread; every line is kept with its arrival time."""

    def __init__(self, launcher_args, job_args, env):
        argv = [sys.executable, "-m", "pyhorovod.run", *launcher_args, sys.executable, os.path.abspath(__file__),
                *job_args]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                     start_new_session=True)
        self.records, self.lines = [], []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            now = time.time()
            recs = C.parse_records(line) if C.RECORD_PREFIX in line else []
            with self.cond:
                self.lines.append((now, line))
                self.records.extend(recs)
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, pred, timeout_s, what):
        """The first record (from index 0) matching pred, waiting up to timeout_s."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while True:
                for r in self.records:
                    if pred(r):
                        return r
                if self.proc.poll() is not None and not self.reader.is_alive():
                    raise C.LaunchError(f"the job ended while waiting for {what}\n{self.tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise C.LaunchError(f"no {what} within {timeout_s:g} s\n{self.tail()}")
                self.cond.wait(min(left, 0.5))

    def line_time(self, text, after):
        with self.cond:
            return next((t for t, line in self.lines if t >= after and text in line), None)

    def tail(self, n=30):
        with self.cond:
            return "".join(line for _, line in self.lines[-n:])

    def finish(self, timeout_s):
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            raise C.LaunchError(f"the job did not end within {timeout_s:g} s\n{self.tail()}")
        self.reader.join(10)
        return self.proc.returncode

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def mlp_args(args):
    return ["--input", str(args.input), "--hidden", str(args.hidden), "--layers", str(args.layers),
            "--classes", str(args.classes), "--batch", str(args.batch), "--commit-every", str(args.commit_every)]


def latest_steps(launch, size, after):
    """{worker: its latest step record at this size}, of steps after time `after` (the current members)."""
    with launch.cond:
        out = {}
        for r in launch.records:
            if r["kind"] == "step" and r["size"] == size and r["t"] > after:
                out[r["worker"]] = r
        return out


def wait_steps_at(launch, size, count, after, timeout_s):
    """Waits until `count` workers each did args.warm steps at `size` after time `after`."""
    deadline = time.monotonic() + timeout_s
    while True:
        with launch.cond:
            done = {}
            for r in launch.records:
                if r["kind"] == "step" and r["size"] == size and r["t"] > after:
                    done[r["worker"]] = done.get(r["worker"], 0) + 1
        if len(done) >= count and sorted(done.values())[-count] >= WARM[0]:
            return
        if time.monotonic() > deadline or launch.proc.poll() is not None:
            raise C.LaunchError(f"{count} workers never did {WARM[0]} steps at size {size}\n{launch.tail()}")
        time.sleep(0.1)


WARM = [10]


def recovery(args, env):
    """--rounds kill/add cycles in one elastic launch; returns the per-round phase times."""
    work = tempfile.mkdtemp(prefix="elastic-bench-")
    hosts_file = os.path.join(work, "hosts")
    names = [f"127.0.0.{i}" for i in range(1, 5)]
    with open(hosts_file, "w") as f:
        f.write("".join(n + "\n" for n in names))
    script = os.path.join(work, "discover.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\ncat {hosts_file}\n")
    os.chmod(script, 0o755)
    launch = Launch(["-np", "4", "--min-np", "3", "--max-np", "4", "--host-discovery-script", script],
                    ["--job", "elastic", "--steps", "1000000", *mlp_args(args)], env)
    kills, adds = [], []
    try:
        t_mark = 0.0
        for rnd in range(args.rounds):
            wait_steps_at(launch, 4, 4, t_mark, 300)
            victims = latest_steps(launch, 4, t_mark)
            victim = max(victims.values(), key=lambda r: r["rank"])
            t_kill = time.time()
            os.kill(victim["pid"], signal.SIGKILL)
            first = launch.wait_for(lambda r: r["kind"] == "step" and r["size"] == 3 and r["rank"] == 0
                                    and r["t"] > t_kill, 120, "a step at size 3")
            restore = launch.wait_for(lambda r: r["kind"] == "restore" and r["t"] > t_kill, 5, "a restore")
            reset = launch.wait_for(lambda r: r["kind"] == "reset" and r["rank"] == 0 and r["t"] > t_kill, 5,
                                    "rank 0's reset")
            gen = launch.line_time("] generation ", t_kill)
            kills.append({"total": first["t"] - t_kill, "detect": restore["t"] - t_kill,
                          "form": (gen or reset["t"]) - restore["t"], "init": reset["t"] - (gen or restore["t"]),
                          "sync+step": first["t"] - reset["t"]})
            print(f"[elastic_recovery] round {rnd + 1}: kill -> first step at 3: {kills[-1]['total']:.2f} s "
                  f"({', '.join(f'{k} {v:.2f}' for k, v in kills[-1].items() if k != 'total')})", flush=True)

            wait_steps_at(launch, 3, 3, first["t"], 300)
            new_host = f"127.0.0.{5 + rnd}"
            with open(hosts_file, "a") as f:
                f.write(new_host + "\n")
            t_add = time.time()
            joined = launch.wait_for(lambda r: r["kind"] == "step" and r["size"] == 4 and r["t"] > t_add
                                     and r["worker"] not in victims, 120, "a step of the new worker")
            gen = launch.line_time("] generation ", t_add)
            mine = lambda kind: launch.wait_for(lambda r: r["kind"] == kind and r["worker"] == joined["worker"],
                                                5, f"the new worker's {kind} record")
            startup, ready = mine("startup"), mine("ready")
            first4 = launch.wait_for(lambda r: r["kind"] == "step" and r["size"] == 4 and r["rank"] == 0
                                     and r["t"] > t_add, 5, "rank 0's first step at size 4")
            with launch.cond:
                last3 = max(r["t"] for r in launch.records if r["kind"] == "step" and r["size"] == 3
                            and r["rank"] == 0 and r["t"] < first4["t"])
            adds.append({"total": joined["t"] - t_add, "to process": startup["started"] - t_add,
                         "imports+model": startup["imported"] - startup["started"],
                         "to generation": (gen or startup["t"]) - startup["imported"],
                         "init": startup["t"] - (gen or startup["imported"]), "opt+state": ready["t"] - startup["t"],
                         "sync+step": joined["t"] - ready["t"], "others' pause": first4["t"] - last3})
            print(f"[elastic_recovery] round {rnd + 1}: host added -> its first step: {adds[-1]['total']:.2f} s "
                  f"({', '.join(f'{k} {v:.2f}' for k, v in adds[-1].items() if k != 'total')})", flush=True)
            t_mark = joined["t"]
    finally:
        launch.stop()
    return kills, adds


def steady_once(args, env, mode):
    if mode == "elastic":
        launcher = ["-np", "4", "--min-np", "4", "--max-np", "4", "-H", "127.0.0.1:4"]
    else:
        launcher = ["-np", "4"]
    launch = Launch(launcher, ["--job", mode, "--steps", str(args.steady_steps), *mlp_args(args)], env)
    code = launch.finish(600)
    if code != 0:
        raise C.LaunchError(f"the {mode} run exited {code}\n{launch.tail()}")
    ts = [r["t"] for r in launch.records if r["kind"] == "step" and r["rank"] == 0]
    gaps = [b - a for a, b in zip(ts[WARM[0]:], ts[WARM[0] + 1:])]
    return statistics.median(gaps)


def steady(args, env):
    pairs = []
    for rnd in range(args.steady_rounds):
        order = ["fixed", "elastic"] if rnd % 2 == 0 else ["elastic", "fixed"]
        got = {mode: steady_once(args, env, mode) for mode in order}
        pairs.append(got)
        print(f"[elastic_recovery] steady round {rnd + 1} ({' then '.join(order)}): fixed "
              f"{1e3 * got['fixed']:.1f} ms, elastic {1e3 * got['elastic']:.1f} ms per step, "
              f"x{got['elastic'] / got['fixed']:.3f}", flush=True)
    return pairs


def summary(name, rows):
    keys = list(rows[0])
    print(f"\n{name} (seconds; median [min, max] over {len(rows)} rounds)")
    for k in keys:
        xs = [r[k] for r in rows]
        print(f"  {k:<14} {statistics.median(xs):6.2f}  [{min(xs):.2f}, {max(xs):.2f}]")


def main():
    p = C.arg_parser(__doc__)
    p.add_argument("--job", choices=["elastic", "fixed"], help=argparse_suppress())
    p.add_argument("--steps", type=int, default=100, help=argparse_suppress())
    add_mlp_args(p)
    p.add_argument("--commit-every", type=int, default=10, help="steps between commits")
    p.add_argument("--parts", default="kill,steady", help="kill (also does add), steady")
    p.add_argument("--rounds", type=int, default=3, help="kill/add cycles")
    p.add_argument("--warm", type=int, default=10, help="steps at a size before measuring")
    p.add_argument("--steady-rounds", type=int, default=4, help="fixed/elastic launch pairs")
    p.add_argument("--steady-steps", type=int, default=150, help="steps per steady launch")
    p.add_argument("--json", default="", help="write the figures here")
    args = p.parse_args()
    if args.job:
        return job(args)
    WARM[0] = args.warm
    env = C.python_env({"PYHOROVOD_ELASTIC_RESET_TIMEOUT_SECONDS": "30"})
    print(f"[elastic_recovery] {time.strftime('%H:%M:%S', time.gmtime())} UTC start", flush=True)
    with open("/proc/loadavg") as f:
        print(f"[elastic_recovery] load average at start: {f.read().strip()}", flush=True)
    out = {"commit_every": args.commit_every}
    parts = args.parts.split(",")
    if "kill" in parts:
        kills, adds = recovery(args, env)
        summary("kill a worker, 4 -> 3: SIGKILL to the first step at 3 (goal <= 3 s median)", kills)
        summary(f"add a host, 3 -> 4: discovery file written to the new worker's first step "
                f"(goal <= 5 s + {DISCOVERY_INTERVAL_S:g} s interval)", adds)
        out.update(kills=kills, adds=adds)
    if "steady" in parts:
        pairs = steady(args, env)
        fixed = statistics.median(p["fixed"] for p in pairs)
        elastic = statistics.median(p["elastic"] for p in pairs)
        ratios = sorted(p["elastic"] / p["fixed"] for p in pairs)
        print(f"\nsteady state, 4 ranks, commit every {args.commit_every} steps (goal <= 1.02x): fixed "
              f"{1e3 * fixed:.1f} ms, elastic {1e3 * elastic:.1f} ms per step (medians of {len(pairs)} "
              f"launches each): x{elastic / fixed:.3f}; per pair {', '.join(f'{r:.3f}' for r in ratios)}")
        out.update(steady=pairs, steady_ratio=elastic / fixed)
    with open("/proc/loadavg") as f:
        print(f"[elastic_recovery] load average at the end: {f.read().strip()}", flush=True)
    if args.json:
        C.write_result(args.json, out)
    return 0


def argparse_suppress():
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
