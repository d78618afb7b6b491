"""Train a small CNN on Fashion-MNIST with pyhorovod.torch: data parallel, linear LR scaling with warmup.

    pyhorovod run -np 4 python examples/fashion_mnist.py --epochs 2          # the main job (a few minutes)
    pyhorovod run -np 2 python examples/fashion_mnist.py --epochs 1 --limit 4096   # a quick check
    mpirun --allow-run-as-root --oversubscribe -np 4 python examples/fashion_mnist.py

Written as a Horovod script (only the import differs). What it shows:
  * data from Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, IDX files read with
    numpy.frombuffer; no download), reshuffled every epoch with a seed all ranks share and sharded by rank,
    so each epoch every example is seen once by exactly one rank;
  * DistributedOptimizer applies the linear scaling rule (Goyal et al. 2017) itself: --lr is tuned for
    --base-batch examples per step; with N ranks of --batch-size each the LR becomes
    lr x N x batch-size / base-batch, reached by gradual linear warmup over --warmup-epochs;
  * rank 0 alone draws the progress bar and prints the per-epoch loss and accuracy (averaged over all
    ranks by allreduce), images/s and the global batch size;
  * --checkpoint-dir: rank 0 saves model + optimizer at the end of every epoch (atomically); a restarted
    job (`pyhorovod run --max-restarts N` exports PYHOROVOD_RESTART_COUNT) resumes at the next epoch.
One thread per rank (torch.set_num_threads(1)): the ranks share the machine's cores.
"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import pyhorovod.torch as hvd

DATA_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # of the Fashion-MNIST training images


def read_idx(path):
    """An unsigned-byte IDX file: 0x00 0x00 0x08 ndim, then ndim big-endian uint32 sizes, then the data."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if raw[:3] != b"\x00\x00\x08":
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split, data_dir):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - MEAN) / STD
    return x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


