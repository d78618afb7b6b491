"""Synthetic training throughput with pyhorovod.torch, in the spirit of Horovod's
pytorch_synthetic_benchmark.py (same flags where they apply; torchvision is not installed here, so the
models are an MLP and the Fashion-MNIST example's CNN).

    pyhorovod run -np 4 python examples/synthetic_benchmark.py --model mlp
    pyhorovod run -np 2 python examples/synthetic_benchmark.py --model cnn --batch-size 64 --fp16-allreduce

Each iteration runs --num-batches-per-iter steps on random data and measures this rank's images/s. The
total is measured, not extrapolated: every rank's rate is summed by an allreduce each iteration (Horovod's
script prints rank 0's rate times the number of ranks, which hides stragglers and the cost of
oversubscription).
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import pyhorovod.torch as hvd


def make_model(name):
    if name == "mlp":  # 1024 -> 2048 -> 2048 -> 1024 -> 1000: 9.4M parameters
        dims = [1024, 2048, 2048, 1024, 1000]
        layers = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        return nn.Sequential(*layers[:-1]), (1024,), 1000
    if name == "cnn":  # the examples/fashion_mnist.py network on 1x28x28 images
        model = nn.Sequential(nn.Conv2d(1, 8, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(8, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(16 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10))
        return model, (1, 28, 28), 10
    raise SystemExit(f"unknown --model {name!r} (mlp, cnn)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    p.add_argument("--batch-size", type=int, default=32, help="input batch size per rank")
    p.add_argument("--fp16-allreduce", action="store_true", help="use fp16 compression during allreduce")
    p.add_argument("--num-warmup-batches", type=int, default=5)
    p.add_argument("--num-batches-per-iter", type=int, default=5)
    p.add_argument("--num-iters", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    hvd.init()
    torch.manual_seed(1)
    model, shape, classes = make_model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn((args.batch_size,) + shape)
    target = torch.randint(0, classes, (args.batch_size,))

    def benchmark_step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    def log(text):
        if hvd.rank() == 0:
            print(text, flush=True)

    nparams = sum(p.numel() for p in model.parameters())
    log(f"Model: {args.model} ({nparams / 1e6:.2f}M parameters)")
    log(f"Batch size: {args.batch_size}")
    log(f"Number of ranks: {hvd.size()}")
    log(f"Compression: {'fp16' if args.fp16_allreduce else 'none'}")
    for _ in range(args.num_warmup_batches):
        benchmark_step()

    per_rank, totals = [], []
    for i in range(args.num_iters):
        t0 = time.perf_counter()
        for _ in range(args.num_batches_per_iter):
            benchmark_step()
        rate = args.batch_size * args.num_batches_per_iter / (time.perf_counter() - t0)
        total = float(hvd.allreduce(torch.tensor([rate], dtype=torch.float64), op=hvd.Sum,
                                    name=f"rate.{i}")[0])
        per_rank.append(rate)
        totals.append(total)
        log(f"Iter #{i}: {rate:.1f} img/sec on rank 0, {total:.1f} img/sec in total")

    mean = statistics.mean(totals)
    conf = 1.96 * statistics.stdev(totals) if len(totals) > 1 else 0.0
    log(f"Img/sec per rank (rank 0): {statistics.mean(per_rank):.1f}")
    log(f"Total img/sec on {hvd.size()} rank(s): {mean:.1f} +-{conf:.1f} (sum of every rank's measured "
        f"rate, mean over {len(totals)} iterations, 95% interval)")
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
