"""Shared helpers of the benchmarks: sizes, bus factors, statistics, tables, JSON results with the run's
environment, command-line parsers, and a process spawner.

Terms (nccl-tests): for a collective on `size` bytes that takes `time` seconds,
  algbw = size / time                       (what the caller sees)
  busbw = algbw * bus_factor(op, n)         (bytes each rank's link must carry per second, so that one
                                             figure is comparable across world sizes)
with bus factors 2(n-1)/n for allreduce (reduce-scatter + allgather each move (n-1)/n of the buffer),
(n-1)/n for allgather (size = the gathered output) and 1 for broadcast.
"""
import argparse
import copy
import json
import math
import os
import platform
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

RECORD_PREFIX = "@@BENCH "   # workers print one JSON record per line after this marker

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_size(text):
    """'4', '4B', '64K', '1M', '256MiB' -> bytes (binary units: 1M = 2**20)."""
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"bad size {text!r} (examples: 4, 64K, 1M, 256MiB)")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def size_range(lo, hi, factor=2):
    """Geometric sizes lo, lo*factor, ... <= hi (nccl-tests -b/-e/-f)."""
    if lo <= 0 or hi < lo or factor < 2:
        raise ValueError(f"bad size range {lo}..{hi} factor {factor}")
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def fmt_size(nbytes):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= div and nbytes % div == 0:
            return f"{nbytes // div}{unit}"
    return f"{nbytes}B"


def bus_factor(op, n):
    if n <= 1:
        return 1.0 if op == "broadcast" else 0.0
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("allgather", "alltoall", "reducescatter"):
        return (n - 1) / n
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown op {op!r}")


def median(xs):
    return statistics.median(xs) if xs else float("nan")


# Two-sided 97.5% quantiles of Student's t for small samples (df 1..30); normal beyond.
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042]


def mean_ci95(xs):
    """(mean, half-width of the 95% t-interval of the mean); half-width is nan for fewer than 2 samples."""
    if not xs:
        return float("nan"), float("nan")
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, float("nan")
    t = _T975[len(xs) - 2] if len(xs) - 1 <= len(_T975) else 1.96
    return m, t * statistics.stdev(xs) / math.sqrt(len(xs))


def median_ci95(xs):
    """Median and a distribution-free 95% interval (order statistics of the binomial(n, 1/2) sign test).
    For fewer than 6 samples no such interval exists at 95%: (min, max) is returned and marked."""
    xs = sorted(xs)
    n = len(xs)
    if n == 0:
        return float("nan"), (float("nan"), float("nan")), False
    if n < 6:
        return median(xs), (xs[0], xs[-1]), False
    # largest k with P(Binom(n,1/2) < k) <= 0.025: the interval is [x_(k), x_(n-k+1)] (1-based)
    cdf, k = 0.0, 0
    for j in range(n + 1):
        p = math.comb(n, j) / 2.0 ** n
        if cdf + p > 0.025:
            break
        cdf += p
        k = j + 1
    k = max(k, 1)
    return median(xs), (xs[k - 1], xs[n - k]), True


def print_table(headers, rows, out=sys.stdout):
    """Right-aligned plain-text table."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for j, r in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)), file=out)
        if j == 0:
            print("  ".join("-" * w for w in widths), file=out)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _command_output(argv, cwd=None):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=20, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def _version(module):
    try:
        return __import__(module).__version__
    except Exception as e:   # not installed, or broken: say which
        return f"unavailable ({type(e).__name__})"


def _mpi_library():
    """The MPI launcher's version line; asked of mpirun, since loading mpi4py.MPI would initialize MPI."""
    out = _command_output(["mpirun", "--version"])
    return out.splitlines()[0] if out else "unavailable (no mpirun)"


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_bytes():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def run_environment(argv=None):
    """What a reader needs to trust or reproduce a result: versions, the git commit, the host, the command."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    argv = list(sys.argv if argv is None else argv)
    status = _command_output(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root)
    return {
        "command": shlex.join([os.path.basename(sys.executable)] + argv),
        "argv": argv,
        "cwd": os.getcwd(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git": {"commit": _command_output(["git", "rev-parse", "HEAD"], cwd=root),
                "dirty": None if status is None else bool(status)},
        "versions": {"python": platform.python_version(), "pyhorovod": _version("pyhorovod"),
                     "torch": _version("torch"), "numpy": _version("numpy"), "mpi4py": _version("mpi4py"),
                     "mpi": _mpi_library()},
        "host": {"hostname": platform.node(), "cores": os.cpu_count(), "memory_bytes": _memory_bytes(),
                 "kernel": platform.release(), "cpu_model": _cpu_model(), "machine": platform.machine()},
    }


def write_result(path, obj, argv=None):
    """A benchmark's result file: obj (a dict) with its "environment" (run_environment) added."""
    write_json(path, dict(obj, environment=run_environment(argv)))


class _DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """Shows every option's default, also for options declared without help text (which the stock
    formatter leaves out)."""

    def _format_action(self, action):
        if not action.help and action.option_strings and action.default is not argparse.SUPPRESS:
            action = copy.copy(action)
            action.help = "(default: %(default)s)"
        return super()._format_action(action)