class Net(nn.Module):
    """conv 5x5 (8) - pool - conv 5x5 (16) - pool - fc 64 - fc 10: ~56k parameters, ~1 MMAC per image."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 5, padding=2)
        self.conv2 = nn.Conv2d(8, 16, 5, padding=2)
        self.fc1 = nn.Linear(16 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class ProgressBar:
    """A one-line bar on stderr, drawn by rank 0 only (redrawn in place on a terminal, else every 25%)."""

    def __init__(self, total, label, enabled):
        self.total, self.label, self.enabled = total, label, enabled
        self.tty = sys.stderr.isatty()
        self.last_quarter = -1

    def update(self, done, loss):
        if not self.enabled or self.total == 0:
            return
        frac = done / self.total
        if not self.tty:
            quarter = int(frac * 4)
            if quarter == self.last_quarter:
                return
            self.last_quarter = quarter
        bar = "#" * int(frac * 30)
        end = "\n" if (not self.tty or done == self.total) else ""
        sys.stderr.write(f"\r{self.label} [{bar:<30}] {done}/{self.total} loss {loss:.4f}{end}")
        sys.stderr.flush()


def global_sum(values, name):
    """Element-wise sums over all ranks (float64, so that counts and sums stay exact)."""
    return hvd.allreduce(torch.tensor(values, dtype=torch.float64), op=hvd.Sum, name=name)


def evaluate(model, x, y, batch):
    model.eval()
    loss_sum = correct = 0.0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out = model(x[i:i + batch])
            loss_sum += float(F.cross_entropy(out, y[i:i + batch], reduction="sum"))
            correct += float((out.argmax(1) == y[i:i + batch]).sum())
    totals = global_sum([loss_sum, correct, float(len(x))], "eval.totals")
    model.train()
    return float(totals[0] / totals[2]), float(totals[1] / totals[2])


def save_checkpoint(directory, model, optimizer, epoch):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "checkpoint.pt")
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, tmp)
    os.replace(tmp, path)  # atomic: a crash mid-save leaves the previous checkpoint intact


def add_training_args(p, epochs: int) -> None:
    """The training flags this example shares with elastic_fashion_mnist.py."""
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--batch-size", type=int, default=64, help="examples per rank per step")
    p.add_argument("--lr", type=float, default=0.05, help="LR tuned for --base-batch examples per step")
    p.add_argument("--base-batch", type=int, default=64)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--warmup-epochs", type=float, default=1.0, help="gradual warmup length (0: none)")
    p.add_argument("--lr-scaling", choices=["linear", "sqrt", "none"], default="linear")
    p.add_argument("--limit", type=int, default=0, help="use only the first N training and N/6 test images")
    p.add_argument("--data-dir", default=DATA_DIR)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_training_args(p, epochs=3)
    p.add_argument("--checkpoint-dir", default="", help="save every epoch here and resume from it")
    p.add_argument("--fail-at-epoch", type=int, default=-1,
                   help="rank 1 crashes at the start of this epoch on the first start (restart demo)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--metrics-json", default="", help="rank 0 writes the per-epoch metrics here")
    p.add_argument("--measure-noise-scale", action="store_true",
                   help="live gradient noise scale B_simple and the critical-batch advice (rank 0 prints it)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    restart = int(os.environ.get("PYHOROVOD_RESTART_COUNT", "0"))
    torch.manual_seed(args.seed)

    x_train, y_train = load("train", args.data_dir)
    x_test, y_test = load("test", args.data_dir)
    if args.limit:
        x_train, y_train = x_train[:args.limit], y_train[:args.limit]
        x_test, y_test = x_test[:max(size, args.limit // 6)], y_test[:max(size, args.limit // 6)]
    x_test, y_test = x_test[rank::size], y_test[rank::size]
    # Every rank takes the same number of steps (the remainder of an epoch is dropped): a rank with one
    # step more would wait for partners in its allreduce until the deadline.
    steps_per_epoch = len(x_train) // (size * args.batch_size)
    if steps_per_epoch == 0:
        raise SystemExit(f"--limit {args.limit} is too small for {size} ranks of batch {args.batch_size}")

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(), lr_scaling=args.lr_scaling,
        base_batch_size=args.base_batch, batch_size=args.batch_size,
        warmup_epochs=args.warmup_epochs if args.lr_scaling != "none" else None,
        steps_per_epoch=steps_per_epoch, measure_noise_scale=args.measure_noise_scale)

    start_epoch = 0
    path = os.path.join(args.checkpoint_dir, "checkpoint.pt") if args.checkpoint_dir else ""
    if rank == 0 and path and os.path.exists(path):
        ckpt = torch.load(path)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start_epoch = ckpt["epoch"]
    # Rank 0's weights, optimizer state (momentum, warmup position) and epoch become everybody's.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    start_epoch = hvd.broadcast_object(start_epoch, root_rank=0, name="start_epoch")

    global_batch = args.batch_size * size
    if rank == 0:
        print(f"pyhorovod {size} ranks, restart {restart}: {len(x_train)} train / {len(x_test) * size} test "
              f"images, global batch {global_batch} ({args.batch_size} x {size}), {steps_per_epoch} "
              f"steps/epoch, starting at epoch {start_epoch + 1}", flush=True)

    history = []
    for epoch in range(start_epoch, args.epochs):
        if epoch == args.fail_at_epoch and restart == 0 and rank == min(1, size - 1):
            raise RuntimeError(f"simulated crash of rank {rank} at epoch {epoch + 1}")
        perm = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(args.seed + epoch))
        mine = perm[rank::size][:steps_per_epoch * args.batch_size]
        bar = ProgressBar(steps_per_epoch, f"epoch {epoch + 1}/{args.epochs}", rank == 0)
        loss_sum = correct = seen = 0.0
        t0 = time.perf_counter()
        for step in range(steps_per_epoch):
            idx = mine[step * args.batch_size:(step + 1) * args.batch_size]
            x, y = x_train[idx], y_train[idx]
            optimizer.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(y)
            correct += float((out.argmax(1) == y).sum())
            seen += len(y)
            bar.update(step + 1, loss.item())
        elapsed = time.perf_counter() - t0
        # images/s: every rank's own rate, summed (not rank 0's rate times N)
        totals = global_sum([loss_sum, correct, seen, seen / elapsed], "train.totals")
        test_loss, test_acc = evaluate(model, x_test, y_test, 500)
        record = {"epoch": epoch + 1, "train_loss": float(totals[0] / totals[2]),
                  "train_acc": float(totals[1] / totals[2]), "test_loss": test_loss, "test_acc": test_acc,
                  "images_per_s": float(totals[3]), "global_batch": global_batch,
                  "lr": optimizer.applied_lr()[0], "seconds": elapsed}
        if args.measure_noise_scale:
            record["noise_scale"] = optimizer.noise_scale_report()
        history.append(record)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: train loss {record['train_loss']:.4f} acc "
                  f"{100 * record['train_acc']:.2f}% | test loss {test_loss:.4f} acc {100 * test_acc:.2f}% | "
                  f"{record['images_per_s']:.0f} img/s | global batch {global_batch} | lr "
                  f"{record['lr']:.4g} | {elapsed:.1f} s", flush=True)
            if args.checkpoint_dir:
                save_checkpoint(args.checkpoint_dir, model, optimizer, epoch + 1)
    if rank == 0 and args.metrics_json:
        with open(args.metrics_json, "w") as f:
            json.dump({"size": size, "restart": restart, "history": history}, f, indent=1)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
