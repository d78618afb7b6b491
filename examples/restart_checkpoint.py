"""Resume from a checkpoint after `pyhorovod run --max-restarts N` restarts the job.

    pyhorovod run -np 2 --max-restarts 1 python examples/restart_checkpoint.py --fail-at-step 25

The pattern (as with torchrun's restarts):
  * every rank starts by loading the last checkpoint, if any, and continues from the step it records;
  * rank 0 writes a checkpoint every --every steps, atomically (write a temporary file, then rename), so a
    crash in the middle of a save leaves the previous checkpoint intact;
  * the data of a step depends only on (rank, step), so a resumed job sees exactly the batches the
    interrupted one would have: the final weights are bit-for-bit those of an undisturbed run.
PYHOROVOD_RESTART_COUNT (0 on the first start, 1 after the first restart, ...) is only used here to
inject one failure, on the first start; a real script needs nothing but the checkpoint.

The model is a linear regression trained by SGD on synthetic data, with numpy and pyhorovod's
framework-free API (pyhorovod.torch works the same way: save model and optimizer state_dicts).
"""
import argparse
import hashlib
import os
import sys

import numpy as np

import pyhorovod as hvd

DIM = 8
W_TRUE = np.linspace(-1.0, 1.0, DIM)


def batch(rank: int, step: int, n: int = 64):
    rng = np.random.default_rng([rank, step])
    x = rng.standard_normal((n, DIM))
    y = x @ W_TRUE + 0.01 * rng.standard_normal(n)
    return x, y


def load(path: str):
    """(weights, next step) from the checkpoint, or a fresh start."""
    if not os.path.exists(path):
        return np.zeros(DIM), 0
    with np.load(path) as ckpt:
        return ckpt["w"].copy(), int(ckpt["step"])


def save(path: str, w: np.ndarray, step: int) -> None:
    tmp = f"{path}.tmp{os.getpid()}.npz"
    np.savez(tmp, w=w, step=step)
    os.replace(tmp, path)  # atomic: readers see the old or the new checkpoint, never half of one


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--every", type=int, default=10, help="checkpoint interval in steps")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--checkpoint", default="restart_checkpoint.npz")
    p.add_argument("--fail-at-step", type=int, default=-1,
                   help="rank 1 crashes at this step on the first start (to show the restart)")
    args = p.parse_args(argv)

    hvd.init()
    restart = int(os.environ.get("PYHOROVOD_RESTART_COUNT", "0"))
    w, start = load(args.checkpoint)
    # Every rank read the same file, but a broadcast makes sure they start identical even if rank 0 saved
    # a newer checkpoint while another rank was loading.
    w = hvd.broadcast(w, root_rank=0, name="w0")
    start = int(hvd.broadcast(np.array([start], np.int64), root_rank=0, name="step0")[0])
    if hvd.rank() == 0:
        print(f"restart {restart}: starting at step {start}", flush=True)

    for step in range(start, args.steps):
        if step == args.fail_at_step and restart == 0 and hvd.rank() == min(1, hvd.size() - 1):
            raise RuntimeError(f"simulated crash of rank {hvd.rank()} at step {step}")
        x, y = batch(hvd.rank(), step)
        grad = x.T @ (x @ w - y) / len(y)
        grad = hvd.allreduce(grad, op=hvd.Average, name="grad")
        w = w - args.lr * grad
        if hvd.rank() == 0 and (step + 1) % args.every == 0:
            save(args.checkpoint, w, step + 1)

    if hvd.rank() == 0:
        digest = hashlib.sha256(w.tobytes()).hexdigest()[:16]
        print(f"done: {args.steps} steps, |w - w_true| = {np.linalg.norm(w - W_TRUE):.4f}, weights {digest}",
              flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
