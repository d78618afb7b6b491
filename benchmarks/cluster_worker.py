"""One rank of one candidate in benchmarks/cluster.py (launched by it inside a network namespace).

    python benchmarks/cluster_worker.py CANDIDATE MODE --model {mlp,cnn} --steps N --warmup N --eval-every N

CANDIDATE: single (one process, no communication), pyhvd-{none,fp16,bf16,powersgd,hier} (hier: uncompressed,
with the hierarchical allreduce forced on by the driver's HOROVOD_HIERARCHICAL_ALLREDUCE=1),
ddp-{none,fp16,powersgd}, hvd-{none,fp16} (Horovod 0.28.1 over gloo, run by its venv's Python). Rank and
size come from the variables the driver sets (PYHOROVOD_*, HOROVOD_* or torch's RANK/WORLD_SIZE/MASTER_ADDR).
--model mlp is the 4.2M-parameter MLP of /work/shared/anchors.md
(1024 -> 1024 x 3 -> 1000, ReLU) on Fashion-MNIST: images zero-padded to 32 x 32 = 1024 inputs, labels 0-9
of the 1000 outputs. --model cnn is examples/fashion_mnist.py's Net (56k parameters, ~1 MMAC per image) on
the 1 x 28 x 28 images. Batch 32 per rank, SGD with momentum. Every rank reads its own shard of one shuffled
order of the training set.

MODE throughput: --warmup untimed steps (past PowerSGD's start_iter, so compression is on), then --steps
timed ones; one record per rank with the step times. MODE accuracy: --steps steps from the start; every
--eval-every steps rank 0 measures test accuracy on the first 5000 test images and records it with the
training time so far (its own clock, the evaluations left out: the other ranks wait for rank 0 in the
next step's allreduce, which rank 0 does not count). MODE allreduce (pyhvd-none, ddp-none, hvd-none): the gradient's
allreduce alone, --warmup untimed and --steps timed calls (probe_allreduce).
"""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "examples")]
import common as C  # noqa: E402

BATCH = 32
LR, MOMENTUM = 0.02, 0.9
POWERSGD = dict(rank=4, start_iter=10, min_compression_rate=2)
TEST_IMAGES = 5000


def build_mlp():
    import torch.nn as nn
    layers, d = [], 1024
    for _ in range(3):
        layers += [nn.Linear(d, 1024), nn.ReLU()]
        d = 1024
    return nn.Sequential(*layers, nn.Linear(d, 1000))


def build_model(name):
    if name == "cnn":
        from fashion_mnist import Net
        return Net()
    return build_mlp()


def load(split, model_name):
    import torch
    from pyhorovod.scaling.fmnist import load_fashion_mnist
    x, y = load_fashion_mnist(split)
    x = x.astype(np.float32) / 255.0
    if model_name == "mlp":
        x = np.pad(x, ((0, 0), (2, 2), (2, 2)))   # 28x28 -> 32x32 (black borders, then normalized)
    x = (x - 0.2860) / 0.3530
    shape = (len(x), 1, 28, 28) if model_name == "cnn" else (len(x), -1)
    return torch.from_numpy(x.reshape(shape)), torch.from_numpy(y)


def horovod_module(cand):
    """pyhorovod.torch for pyhvd-*, Horovod 0.28.1's horovod.torch for hvd-* (the same API)."""
    if cand.startswith("hvd-"):
        import horovod.torch as hvd
    else:
        import pyhorovod.torch as hvd
    return hvd


def setup(cand, model, opt):
    """Returns (model, opt, rank, size, done): the candidate's wrapping and a function to end the job."""
    import torch
    if cand == "single":
        return model, opt, 0, 1, lambda: None
    if cand.startswith(("pyhvd-", "hvd-")):
        hvd = horovod_module(cand)
        hvd.init()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        kind = cand.split("-", 1)[1]
        compression = {"none": hvd.Compression.none, "hier": hvd.Compression.none, "fp16": hvd.Compression.fp16,
                       "bf16": getattr(hvd.Compression, "bf16", None)}.get(kind) or hvd.PowerSGD(**POWERSGD)
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), compression=compression)
        return model, opt, hvd.rank(), hvd.size(), hvd.shutdown
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    dist.init_process_group("gloo", init_method="env://")
    kind = cand[len("ddp-"):]
    # torch's PowerSGD hook over gloo needs one bucket (several buckets mismatched collectives: anchors.md)
    model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=100 if kind == "powersgd" else 25)
    if kind == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif kind == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=POWERSGD["rank"],
            start_powerSGD_iter=POWERSGD["start_iter"], min_compression_rate=POWERSGD["min_compression_rate"],
            use_error_feedback=True, warm_start=True)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)

    def done():
        # gloo's destroy_process_group can hang at 4 ranks after the work is done: leave without it
        sys.stdout.flush()
        os._exit(0)
    return model, opt, dist.get_rank(), dist.get_world_size(), done


