"""Synthetic data-parallel training throughput: pyhorovod.torch against torch DDP (gloo) and Horovod.

    python benchmarks/synthetic.py --np 2,4 --rounds 3                  # MLP 1024->1024x3->1000 (4.2M)
    python benchmarks/synthetic.py --model cnn --width 64 --np 2 --candidates pyhvd,ddp
    python benchmarks/synthetic.py --hidden 2048 --layers 2 --candidates single,pyhvd,ddp,hvd-mpi  # MLP 8.3M
    python benchmarks/synthetic.py --model fmnist --candidates single,pyhvd,ddp,hvd-mpi  # the example CNN

Candidates, all running the same model, data, batch and SGD step, one thread per rank:
  single           plain torch in one process, no communication: the baseline of efficiency
  independent      N plain torch processes side by side, aligned by one barrier, with no communication
                   at all: the ceiling any data-parallel library can reach on this host (the cores, caches
                   and memory bandwidth the ranks share); not in the default list
  pyhvd            pyhorovod.torch.DistributedOptimizer (allreduce overlapped with backward by hooks)
  pyhvd-nooverlap  pyhorovod.torch, gradients allreduced only after backward (grouped, then step)
  ddp              torch.nn.parallel.DistributedDataParallel over gloo
  hvd-mpi          Horovod 0.28.1 DistributedOptimizer under mpirun (when installed)
  hvd-gloo         Horovod 0.28.1 under horovodrun --gloo (when installed; not in the default list)

Measured (every rank, not rank 0 x N): each rank times every step. Per-rank samples/s = batch x timed
steps / that rank's time; total samples/s = the sum over ranks. The timed steps are cut into windows;
the 95% interval is the t-interval over all windows of all rounds. Scaling efficiency = per-worker
throughput at N / the single process's throughput in the same round (median over rounds). Candidates
run interleaved round by round with rotating order (see shared/anchors.md: the machine is bimodal).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common as C  # noqa: E402

ALL = ["single", "independent", "pyhvd", "pyhvd-nooverlap", "ddp", "hvd-mpi", "hvd-gloo"]
DEFAULT = "single,pyhvd,pyhvd-nooverlap,ddp,hvd-mpi"
FIT_CANDIDATE = {"independent": None, "pyhvd": "api", "pyhvd-nooverlap": "api", "ddp": "gloo", "hvd-mpi": "hvd-mpi",
                 "hvd-gloo": "hvd-gloo"}


def add_mlp_args(p):
    """The MLP's shape and batch (shared/anchors.md's 4.2M model by default), for every script that
    builds it with build_model."""
    p.add_argument("--input", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=3, help="hidden layers of the MLP")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--batch", type=int, default=32, help="per rank")


def build_model(args):
    import torch.nn as nn
    if args.model == "mlp":
        layers, d = [], args.input
        for _ in range(args.layers):
            layers += [nn.Linear(d, args.hidden), nn.ReLU()]
            d = args.hidden
        layers.append(nn.Linear(d, args.classes))
        return nn.Sequential(*layers)
    if args.model == "fmnist":  # examples/fashion_mnist.py's Net (56k parameters) on 1x28x28, 10 classes
        return nn.Sequential(nn.Conv2d(1, 8, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(8, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(16 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10))
    w = args.width   # CNN on 3x32x32: two conv blocks, then a classifier
    return nn.Sequential(nn.Conv2d(3, w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(2 * w * 8 * 8, args.hidden), nn.ReLU(),
                         nn.Linear(args.hidden, args.classes))


def worker(args):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    cand = args.cand
    model = build_model(args)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rank, size, hvd, dist = 0, 1, None, None
    if cand in ("pyhvd", "pyhvd-nooverlap", "hvd-mpi", "hvd-gloo"):
        if cand.startswith("pyhvd"):
            import pyhorovod.torch as hvd
        else:
            import horovod.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        if cand != "pyhvd-nooverlap":
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    elif cand in ("ddp", "independent"):
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="env://")
        rank, size = dist.get_rank(), dist.get_world_size()
        if cand == "ddp":
            model = torch.nn.parallel.DistributedDataParallel(model)
    if args.model == "fmnist":
        args.classes = 10
    shape = {"mlp": (args.batch, args.input), "cnn": (args.batch, 3, 32, 32),
             "fmnist": (args.batch, 1, 28, 28)}[args.model]
    gen = torch.Generator().manual_seed(rank)
    data = [(torch.randn(shape, generator=gen), torch.randint(0, args.classes, (args.batch,), generator=gen))
            for _ in range(4)]
    params = [p for p in model.parameters()]

    def step(i):
        x, y = data[i % len(data)]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if cand == "pyhvd-nooverlap":   # the forced synchronize-after-backward variant
            hvd.grouped_allreduce_([p.grad for p in params], op=hvd.Average)
        opt.step()

    for i in range(args.warmup):
        step(i)
    if hvd is not None:
        hvd.allreduce(torch.zeros(1), name="bench.sync")
    elif dist is not None:
        dist.barrier()
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        step(i)
        times.append(time.perf_counter() - t0)
    nparams = sum(p.numel() for p in params)
    C.emit({"cand": cand, "n": size, "rank": rank, "batch": args.batch, "step_times": times,
            "params": nparams, "tag": args.tag})
    if hvd is not None:
        hvd.shutdown()
    elif dist is not None:
        # gloo's destroy_process_group sometimes never returns at 4 ranks (seen twice here, after every
        # rank had reported): the record is out, so leave without it.
        sys.stdout.flush()
        os._exit(0)


def launch(cand, n, args, hvd_python, tag):
    wargs = [os.path.abspath(__file__), "--worker", "--cand", cand, "--tag", tag, "--model", args.model,
             "--input", str(args.input), "--hidden", str(args.hidden), "--layers", str(args.layers),
             "--classes", str(args.classes), "--width", str(args.width), "--batch", str(args.batch),
             "--steps", str(args.steps), "--warmup", str(args.warmup)]
    env = C.python_env()
    if cand == "hvd-mpi":
        group = [(C.mpirun_prefix(n) + [hvd_python] + wargs, env)]
    elif cand == "hvd-gloo":
        runner = os.path.join(os.path.dirname(hvd_python), "horovodrun")
        group = [([runner, "--gloo", "-np", str(n), "-H", f"localhost:{n}", hvd_python] + wargs, env)]
    else:
        port = C.free_port()
        common = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(n),
                  "LOCAL_WORLD_SIZE": str(n)}
        group = [([sys.executable] + wargs, dict(env, **common, RANK=str(r), LOCAL_RANK=str(r))) for r in range(n)]
    recs = C.run_records(group, args.timeout, f"{cand} n={n}")
    if len(recs) != n:
        raise C.LaunchError(f"{cand} n={n}: {len(recs)} records for {n} ranks")
    return recs


def summarize(recs, windows):
    """One launch -> step time (median over steps of the slowest rank), total samples/s, window totals."""
    n = len(recs)
    steps = len(recs[0]["step_times"])
    per_step = [max(r["step_times"][i] for r in recs) for i in range(steps)]
    per_rank = [r["batch"] * steps / sum(r["step_times"]) for r in recs]
    k = max(1, steps // windows)
    wins = []
    for w0 in range(0, steps - k + 1, k):
        wins.append(sum(r["batch"] * k / sum(r["step_times"][w0:w0 + k]) for r in recs))
    return {"n": n, "step_s": C.median(per_step), "per_rank_sps": per_rank, "total_sps": sum(per_rank),
            "window_total_sps": wins}


def main(argv=None):
    p = C.arg_parser(__doc__)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cand", help=argparse.SUPPRESS)
    p.add_argument("--tag", default="", help=argparse.SUPPRESS)
    p.add_argument("--np", default="2,4")
    p.add_argument("--candidates", default=DEFAULT, type=C.choice_list(ALL), help=C.choices_help(ALL))
    p.add_argument("--model", choices=("mlp", "cnn", "fmnist"), default="mlp")
    add_mlp_args(p)
    p.add_argument("--width", type=int, default=32, help="channels of the CNN's first conv")
    p.add_argument("--steps", type=int, default=40, help="timed steps per launch")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--windows", type=int, default=4, help="windows per launch for the 95%% interval")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", default="synthetic.json")
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    cands = [c for c in args.candidates.split(",") if c]
    for c in cands:
        if c not in ALL:
            raise SystemExit(f"unknown candidate {c!r}; known: {', '.join(ALL)}")
    if "single" not in cands:
        cands.insert(0, "single")
    hvd_python = C.find_horovod_python() if any(c.startswith("hvd") for c in cands) else None
    skipped = {}
    for c in list(cands):
        if c.startswith("hvd") and not hvd_python:
            skipped[c] = "Horovod not installed"
            cands.remove(c)
            print(f"skipping {c}: Horovod not installed", flush=True)
    nps = [int(x) for x in args.np.split(",")]
    runs, failures = [], []   # runs: (round, cand, summary)
    t_start = time.time()
    dist_cands = [c for c in cands if c != "single"]
    for rnd in range(args.rounds):
        order = [("single", 1)] + [(c, n) for n in nps for c in
                                   dist_cands[rnd % max(1, len(dist_cands)):]
                                   + dist_cands[:rnd % max(1, len(dist_cands))]]
        for cand, n in order:
            t0 = time.time()
            try:
                recs = launch(cand, n, args, hvd_python, f"r{rnd}")
            except C.LaunchError as e:
                failures.append({"cand": cand, "n": n, "round": rnd, "error": str(e)[-4000:]})
                print(f"FAILED {cand} n={n} round {rnd}:\n{e}", flush=True)
                continue
            s = summarize(recs, args.windows)
            s["params"] = recs[0]["params"]
            runs.append((rnd, cand, s))
            print(f"round {rnd} {cand:16s} n={n} step {s['step_s'] * 1e3:7.1f} ms  "
                  f"total {s['total_sps']:8.0f} samples/s"
                  f"  ({time.time() - t0:4.1f}s)", flush=True)
    return report(runs, failures, skipped, args, t_start)


def report(runs, failures, skipped, args, t_start):
    single = {rnd: s for rnd, c, s in runs if c == "single"}
    if not single:
        print("no single-process baseline measured")
        return 1
    base_sps = C.median([s["total_sps"] for s in single.values()])
    base_step = C.median([s["step_s"] for s in single.values()])
    params = next(iter(single.values()))["params"]
    results, rows = [], []
    keys = sorted({(c, s["n"]) for _, c, s in runs if c != "single"}, key=lambda k: (k[1], ALL.index(k[0])))
    for cand, n in keys:
        mine = [(rnd, s) for rnd, c, s in runs if c == cand and s["n"] == n]
        wins = [w for _, s in mine for w in s["window_total_sps"]]
        mean, half = C.mean_ci95(wins)
        eff = [s["total_sps"] / n / single[rnd]["total_sps"] for rnd, s in mine if rnd in single]
        speed = [s["total_sps"] / single[rnd]["total_sps"] for rnd, s in mine if rnd in single]
        step = C.median([s["step_s"] for _, s in mine])
        per_rank = C.median([x for _, s in mine for x in s["per_rank_sps"]])
        res = {"cand": cand, "n": n, "step_s": step, "total_sps": C.median([s["total_sps"] for _, s in mine]),
               "total_sps_window_mean": mean, "total_sps_ci95": half, "per_rank_sps": per_rank,
               "efficiency": C.median(eff), "speedup_vs_single": C.median(speed),
               "step_s_by_round": {f"r{rnd}": s["step_s"] for rnd, s in mine}, "fit_candidate": FIT_CANDIDATE[cand]}
        results.append(res)
        rows.append([cand, n, f"{step * 1e3:.1f}", f"{per_rank:.0f}", f"{res['total_sps']:.0f}",
                     f"{mean:.0f} ± {half:.0f}",
                     f"{res['speedup_vs_single']:.2f}x", f"{res['efficiency'] * 100:.0f}%"])
    print(f"\n# synthetic training, {args.model}, {params / 1e6:.2f}M params, batch {args.batch}/rank; "
          f"single process: {base_step * 1e3:.1f} ms/step, {base_sps:.0f} samples/s")
    C.print_table(["candidate", "n", "step(ms)", "per-rank sps", "total sps", "window mean ± 95%",
                   "vs single", "efficiency"], rows)
    ratio_rows, ratios = [], []
    for ours in ("pyhvd", "pyhvd-nooverlap"):
        for peer in ("ddp", "hvd-mpi", "hvd-gloo", "pyhvd"):
            if peer == ours:
                continue
            for n in sorted({s["n"] for _, c, s in runs if c == ours}):
                a = {rnd: s["step_s"] for rnd, c, s in runs if c == ours and s["n"] == n}
                b = {rnd: s["step_s"] for rnd, c, s in runs if c == peer and s["n"] == n}
                paired = [a[r] / b[r] for r in set(a) & set(b)]
                if paired:
                    ratios.append({"ours": ours, "peer": peer, "n": n, "step_ratio_paired_median": C.median(paired)})
                    ratio_rows.append([ours, peer, n, f"{C.median(paired):.2f}", len(paired)])
    if ratio_rows:
        print("\n# step time ratios ours/peer (< 1: pyhorovod faster; targets 0.9 vs ddp, 0.8 vs Horovod)")
        C.print_table(["ours", "peer", "n", "step ratio (paired median)", "rounds"], ratio_rows)
    C.write_result(args.json, {
        "meta": {"argv": sys.argv, "seconds": time.time() - t_start, "model": args.model, "batch": args.batch,
                 "steps": args.steps, "rounds": args.rounds},
        "params": params, "grad_bytes": params * 4, "fusion_bytes": 64 << 20,
        "single_step_s": base_step, "single_sps": base_sps, "results": results, "ratios": ratios,
        "skipped": skipped, "failures": failures})
    print(f"\nwrote {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
