"""Train the Fashion-MNIST CNN of fashion_mnist.py on a Ray cluster with pyhorovod.ray.RayExecutor.

    ray start --head                                   # on one machine (prints the address)
    ray start --address=<head ip>:6379                 # on each other machine
    python examples/ray_fashion_mnist.py --num-workers 4 --epochs 2
    python examples/ray_fashion_mnist.py --num-hosts 2 --workers-per-host 2 --limit 4096   # 2 per node

Without a running cluster the script starts a one-machine Ray (what ray.init() does), so it runs anywhere
Ray is installed. Every node needs pyhorovod (pip install pyhorovod[ray]) and the data set at --data-dir
(Debian's dataset-fashion-mnist); this directory travels to the workers with Ray's runtime_env, so they
import fashion_mnist.py from it.

What it shows: the training function is an ordinary pyhorovod.torch loop (hvd.init(), DistributedOptimizer,
broadcast of rank 0's weights, sharding by rank); rank 0 hands each epoch's metrics to
pyhorovod.ray.report() and the driver prints them as they arrive (the run's callbacks); run() returns
every rank's final test accuracy.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def train(epochs, batch_size, lr, limit, data_dir, seed):
    """One rank's training; returns its (rank, final test accuracy)."""
    import torch
    import torch.nn.functional as F

    import pyhorovod.torch as hvd
    from pyhorovod.ray import report
    from fashion_mnist import Net, evaluate, global_sum, load

    torch.set_num_threads(1)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(seed)
    x_train, y_train = load("train", data_dir)
    x_test, y_test = load("test", data_dir)
    if limit:
        x_train, y_train = x_train[:limit], y_train[:limit]
        x_test, y_test = x_test[:max(size, limit // 6)], y_test[:max(size, limit // 6)]
    x_test, y_test = x_test[rank::size], y_test[rank::size]
    steps = len(x_train) // (size * batch_size)   # the same number of steps on every rank
    if steps == 0:
        raise ValueError(f"--limit {limit} is too small for {size} ranks of batch {batch_size}")

    model = Net()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr * size, momentum=0.9),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    test_acc = 0.0
    for epoch in range(epochs):
        perm = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(seed + epoch))
        mine = perm[rank::size][:steps * batch_size]
        loss_sum, t0 = 0.0, time.perf_counter()
        for step in range(steps):
            idx = mine[step * batch_size:(step + 1) * batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            loss_sum += loss.item()
        elapsed = time.perf_counter() - t0
        totals = global_sum([loss_sum, float(steps), steps * batch_size / elapsed], "ray_example.totals")
        test_loss, test_acc = evaluate(model, x_test, y_test, 500)
        report({"epoch": epoch + 1, "train_loss": float(totals[0] / totals[1]), "test_loss": test_loss,
                "test_acc": test_acc, "images_per_s": float(totals[2]), "seconds": elapsed})
    return rank, test_acc


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS, else a "
                                                   "running cluster, else a new one-machine Ray)")
    layout = p.add_mutually_exclusive_group()
    layout.add_argument("--num-workers", type=int, default=None, help="ranks, spread over the nodes")
    layout.add_argument("--num-hosts", type=int, default=None, help="nodes, each running --workers-per-host")
    p.add_argument("--workers-per-host", type=int, default=1)
    p.add_argument("--cpus-per-worker", type=float, default=1)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="examples per rank per step")
    p.add_argument("--lr", type=float, default=0.05, help="LR of one rank (scaled by the number of ranks)")
    p.add_argument("--limit", type=int, default=0, help="use only the first N training and N/6 test images")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--timeout", type=float, default=60, help="seconds for Ray to place the workers and for "
                                                             "them to meet")
    args = p.parse_args(argv)

    import ray
    from pyhorovod.ray import RayExecutor

    ray.init(address=args.address, runtime_env={"working_dir": HERE})
    num_workers = None if args.num_hosts else (args.num_workers or 2)
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=args.timeout), num_workers=num_workers,
                           num_hosts=args.num_hosts,
                           num_workers_per_host=args.workers_per_host, cpus_per_worker=args.cpus_per_worker)
    t0 = time.perf_counter()
    executor.start()
    print(f"{executor.num_workers} workers started in {time.perf_counter() - t0:.1f} s on "
          f"{len({s.hostname for s in executor.slots})} node(s)", flush=True)

    def show(m):
        print(f"epoch {m['epoch']}/{args.epochs}: train loss {m['train_loss']:.4f} | test loss "
              f"{m['test_loss']:.4f} acc {100 * m['test_acc']:.2f}% | {m['images_per_s']:.0f} img/s | "
              f"{m['seconds']:.1f} s", flush=True)

    try:
        results = executor.run(train, kwargs=dict(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                                                  limit=args.limit, data_dir=args.data_dir, seed=args.seed),
                               callbacks=[show])
    finally:
        executor.shutdown()
    accuracies = {acc for _, acc in results}
    print(f"final test accuracy {100 * results[0][1]:.2f}% (the same on all {len(results)} ranks: "
          f"{len(accuracies) == 1})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
