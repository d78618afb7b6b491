"""examples/elastic_fashion_mnist.py under the real elastic driver: one of three workers SIGKILLs itself
mid-epoch (the example's --kill-worker), the other two go back to their last commit and finish.

The "hosts" are loopback addresses (127.0.0.1 ... 127.0.0.3), as in tests/test_elastic_scenarios.py.
"""
import json
import os

import pytest

from runner_util import ROOT, run_launcher

EXAMPLE = os.path.join(ROOT, "examples", "elastic_fashion_mnist.py")
DATA = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not os.path.isdir(DATA), reason=f"needs Debian's dataset-fashion-mnist in {DATA}")
def test_elastic_example_survives_a_killed_worker(tmp_path):
    metrics = tmp_path / "metrics.json"
    run = run_launcher(["-np", "3", "--min-np", "2", "-H", "127.0.0.1:1,127.0.0.2:1,127.0.0.3:1",
                        "python", EXAMPLE, "--epochs", "2", "--limit", "3072", "--commit-every", "4",
                        "--kill-worker", "1", "--kill-at-batch", "6", "--lr", "0.025", "--metrics-json", str(metrics)],
                       timeout=300, env={"PYHOROVOD_ELASTIC_RESET_TIMEOUT_SECONDS": "30"})
    assert run.returncode == 0, run
    assert "worker 1 (rank 1) SIGKILLs itself after batch 6" in run.stdout, run
    assert "worker 1 (rank 1, host 127.0.0.2" in run.stderr and "generation 1: 2 worker(s)" in run.stderr, run
    # The reset callback ran on rank 0 after the survivors went back to the commit at batch 4.
    assert "elastic: reset, now 2 workers (global batch 128) at epoch 1, batch 4" in run.stdout, run
    result = json.loads(metrics.read_text())
    assert result["size"] == 2 and [h["epoch"] for h in result["history"]] == [1, 2], result
    assert [h["workers"] for h in result["history"]] == [2, 2], result
    # Batches in committed progress: epoch 1 = the 4 committed at size 3 (4 x 3 x 64 = 768 images), then
    # the remaining 2304 images over 2 ranks of 64 (18 batches); epoch 2 = 3072 / (2 x 64) = 24.
    assert result["batches"] == 4 + 18 + 24, result
    # lr_scaling="linear" followed the size: 0.025 x 2 x 64 / 64 once the warmup is over.
    assert result["history"][-1]["lr"] == pytest.approx(0.05), result
    assert result["history"][-1]["test_acc"] > 0.5, result   # it learned (10 classes: chance is 0.1)
