"""Nothing lost.

1. `pyhorovod run --max-restarts 1`: SIGKILL one rank in the middle of epoch 2 of examples/fashion_mnist.py
   (short: --limit 8192, 3 epochs, checkpoint every epoch). The launcher restarts the job, which resumes
   from the epoch-1 checkpoint and finishes; its final test accuracy must be within noise of an undisturbed
   run with the same seed (it resumes from the same weights, optimizer state and per-epoch shuffles, so in
   practice it is equal).
2. A failed synchronize never applies an optimizer step: DistributedOptimizer.step() raises, and every
   parameter and every optimizer state tensor (momentum) is bit-for-bit what it was -- whether the peer
   died, never submitted (timeout), or submitted only some of the gradients (so some allreduces completed
   and others failed). After a timeout the same optimizer keeps training.
"""
import json
import os
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

from fault_util import proc_children
from mp import run_ranks
from runner_util import ROOT, clean_env, launcher_argv

EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist.py")
DATA = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
ARGS = ["--epochs", "3", "--limit", "8192", "--seed", "3"]


def launch(tmp, tag, extra):
    ckpt, metrics = os.path.join(tmp, f"ckpt.{tag}"), os.path.join(tmp, f"metrics.{tag}.json")
    argv = launcher_argv(["--max-restarts", "1", "-np", "2", "python", EXAMPLE, *ARGS, "--checkpoint-dir",
                          ckpt, "--metrics-json", metrics, *extra])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=clean_env({"PYHOROVOD_TIMEOUT_SECONDS": "60"}), start_new_session=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    return proc, lines, reader, ckpt, metrics


def finish(proc, reader, lines, timeout):
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError("launcher timed out\n" + "".join(lines))
    reader.join(10)
    return "".join(lines)


@pytest.mark.skipif(not os.path.exists(DATA), reason="dataset-fashion-mnist is not installed")
def test_a_rank_killed_mid_epoch_restarts_from_the_checkpoint_with_the_same_accuracy(tmp_path):
    tmp = str(tmp_path)
    # The undisturbed run.
    proc, lines, reader, _, metrics = launch(tmp, "clean", [])
    out = finish(proc, reader, lines, 300)
    assert proc.returncode == 0, out
    clean = json.load(open(metrics))
    # The disturbed run: rank 1 is killed once epoch 1's checkpoint exists and epoch 2 is under way.
    proc, lines, reader, ckpt, metrics = launch(tmp, "killed", [])
    try:
        deadline, victim = time.monotonic() + 240, None
        while time.monotonic() < deadline and victim is None:
            if os.path.exists(os.path.join(ckpt, "checkpoint.pt")) and any("epoch 2/3 [###" in l for l in lines):
                ranks = {int(env.get("PYHOROVOD_RANK", -1)): pid for pid, env in proc_children(proc.pid).items()}
                victim = ranks.get(1)
            time.sleep(0.02)
        assert victim is not None, "never saw epoch 2 start\n" + "".join(lines)
        os.kill(victim, signal.SIGKILL)
        t_kill = time.monotonic()
    finally:
        out = finish(proc, reader, lines, 300)
    assert proc.returncode == 0, out
    resumed = json.load(open(metrics))
    assert "restart 1" in out and "starting at epoch 2" in out, out           # resumed, not started over
    assert resumed["restart"] == 1 and [h["epoch"] for h in resumed["history"]] == [2, 3], resumed
    a, b = clean["history"][-1]["test_acc"], resumed["history"][-1]["test_acc"]
    print(f"MEASURED fashion_mnist 2 ranks, rank 1 SIGKILLed mid epoch 2: restarted from the epoch-1 "
          f"checkpoint, final test accuracy {b:.4f} vs {a:.4f} undisturbed (job finished "
          f"{time.monotonic() - t_kill:.1f} s after the kill)")
    assert abs(a - b) <= 0.02, (a, b)


# ------------------------------------------------------------------ a failed synchronize applies nothing

def body_step(mode, tmp):
    import torch
    import pyhorovod.torch as hvd
    torch.manual_seed(0)
    hvd.init()
    r = hvd.rank()
    noise = mode.endswith("+noise")   # with the noise-scale tap, whose request rides with the last gradient
    mode = mode.split("+")[0]
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(),
                                   **({"measure_noise_scale": True, "batch_size": 16} if noise else {}))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x, y = torch.randn(16, 64) * (r + 1), torch.randint(0, 4, (16,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step()   # one good step: momentum buffers exist from now on
    names = [n for n, _ in model.named_parameters()]
    if r == 1:
        if mode == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "partial":
            # Only the first half of the gradients (by DistributedOptimizer's names), then die.
            handles = [hvd.allreduce_async_(torch.zeros_like(p), name=n)
                       for n, p in list(model.named_parameters())[:len(names) // 2]]
            for h in handles:
                hvd.synchronize(h)
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGKILL)
        # "timeout": submit nothing until rank 0 has failed, then train on together.
        while not os.path.exists(os.path.join(tmp, "failed")):
            time.sleep(0.02)
        step()
        return _trained(model, opt, noise)
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    state = {k: v["momentum_buffer"].clone() for k, v in enumerate(opt.state.values())}
    with pytest.raises(hvd.HorovodInternalError) as info:
        step()
    open(os.path.join(tmp, "failed"), "w").close()
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), params[n]), f"parameter {n} changed by a failed step"
    for k, v in enumerate(opt.state.values()):
        assert torch.equal(v["momentum_buffer"], state[k]), "momentum changed by a failed step"
    if mode != "timeout":
        return {"message": str(info.value)}
    step()   # the engine survived the timeout: the optimizer keeps working
    return _trained(model, opt, noise)


def _trained(model, opt, noise):
    """The parameters, and with the noise tap the number of steps it measured (the failed one not)."""
    out = [p.detach().numpy().tolist() for p in model.parameters()]
    return out + [[float(opt.noise_scale_report()["step"])]] if noise else out


@pytest.mark.parametrize("mode", ["killed", "partial", "timeout", "timeout+noise"])
def test_a_failed_synchronize_leaves_parameters_untouched(tmp_path, mode):
    results = run_ranks(body_step, 2, timeout=120, args=(mode, str(tmp_path)), check=False, grace=60,
                        env={"PYHOROVOD_TIMEOUT_SECONDS": "3" if mode.startswith("timeout") else "30"})
    report = "\n".join(f"rank {r.rank}: exit {r.returncode}\n{r.stderr[-3000:]}" for r in results)
    assert results[0].returncode == 0, report
    if mode.startswith("timeout"):
        assert results[1].returncode == 0, report
        for a, b in zip(results[0].value, results[1].value):   # both ranks applied the same next step
            assert np.array_equal(np.array(a), np.array(b)), report
        if mode == "timeout+noise":   # the tap forgot the failed step and measured the next one
            assert results[0].value[-1] == results[1].value[-1] == [2.0], report
    else:
        assert results[1].returncode == -signal.SIGKILL, report
        assert "rank 1" in results[0].value["message"], report
