"""Instructions per blocking 4 B allreduce on the calling thread, split by layer (callgrind, size 1).

Wall-clock splits of a 3-5 us call are drowned by this machine's load; callgrind counts instructions,
which do not depend on it. Each kind of call runs in a single-rank job under
`valgrind --tool=callgrind --separate-threads=yes`, once with 0 and once with N timed calls after the
same warm-up; the difference over N is the cost of one call on the main thread (the engine thread's idle
rounds are in other files). Layers: libpython (the Python code above the binding, and the interpreter's
share of the call), pybind11 (argument conversion and dispatch in _core), phv (the engine: request,
round, reduction), libc/libstdc++ (malloc, mutexes, hashing: mostly the engine's). Also the inclusive
cost of the binding's entry (pybind11's dispatcher, or a prepared call's SyncCall::run_entry) and of the
engine's (EngineCore::run_sync or run_prepared): Python = total - entry, binding = entry - engine. Size 1
has no exchange; the exchange is what engine_latency.py's raw column measures.

    python benchmarks/sync_call_cost.py [--kinds api unnamed sync] [--calls 2000] [--tree PATH]

--tree measures another checkout's pyhorovod (built in place) with this script, for before/after pairs.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

import common as C  # the script's own directory is on sys.path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ("api", "unnamed", "sync")


def body(kind, n):
    """The calls (run under valgrind): `n` calls of `kind` after 50 of each kind."""
    import numpy as np

    import pyhorovod as hvd
    from pyhorovod import _core, basics
    hvd.init()
    one, out = np.ones(1, np.float32), np.empty(1, np.float32)
    f, s, run = hvd.allreduce, hvd.Sum, basics.engine().run_sync
    a, fl = _core.ALLREDUCE, _core.FLOAT32
    calls = {"api": lambda: f(one, op=s, name="lat"), "unnamed": lambda: f(one, op=s),
             "sync": lambda: run(a, "s", fl, [1], one, out, 0, 1.0, 1.0, 0, 0, 0.0)}
    for _ in range(50):
        for c in calls.values():
            c()
    c = calls[kind]
    for _ in range(n):
        c()
    hvd.shutdown()


def _costs(path, inclusive):
    """(object, function) -> instructions, from callgrind_annotate."""
    out = subprocess.run(["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}", "--threshold=100",
                          path], capture_output=True, text=True, check=True).stdout
    d = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(.*?):(.*) \[(.*)\]\s*$", line)
        if m:
            d[(os.path.basename(m.group(4)), m.group(3))] += int(m.group(1).replace(",", ""))
    return d


def measure(kind, calls, tmp, tree):
    files = []
    for n in (0, calls):
        out = os.path.join(tmp, f"cg.{kind}.{n}")
        env = dict(os.environ, PYTHONPATH=tree, OPENBLAS_NUM_THREADS="1")
        env = {k: v for k, v in env.items() if not k.startswith(("PYHOROVOD_", "HOROVOD_", "OMPI_"))}
        subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}",
                        sys.executable, os.path.abspath(__file__), "--body", kind, str(n)],
                       env=env, capture_output=True, check=True, timeout=1800)
        files.append(out + "-01")  # thread 1: the caller
    per = {}
    for inclusive in (False, True):
        a, b = _costs(files[0], inclusive), _costs(files[1], inclusive)
        per[inclusive] = {k: (b[k] - a.get(k, 0)) / calls for k in b}
    layers = collections.Counter()
    for (obj, fn), v in per[False].items():
        layers["pybind11" if obj.startswith("_core") and "pybind11" in fn else "phv" if obj.startswith("_core")
               else obj.split(".")[0]] += v

    def incl(pattern):
        return max((v for (_, fn), v in per[True].items() if pattern in fn and "'" not in fn), default=0.0)
    # The binding's entry: pybind11's dispatcher, or the prepared call's builtin function (SyncCall.entry).
    binding = max(incl("cpp_function::dispatcher"), incl("SyncCall::run_entry("))
    return sum(per[False].values()), layers, binding, max(incl("phv::EngineCore::run_sync("),
                                                          incl("phv::EngineCore::run_prepared("))


def main():
    ap = C.arg_parser(__doc__)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--tree", default=ROOT, help="the checkout whose pyhorovod is measured")
    ap.add_argument("--body", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.body:
        body(args.body[0], int(args.body[1]))
        return
    with tempfile.TemporaryDirectory(prefix="pyhvd-cg-") as tmp:
        for kind in args.kinds:
            total, layers, dispatcher, engine = measure(kind, args.calls, tmp, os.path.abspath(args.tree))
            top = ", ".join(f"{k} {v:.0f}" for k, v in layers.most_common(6))
            print(f"{kind:8s} {total:7.0f} instructions per call ({top})")
            if dispatcher:
                print(f"         Python {total - dispatcher:.0f}, binding {dispatcher - engine:.0f}, "
                      f"engine {engine:.0f}")


if __name__ == "__main__":
    main()