def probe_allreduce(cand, model, steps, warmup, rank, size):
    """The communication alone: the model's gradient (4.2M floats) as one flat tensor and as its per-layer
    tensors (what the optimizer sends), each timed from the first submission to the last completion."""
    import torch
    tensors = [torch.zeros_like(p) for p in model.parameters()]
    flat = torch.zeros(sum(t.numel() for t in tensors))
    if cand.startswith(("pyhvd", "hvd")):
        hvd = horovod_module(cand)

        def run_flat():
            hvd.allreduce_(flat, name="probe.flat")

        def run_tensors():
            handles = [hvd.allreduce_async_(t, name=f"probe.{i}") for i, t in enumerate(tensors)]
            for h in handles:
                hvd.synchronize(h)
    else:
        import torch.distributed as dist

        def run_flat():
            dist.all_reduce(flat)

        def run_tensors():
            for work in [dist.all_reduce(t, async_op=True) for t in tensors]:
                work.wait()
    times = {"flat": [], "tensors": []}
    for i in range(warmup + steps):
        for kind, fn in (("flat", run_flat), ("tensors", run_tensors)):
            t0 = time.perf_counter()
            fn()
            if i >= warmup:
                times[kind].append(time.perf_counter() - t0)
    C.emit({"cand": cand, "rank": rank, "size": size, "bytes": flat.numel() * 4, **times})


def main(argv=None):
    import torch
    import torch.nn.functional as F
    p = C.arg_parser(__doc__)
    p.add_argument("cand", choices=["single", "pyhvd-none", "pyhvd-fp16", "pyhvd-bf16", "pyhvd-powersgd",
                                    "pyhvd-hier", "ddp-none", "ddp-fp16", "ddp-powersgd", "hvd-none", "hvd-fp16"])
    p.add_argument("mode", choices=["throughput", "accuracy", "allreduce"])
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=12)
    p.add_argument("--eval-every", type=int, default=30)
    p.add_argument("--seed", type=int, default=0, help="added to the model's and the data order's seeds")
    args = p.parse_args(argv)
    cand, mode, steps, warmup, eval_every = args.cand, args.mode, args.steps, args.warmup, args.eval_every
    torch.set_num_threads(1)
    torch.manual_seed(1234 + args.seed)
    model = build_model(args.model)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    model, opt, rank, size, done = setup(cand, model, opt)
    x_train, y_train = load("train", args.model)
    order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(7 + args.seed))
    per_step = BATCH * size

    def batch(i):
        start = (i * per_step) % (len(order) - per_step + 1) + rank * BATCH
        idx = order[start:start + BATCH]
        return x_train[idx], y_train[idx]

    def step(i):
        x, y = batch(i)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    if mode == "allreduce":
        probe_allreduce(cand, model, steps, warmup, rank, size)
        done()
        return
    if mode == "throughput":
        for i in range(warmup):
            step(i)
        times = []
        for i in range(warmup, warmup + steps):
            t0 = time.perf_counter()
            step(i)
            times.append(time.perf_counter() - t0)
        C.emit({"cand": cand, "rank": rank, "size": size, "step_times": times, "batch": BATCH})
        done()
        return
    x_test, y_test = load("test", args.model)
    x_test, y_test = x_test[:TEST_IMAGES], y_test[:TEST_IMAGES]
    curve, train_s = [], 0.0
    for i in range(steps):
        t0 = time.perf_counter()
        step(i)
        train_s += time.perf_counter() - t0
        if rank == 0 and ((i + 1) % eval_every == 0 or i + 1 == steps):
            with torch.no_grad():
                acc = float((model(x_test).argmax(1) == y_test).float().mean())
            curve.append({"step": i + 1, "train_s": train_s, "accuracy": acc})
    if rank == 0:
        C.emit({"cand": cand, "rank": rank, "size": size, "curve": curve, "batch": BATCH,
                "epochs": steps * per_step / len(x_train)})
    done()


if __name__ == "__main__":
    main()
