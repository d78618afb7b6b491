"""What the benchmarks tell a reader: --help with every default, results that record where they were
measured (common.run_environment), and figures with log axes, size labels, marked measurements and
legends off the curves that never switch the caller's matplotlib backend (benchmarks/plotting.py)."""
import os
import platform
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")
sys.path.insert(0, BENCH)
import collectives  # noqa: E402
import paired_sweep  # noqa: E402
import perf_interleave  # noqa: E402
import common as C  # noqa: E402
import scaling_model  # noqa: E402

HELPERS = {"common.py", "plotting.py"}
SCRIPTS = sorted(f for f in os.listdir(BENCH) if f.endswith(".py") and f not in HELPERS)


def _help_entries(text):
    """The option entries of an argparse --help text, each joined to one line."""
    entries, current = [], None
    for line in text.splitlines():
        if re.match(r"^  -", line):
            current = [line.strip()]
            entries.append(current)
        elif current is not None and line.startswith("      "):
            current.append(line.strip())
        else:
            current = None
    return [" ".join(e) for e in entries]


def test_every_benchmark_help_shows_its_defaults():
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    procs = {f: subprocess.Popen([sys.executable, os.path.join(BENCH, f), "--help"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env) for f in SCRIPTS}
    outs = {f: p.communicate(timeout=300) for f, p in procs.items()}
    for f, (out, err) in outs.items():
        assert procs[f].returncode == 0, f"{f} --help: {err}"
        options = [e for e in _help_entries(out) if not e.startswith("-h, --help")]
        assert options, f"{f}: no options in\n{out}"
        missing = [e for e in options if "(default: " not in e]
        assert not missing, f"{f}: options without their default: {missing}"
    # Enumerations list their choices, and an unknown one is refused before anything runs.
    assert ("of: allreduce, allgather, broadcast, alltoall, reducescatter "
            "(default: allreduce,allgather,broadcast,alltoall,reducescatter)") in \
        " ".join(outs["collectives.py"][0].split())
    assert "{trajectory,overhead,worker-trajectory,worker-overhead}" in outs["noise_scale.py"][0]
    r = subprocess.run([sys.executable, os.path.join(BENCH, "collectives.py"), "--ops", "allreduce,scatter"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and "scatter: not one of allreduce, allgather, broadcast" in r.stderr, r.stderr


def test_run_environment_records_versions_commit_host_and_command(tmp_path):
    import numpy
    import torch
    import pyhorovod
    env = C.run_environment(["benchmarks/x.py", "--np", "2", "a b"])
    assert env["command"] == f"{os.path.basename(sys.executable)} benchmarks/x.py --np 2 'a b'"
    assert env["argv"] == ["benchmarks/x.py", "--np", "2", "a b"]
    versions = env["versions"]
    assert (versions["pyhorovod"], versions["torch"], versions["numpy"], versions["python"]) == \
        (pyhorovod.__version__, torch.__version__, numpy.__version__, platform.python_version())
    try:
        import mpi4py
        assert versions["mpi4py"] == mpi4py.__version__
    except ImportError:
        assert versions["mpi4py"].startswith("unavailable")
    assert "Open MPI" in versions["mpi"] or versions["mpi"].startswith("unavailable")
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{40}", head) and env["git"]["commit"] == head
    assert isinstance(env["git"]["dirty"], bool)
    host = env["host"]
    assert host["cores"] == os.cpu_count() and host["kernel"] == platform.release()
    assert host["memory_bytes"] == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") > 0
    with open("/proc/cpuinfo") as f:
        models = {line.split(":", 1)[1].strip() for line in f if line.startswith("model name")}
    assert host["cpu_model"] in models
    path = str(tmp_path / "r.json")
    C.write_result(path, {"results": [1, 2]}, argv=["b.py"])
    import json
    with open(path) as f:
        got = json.load(f)
    assert got["results"] == [1, 2] and got["environment"]["argv"] == ["b.py"]
    assert set(got["environment"]) == {"command", "argv", "cwd", "time_utc", "git", "versions", "host"}


BACKEND_CHECK = r"""
import json, sys, tempfile, os
import matplotlib
matplotlib.use("pdf")   # the caller's choice, which drawing a benchmark figure must keep
sys.path.insert(0, sys.argv[1])
import plotting, collectives, scaling_model, param_server, overlap_timeline  # noqa
from pyhorovod.scaling import sweep_plot
after_import = matplotlib.get_backend()
agg = {(2, "core", "allreduce", 4): {"time_s": 1e-5, "busbw": 1e-3}}
d = tempfile.mkdtemp()
collectives.plot(agg, os.path.join(d, "c.png"))
sweep_plot.plot_b_simple_runs({"run": [(1, 10.0), (2, 12.0)]}, os.path.join(d, "b.png"))
print(json.dumps([after_import, matplotlib.get_backend(), "matplotlib.pyplot" in sys.modules]))
"""


def test_plotting_never_switches_the_matplotlib_backend():
    pytest.importorskip("matplotlib")
    r = subprocess.run([sys.executable, "-c", BACKEND_CHECK, BENCH], capture_output=True, text=True, timeout=180,
                       env=dict(os.environ, PYTHONPATH=ROOT, MPLBACKEND=""))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == '["pdf", "pdf", false]'


def _fake_collectives():
    """Two candidates, allreduce at n=2, four sizes; times chosen to span five decades."""
    agg = {}
    for cand, scale in (("core", 1.0), ("mpi", 2.0)):
        for nbytes, t in ((4, 2e-6), (4096, 1e-5), (1 << 20, 1e-3), (64 << 20, 5e-2)):
            agg[(2, cand, "allreduce", nbytes)] = {"time_s": t * scale,
                                                   "busbw": nbytes / (t * scale) / 1e9 * C.bus_factor("allreduce", 2)}
    return agg


def test_collectives_figure_has_log_axes_size_labels_roles_and_outside_legend():
    pytest.importorskip("matplotlib")
    fig = collectives.figure(_fake_collectives())
    fig.canvas.draw()
    time_ax, bw_ax = fig.axes
    for ax in (time_ax, bw_ax):
        assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
        assert [t.get_text() for t in ax.get_xticklabels()] == ["4", "4K", "1M", "64M"]
        assert [tuple(line.get_xdata()) for line in ax.get_lines()] == [(4, 4096, 1 << 20, 64 << 20)] * 2
        assert all(line.get_marker() == "o" for line in ax.get_lines())
    assert [line.get_linestyle() for line in time_ax.get_lines()] == ["-", "--"]
    times = time_ax.get_lines()[0].get_ydata()
    assert list(times) == pytest.approx([2.0, 10.0, 1000.0, 50000.0])   # microseconds
    legend = bw_ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["core (pyhorovod)", "mpi (peer)"]
    renderer = fig.canvas.get_renderer()
    assert legend.get_window_extent(renderer).x0 >= bw_ax.get_window_extent(renderer).x1   # off the curves


def test_size_labels():
    import plotting as P
    assert [P.size_label(s) for s in (4, 1024, 4096, 1 << 20, 8800 << 10, 64 << 20, 1 << 30)] == \
        ["4", "1K", "4K", "1M", "8.59M", "64M", "1G"]


def test_model_curves_carry_no_markers_measured_points_do():
    pytest.importorskip("matplotlib")
    curves = {f"{name}|overlap={ov}": {"ring": [0.9] * len(scaling_model.WORKERS)}
              for name in scaling_model.PUBLISHED["models"] for ov in (False, True)}
    syn = {"results": [{"cand": "pyhvd", "n": 2, "efficiency": 0.5}, {"cand": "ddp", "n": 2, "efficiency": 0.6},
                       {"cand": "pyhvd", "n": 4, "efficiency": 0.4}, {"cand": "ddp", "n": 4, "efficiency": 0.45}]}
    fig = scaling_model.figure(curves, syn)
    *model_axes, measured_ax = fig.axes
    for ax in model_axes:
        assert {line.get_marker() for line in ax.get_lines() if "model" in line.get_label()} == {"None"}
    assert {line.get_label(): line.get_marker() for line in measured_ax.get_lines()} == \
        {"ddp (peer)": "o", "pyhvd (pyhorovod)": "o"}


def test_a_benchmark_result_carries_its_environment_and_replots(tmp_path):
    """scaling_model.py measures nothing (it fits a collectives result), so it runs end to end here; its
    JSON must carry the environment, and collectives.py --replot must draw that collectives result."""
    pytest.importorskip("matplotlib")
    import json
    coll = tmp_path / "coll.json"
    C.write_result(str(coll), {"results": [dict(a, n=k[0], cand=k[1], op=k[2], bytes=k[3])
                                           for k, a in _fake_collectives().items()]})
    out = tmp_path / "model.json"
    assert scaling_model.main(["--collectives", str(coll), "--candidates", "core,mpi", "--json", str(out),
                               "--png", str(tmp_path / "model.png")]) == 0
    with open(out) as f:
        env = json.load(f)["environment"]
    assert env["versions"]["pyhorovod"] and env["git"]["commit"] and env["host"]["cores"] == os.cpu_count()
    png = tmp_path / "coll.png"
    assert collectives.main(["--replot", str(coll), "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_paired_sweep_sizes_and_counts(capsys):
    """The paired sweep skips sizes below one float per rank for per-rank ops, and its table counts the
    cells where the reference is at least as fast (ratio >= 1) and within 0.9 of the other candidate."""
    assert paired_sweep.sizes_for("allgather", 4, 4, 1024) == [16, 64, 256, 1024]
    assert paired_sweep.sizes_for("broadcast", 4, 4, 1024) == [4, 16, 64, 256, 1024]

    def cell(op, b, cand, ratio):
        return {"n": 2, "op": op, "bytes": b, "cand": cand, "wall_s": 2e-6, "cpu_s": 1e-6, "ratio_to_first": ratio}
    cells = [cell("allreduce", 4, "api", 1.0), cell("allreduce", 4, "mpi", 0.95),
             cell("allreduce", 16, "api", 1.0), cell("allreduce", 16, "mpi", 1.5),
             cell("broadcast", 4, "api", 1.0), cell("broadcast", 4, "mpi", 0.5)]
    paired_sweep.table([cells], ["api", "mpi"])
    out = capsys.readouterr().out
    assert "api at least as fast as mpi: 1 of 3 cells; at least 0.9x as fast: 2" in out
    assert out.index("allreduce") < out.index("broadcast") and "under 0.9" not in out
    # Two launches: the median and range of each ratio; with the raw core, why a cell is under 0.9.
    second = [dict(c, ratio_to_first=c["ratio_to_first"] * 0.5) for c in cells]
    core = [cell("allreduce", 4, "core", 1.0), cell("allreduce", 16, "core", 1.0), cell("broadcast", 4, "core", 0.4)]
    paired_sweep.table([cells + core, second + core], ["api", "mpi", "core"])
    out = capsys.readouterr().out
    assert "0.38 (0.25-0.50)" in out and "1.12 (0.75-1.50)" in out
    assert "api at least as fast as mpi: 1 of 3 cells; at least 0.9x as fast: 1" in out
    assert "2 cells under 0.9 of mpi; in 1 of them the raw core is at least 0.9x as fast" in out
    assert out.rstrip().endswith("as fast as mpi in: n=2 allreduce 4B (0.71)"), out


def test_perf_interleave_out_of_place_checks():
    """The out-of-place candidates (api-new, mpi-new) are checked on what they return and on their input,
    which must stay as it was: a right answer counts 0 wrong, a wrong one or a changed input does not."""

    class Fake:   # rank 1 of 2; what a correct allreduce/broadcast out of place returns
        out_of_place = True

        def __init__(self, spoil_input=False, spoil_output=False):
            self.spoil_input, self.spoil_output = spoil_input, spoil_output

        def _finish(self, a, out):
            if self.spoil_input:
                a[0] += 1
            if self.spoil_output:
                out[-1] += 1
            return out

        def allreduce_new(self, a, recv):   # rank 0 holds base * 1, rank 1 base * 2
            return self._finish(a, a / 2 * 3)

        def broadcast_new(self, a, recv):   # the root (rank 0) holds base * 3
            return self._finish(a, a / 5 * 3)

    for op in ("allreduce", "broadcast"):
        for fake, want_bad in ((Fake(), 0), (Fake(spoil_input=True), 1), (Fake(spoil_output=True), 1)):
            call, check = perf_interleave.make_call(fake, op, 64, rank=1, size=2)
            call()
            assert check() == want_bad, (op, vars(fake))