def choice_list(choices):
    """argparse type= for a comma-separated list of choices ("a,b"), which choices= cannot check: refuses
    an unknown item, returns the text as given."""
    def parse(text):
        bad = [t for t in text.split(",") if t and t not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"{', '.join(bad)}: not one of {', '.join(choices)}")
        return text
    return parse


def choices_help(choices, what="comma-separated"):
    return f"{what}, of: {', '.join(choices)}"


def arg_parser(doc, **kwargs):
    """The benchmarks' command-line parser: the first line of doc as description, defaults in --help."""
    return argparse.ArgumentParser(description=doc.strip().split("\n")[0], formatter_class=_DefaultsShown,
                                   **kwargs)


RECORDS_ENV = "PHV_BENCH_RECORDS"   # set by run_records: the directory workers write their records to


def emit(record):
    """Worker side: one record. Under run_records (RECORDS_ENV set) it becomes a file of its own in that
    directory: mpirun merges the ranks' stdout in pieces that can split a long line and interleave it
    with another rank's. Otherwise one line on stdout after RECORD_PREFIX, flushed."""
    text = json.dumps(record, separators=(",", ":"))
    where = os.environ.get(RECORDS_ENV)
    if where:
        path = os.path.join(where, f"{os.getpid()}-{os.urandom(4).hex()}.json")
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)   # whole or absent: the launcher never reads a partial record
        return
    sys.stdout.write(RECORD_PREFIX + text + "\n")
    sys.stdout.flush()


def parse_records(text):
    out = []
    for line in text.splitlines():
        i = line.find(RECORD_PREFIX)
        if i >= 0:
            out.append(json.loads(line[i + len(RECORD_PREFIX):]))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LaunchError(RuntimeError):
    pass


def _tail(text, lines=25):
    return "\n".join(text.splitlines()[-lines:])


def run_group(cmds_envs, timeout_s, label):
    """Start one process per (argv, env) pair, wait for all with a hard deadline, return their stdout
    texts. As soon as one fails (or the deadline passes) every process is killed, and the error shows
    each one's output. Each process's pipes are drained by a thread of their own, so a chatty rank
    can never block on a full pipe while we wait for another."""
    procs, outs, threads = [], [], []
    for argv, env in cmds_envs:
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, process_group=0))
        outs.append(["", ""])
    for i, p in enumerate(procs):
        def drain(i=i, p=p):
            outs[i][0], outs[i][1] = p.communicate()
        threads.append(threading.Thread(target=drain, daemon=True))
        threads[-1].start()
    deadline = time.monotonic() + timeout_s
    failed = timed_out = False
    while True:
        codes = [p.poll() for p in procs]
        if any(c not in (None, 0) for c in codes):
            failed = True
            break
        if all(c == 0 for c in codes):
            break
        if time.monotonic() > deadline:
            failed = timed_out = True
            break
        time.sleep(0.02)
    if failed:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    for t in threads:
        t.join(timeout=10)
    if failed:
        why = f"timed out (limit {timeout_s:.0f}s)" if timed_out else "a process failed"
        msg = [f"{label}: {why}; exit codes {[p.returncode for p in procs]} (the others were then killed)"]
        for i, (p, (so, se)) in enumerate(zip(procs, outs)):
            msg.append(f"--- process {i} (exit {p.returncode}) stdout ---\n{_tail(so or '')}")
            msg.append(f"--- process {i} stderr ---\n{_tail(se or '')}")
        raise LaunchError("\n".join(msg))
    return [o[0] for o in outs]


def run_records(cmds_envs, timeout_s, label):
    """run_group, and the records the processes emit() (through files, however they were launched), in
    the order they were written."""
    with tempfile.TemporaryDirectory(prefix="phv-bench-") as where:
        run_group([(argv, dict(env, **{RECORDS_ENV: where})) for argv, env in cmds_envs], timeout_s, label)
        paths = [os.path.join(where, n) for n in os.listdir(where) if n.endswith(".json")]
        records = []
        for path in sorted(paths, key=os.path.getmtime):
            with open(path) as f:
                records.append(json.load(f))
        return records


def python_env(extra=None):
    """The current environment with the repository root first on PYTHONPATH and one thread per rank
    (2 cores shared by several ranks: intra-op threads would only fight each other)."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(k, "1")
    env.update(extra or {})
    return env


HOROVOD_PYTHONS = ("/opt/hvd-venv/bin/python",)


def find_horovod_python():
    """A Python that can `import horovod.torch` (this one, or the side venv of the Horovod build), or None."""
    for py in (sys.executable,) + HOROVOD_PYTHONS:
        if not os.path.exists(py):
            continue
        try:
            r = subprocess.run([py, "-c", "import horovod.torch"], capture_output=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return py
    return None


def mpirun_prefix(n, tcp_only=False):
    argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), "--bind-to", "none",
            "--mca", "btl_base_warn_component_unused", "0"]
    if tcp_only:
        # pml ob1 makes the btl choice binding (the ucx pml would bypass btls).
        argv += ["--mca", "pml", "ob1", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]
    return argv
