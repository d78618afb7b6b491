"""The Fashion-MNIST CNN of fashion_mnist.py, trained elastically: workers may die or join mid-epoch.

    pyhorovod run -np 4 --min-np 2 --max-np 4 --host-discovery-script examples/elastic_hosts.sh \
        python examples/elastic_fashion_mnist.py --epochs 2
    make elastic-demo     # kills one worker and adds one during training, then compares with fashion_mnist.py

Data, model and evaluation come from fashion_mnist.py (imported). What the elastic version adds:
  * hvd.elastic.run wraps the training function: after a worker dies, the survivors go back to the last
    commit (state.restore()), re-form at the new size and carry on; when discovery adds a host they
    re-form at the next commit without going back;
  * TorchState holds the model, the optimizer (momentum and the warmup position), an ElasticSampler and
    the epoch; state.commit() every --commit-every batches (and at the end of each epoch) is the point a
    failure goes back to;
  * ElasticSampler: after a resize the samples of the epoch not yet committed are split over the new
    ranks, so each training image is still used once per epoch;
  * DistributedOptimizer(lr_scaling=...) rescales the LR to the new global batch after a resize; a reset
    callback prints the new size (rank 0);
  * --kill-worker W --kill-at-batch B: worker W (the launcher's PYHOROVOD_WORKER_ID) SIGKILLs itself after
    the job's B-th batch, to see a failure (the demo does this).
"""
import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

import pyhorovod.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import Net, add_training_args, evaluate, load  # noqa: E402 -- needs the path above


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_training_args(p, epochs=2)
    p.add_argument("--commit-every", type=int, default=10, help="batches between commits")
    p.add_argument("--kill-worker", default="", help="this worker id SIGKILLs itself (failure demo)")
    p.add_argument("--kill-at-batch", type=int, default=-1, help="... after the job's batch number N")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--metrics-json", default="", help="rank 0 writes the per-epoch metrics here")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    # Data, model and optimizer come before init(): a worker that joins a running job takes its place at
    # init(), and the others wait in their next sync for whatever it does after that.
    x_train, y_train = load("train", args.data_dir)
    x_test, y_test = load("test", args.data_dir)
    if args.limit:
        x_train, y_train = x_train[:args.limit], y_train[:args.limit]
        x_test, y_test = x_test[:args.limit // 6], y_test[:args.limit // 6]
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    hvd.init()
    # The warmup is counted in steps of the job's first size; after a resize it goes on from its position.
    steps_per_epoch = len(x_train) // (hvd.size() * args.batch_size)
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(), lr_scaling=args.lr_scaling,
        base_batch_size=args.base_batch, batch_size=args.batch_size,
        warmup_epochs=args.warmup_epochs if args.lr_scaling != "none" else None,
        steps_per_epoch=max(1, steps_per_epoch))
    sampler = hvd.elastic.ElasticSampler(range(len(x_train)), shuffle=True, seed=args.seed)
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0, batches=0,
                                   history=[])
    worker = os.environ.get("PYHOROVOD_WORKER_ID", "")

    def announce_size():
        if hvd.rank() == 0:
            print(f"elastic: reset, now {hvd.size()} workers (global batch {hvd.size() * args.batch_size}) "
                  f"at epoch {state.epoch + 1}, batch {state.batches}", flush=True)

    state.register_reset_callbacks([announce_size])

    @hvd.elastic.run
    def train(state):
        rank, size = hvd.rank(), hvd.size()
        if rank == 0:
            print(f"elastic: training on {size} workers from epoch {state.epoch + 1}, batch {state.batches}",
                  flush=True)
        while state.epoch < args.epochs:
            state.sampler.set_epoch(state.epoch)
            mine = torch.tensor(list(state.sampler), dtype=torch.int64)
            t0 = time.perf_counter()
            for b in range(-(-len(mine) // args.batch_size)):   # the same count on every rank (padding)
                idx = mine[b * args.batch_size:(b + 1) * args.batch_size]
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
                loss.backward()
                optimizer.step()
                state.sampler.record_batch(b, args.batch_size)
                state.batches += 1
                if worker == args.kill_worker and state.batches == args.kill_at_batch:
                    print(f"elastic: worker {worker} (rank {rank}) SIGKILLs itself after batch {state.batches}",
                          flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                if state.batches % args.commit_every == 0:
                    state.commit()
            test_loss, test_acc = evaluate(model, x_test[rank::size], y_test[rank::size], 500)
            state.history.append({"epoch": state.epoch + 1, "test_loss": test_loss, "test_acc": test_acc,
                                  "workers": size, "lr": optimizer.applied_lr()[0]})
            if rank == 0:
                print(f"epoch {state.epoch + 1}/{args.epochs}: test loss {test_loss:.4f} acc "
                      f"{100 * test_acc:.2f}% | {size} workers | lr {optimizer.applied_lr()[0]:.4g} | "
                      f"{time.perf_counter() - t0:.1f} s since this epoch's last (re)start", flush=True)
            state.epoch += 1
            state.commit()
        if hvd.rank() == 0 and args.metrics_json:
            with open(args.metrics_json, "w") as f:
                json.dump({"size": hvd.size(), "batches": state.batches, "history": state.history}, f, indent=1)

    train(state)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
