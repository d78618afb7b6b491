"""A real autoscaled elastic job on this machine: `pyhorovod run -np 1 --min-np 1 --max-np 3` with the
environment `--autoscale goodput` gives the workers (runner/autoscale_option.py), training the MLP of
benchmarks/autoscale_run.py for 2000 steps. Rank 0's autoscaler must ask the driver for more workers, the
driver must start them, and the trace must show the count change.

Why it grows here: one worker of 2 x 32 images against a live B_simple of 30-60 early in training, and
a throughput model that gives two single-threaded ranks on two cores twice the examples per second
before any 2-rank step is measured, so 2 workers predict > 10% more goodput at the first evaluations.
"""
import argparse
import csv
import json
import os
import subprocess
import sys

import pytest

from pyhorovod.runner import autoscale_option

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"


@pytest.mark.skipif(not os.path.exists(DATA), reason="dataset-fashion-mnist is not installed")
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="growing from one worker pays only with a second core")
def test_autoscaled_job_grows_from_one_worker_and_the_trace_shows_it(tmp_path):
    p = argparse.ArgumentParser()
    p.add_argument("--min-np", dest="min_np", type=int)
    p.add_argument("--max-np", dest="max_np", type=int)
    autoscale_option.add_flags(p)
    trace = str(tmp_path / "trace")
    args = p.parse_args(["--autoscale", "goodput", "--min-np", "1", "--max-np", "3", "--autoscale-every", "30",
                         "--autoscale-trace", trace])
    env = dict(os.environ, PYHOROVOD_NOISE_SCALE_LOG_EVERY="0", **autoscale_option.worker_env(args))
    out = str(tmp_path / "result.json")
    cmd = [sys.executable, "-m", "pyhorovod.run", "-np", "1", "--min-np", "1", "--max-np", "3", sys.executable,
           os.path.join(ROOT, "benchmarks", "autoscale_run.py"), "--worker", "--json", out, "--target", "0.99",
           "--max-steps", "2000"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rank 0 asks for" in proc.stdout + proc.stderr          # the driver saw the request
    with open(trace + ".csv") as f:
        lines = f.read().splitlines()
    rows = list(csv.DictReader(lines[:-1]))
    counts = [int(r["workers"]) for r in rows]
    assert counts[0] == 1 and max(counts) >= 2, counts            # the count changed during the run
    asked = [int(r["target_np"]) for r in rows if r["target_np"]]
    assert asked and asked[0] >= 2
    assert lines[-1].startswith("# worker-seconds to test accuracy 0.99: ")
    assert os.path.getsize(trace + ".png") > 10000
    result = json.load(open(out))
    assert result["step"] >= 2000
    first = result["resizes"][0]      # (step, old global batch, new global batch, LR multiplier before)
    assert first[1] == 64 and first[2] in (128, 192) and first[3] == pytest.approx(1.0)
