"""Training step time: pyhorovod.torch.DistributedOptimizer against torch DistributedDataParallel (gloo).

    python benchmarks/torch_step.py                       # MLP 9.4M and the example CNN, 2 and 4 ranks
    python benchmarks/torch_step.py --np 2 --models cnn --rounds 5 --steps 30

Same model, data, batch, SGD-momentum step and one thread per rank for both candidates. A step is
zero_grad + forward + backward + optimizer step; both candidates overlap the gradient allreduce with
backward (pyhorovod: per-parameter hooks and tensor fusion; DDP: 25 MiB buckets). Each rank times every
step; a launch reports each rank's median step time and the launch's figure is the slowest rank's median
(a data-parallel step is as slow as its slowest rank). Candidates are launched interleaved, round by round
with alternating order, because this machine flips between a fast and a slow state (shared/anchors.md);
the headline is the median over rounds of the per-round ratio DDP / pyhorovod (> 1: pyhorovod faster).
Horovod 0.28.1 is a third candidate when `import horovod.torch` works; it is not installed here.
"""
import argparse
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # pyhorovod from the source tree (built in place by `make build`)
MARK = "@@STEP "


def build(model_name):
    import torch.nn as nn
    if model_name == "mlp":  # 1024 -> 2048 -> 2048 -> 1024 -> 1000: 9.4M parameters
        dims = [1024, 2048, 2048, 1024, 1000]
        layers = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        return nn.Sequential(*layers[:-1]), (1024,), 1000
    # the examples/fashion_mnist.py CNN (56k parameters) on 1x28x28
    return nn.Sequential(nn.Conv2d(1, 8, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(16 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10)), (1, 28, 28), 10


def worker(candidate, models, batch, warmup, steps):
    """One rank: for each model, `warmup` untimed then `steps` timed steps; prints one record per model."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    if candidate == "pyhvd":
        import pyhorovod.torch as hvd
        hvd.init()
        rank = hvd.rank()
    elif candidate == "horovod":
        import horovod.torch as hvd
        hvd.init()
        rank = hvd.rank()
    else:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
    for model_name in models:
        torch.manual_seed(0)
        model, shape, classes = build(model_name)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        if candidate in ("pyhvd", "horovod"):
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            net = model
        else:
            from torch.nn.parallel import DistributedDataParallel
            net = DistributedDataParallel(model)
        g = torch.Generator().manual_seed(rank)
        x = torch.randn((batch,) + shape, generator=g)
        y = torch.randint(0, classes, (batch,), generator=g)
        times = []
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        nparams = sum(p.numel() for p in model.parameters())
        print(MARK + json.dumps({"model": model_name, "rank": rank, "params": nparams,
                                 "median_s": statistics.median(times), "times": times}), flush=True)
    if candidate in ("pyhvd", "horovod"):
        hvd.shutdown()
    else:
        import torch.distributed as dist
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(candidate, n, args):
    """Runs n ranks of `worker`; returns {model: slowest rank's median step time}."""
    from pyhorovod import _core
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("OMPI_", "PMI_", "SLURM_", "PYHOROVOD_", "HOROVOD_"))}
    base.update(PYTHONPATH=ROOT, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                WORLD_SIZE=str(n))
    server = None
    if candidate == "pyhvd":
        secret = secrets.token_hex(16)
        server = _core.TcpStoreServer("127.0.0.1", 0, secret.encode())
        base.update(PYHOROVOD_SIZE=str(n), PYHOROVOD_LOCAL_SIZE=str(n), PYHOROVOD_STORE_ADDR="127.0.0.1",
                    PYHOROVOD_STORE_PORT=str(server.port), PYHOROVOD_SECRET=secret)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", candidate, "--models", args.models,
           "--batch", str(args.batch), "--warmup", str(args.warmup), "--steps", str(args.steps)]
    procs = []
    try:
        for r in range(n):
            env = dict(base, RANK=str(r), LOCAL_RANK=str(r), PYHOROVOD_RANK=str(r), PYHOROVOD_LOCAL_RANK=str(r))
            if candidate != "pyhvd":
                env = {k: v for k, v in env.items() if not k.startswith("PYHOROVOD_")}
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, start_new_session=True))
        outs = []
        deadline = time.monotonic() + args.timeout
        for p in procs:
            try:
                outs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise RuntimeError(f"{candidate} n={n}: timed out after {args.timeout} s")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if server is not None:
            server.close()
    result = {}
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        if p.returncode != 0:
            raise RuntimeError(f"{candidate} n={n} rank {r} exited {p.returncode}:\n{err[-3000:]}")
        for line in out.splitlines():
            if line.startswith(MARK):
                rec = json.loads(line[len(MARK):])
                prev = result.get(rec["model"], (0.0, 0))
                result[rec["model"]] = (max(prev[0], rec["median_s"]), rec["params"])
    return result


def _horovod_installed():
    try:
        import horovod.torch  # noqa: F401
        return True
    except ImportError:
        return False


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--np", default="2,4")
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--batch", type=int, default=32, help="examples per rank per step")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--json", default=os.path.join(ROOT, "results", "torch_step.json"))
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    models = args.models.split(",")
    if args.worker:
        worker(args.worker, models, args.batch, args.warmup, args.steps)
        return 0

    candidates = ["pyhvd", "ddp"] + (["horovod"] if _horovod_installed() else [])
    if "horovod" not in candidates:
        print("Horovod 0.28.1 is not installed here (import horovod.torch fails): comparing with DDP only")
    sizes = [int(s) for s in args.np.split(",")]
    rounds = {(c, n): [] for c in candidates for n in sizes}
    params = {}
    for rnd in range(args.rounds):
        for n in sizes:
            order = candidates if rnd % 2 == 0 else candidates[::-1]
            for c in order:
                res = launch(c, n, args)
                rounds[(c, n)].append({m: v[0] for m, v in res.items()})
                params.update({m: v[1] for m, v in res.items()})
                print(f"round {rnd + 1} n={n} {c:6s} " + "  ".join(f"{m} {1e3 * v[0]:.1f} ms" for m, v in res.items()),
                      flush=True)

    rows, summary = [], []
    for m in models:
        for n in sizes:
            med = {c: statistics.median(r[m] for r in rounds[(c, n)]) for c in candidates}
            ratios = [rd[m] / rp[m] for rp, rd in zip(rounds[("pyhvd", n)], rounds[("ddp", n)])]
            entry = {"model": m, "params": params.get(m), "np": n, "batch": args.batch,
                     "median_step_ms": {c: 1e3 * v for c, v in med.items()},
                     "ratio_ddp_over_pyhvd_median": statistics.median(ratios), "ratios_per_round": ratios,
                     "rounds_ms": {c: [1e3 * r[m] for r in rounds[(c, n)]] for c in candidates}}
            summary.append(entry)
            rows.append(f"{m:4s} {params.get(m, 0) / 1e6:5.2f}M  n={n}  pyhvd {1e3 * med['pyhvd']:8.1f} ms   "
                        f"ddp {1e3 * med['ddp']:8.1f} ms   ddp/pyhvd {statistics.median(ratios):5.2f} "
                        f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)})")
    print("\nmedian step time over rounds (slowest rank's median per launch), batch %d per rank:" % args.batch)
    print("\n".join(rows))
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"horovod_installed": "horovod" in candidates, "results": summary}, f, indent=1)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
