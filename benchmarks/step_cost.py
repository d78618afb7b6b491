"""What communication costs a data-parallel training step, measured inside one launch.

    python benchmarks/step_cost.py --np 2                      # MLP 1024->1024x3->1000 (4.2M), batch 32
    python benchmarks/step_cost.py --np 2 --hidden 2048 --layers 2

Every rank builds identical twin models and runs, step after step, one step of each mode in turn:
  none     plain SGD, no communication: what N ranks side by side cost each other (cores, caches, memory)
  overlap  pyhorovod.torch.DistributedOptimizer: each gradient's allreduce starts from its hook in backward
  after    backward, then every gradient's allreduce_async_ (in backward's order), synchronize, SGD step
  comm     only the allreduces of `after`, on gradients already computed: the collective's own time
A tiny allreduce aligns the ranks before each step. The machine flips between a fast and a slow state
(shared/anchors.md), so the costs are paired: for every step index, mode minus the `none` step that ran
just before it in the same state; medians over steps, with a 95% interval. Wall = the step's elapsed
time; CPU = time.process_time() over the step (every thread of the process: the training thread and the
engine's). Wall minus CPU is time the process had no thread running: waiting for the other ranks. The
spread of the end of backward across ranks in `none` steps (which start aligned) is what a synchronous
step must wait for the slowest rank.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common as C  # noqa: E402
import synthetic as S  # noqa: E402

MODES = ("none", "overlap", "after", "comm")
PAIRED = ("overlap", "after")   # steps that do what `none` does, plus communication


def worker(args):
    import torch
    import torch.nn.functional as F
    import pyhorovod.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    models = {}
    for mode in MODES:
        torch.manual_seed(1234)
        models[mode] = S.build_model(args)
    opts = {m: torch.optim.SGD(models[m].parameters(), lr=0.01) for m in MODES}
    opts["overlap"] = hvd.DistributedOptimizer(opts["overlap"], named_parameters=models["overlap"].named_parameters())
    gen = torch.Generator().manual_seed(hvd.rank())
    x = torch.randn(args.batch, args.input, generator=gen)
    y = torch.randint(0, args.classes, (args.batch,), generator=gen)
    F.cross_entropy(models["comm"](x), y).backward()   # the gradients `comm` reduces, again and again
    backward_order = {m: list(reversed(list(models[m].parameters()))) for m in MODES}

    def allreduce_all(params, tag):
        handles = [hvd.allreduce_async_(p.grad, name=f"{tag}.{i}") for i, p in enumerate(params)]
        for h in handles:
            hvd.synchronize(h)

    def step(mode):
        if mode == "comm":
            return allreduce_all(backward_order["comm"], "comm")
        opts[mode].zero_grad()
        F.cross_entropy(models[mode](x), y).backward()
        if mode == "none":
            backward_ends.append(time.perf_counter())
        if mode == "after":
            allreduce_all(backward_order["after"], "after")
        opts[mode].step()

    backward_ends = []   # perf_counter is CLOCK_MONOTONIC: comparable across the processes of one host
    wall = {m: [] for m in MODES}
    cpu = {m: [] for m in MODES}
    for i in range(args.warmup + args.steps):
        for mode in MODES:
            hvd.allreduce(torch.zeros(1), name="step_cost.align")
            t0, c0 = time.perf_counter(), time.process_time()
            step(mode)
            if i >= args.warmup:
                wall[mode].append(time.perf_counter() - t0)
                cpu[mode].append(time.process_time() - c0)
    C.emit({"rank": hvd.rank(), "n": hvd.size(), "wall": wall, "cpu": cpu,
            "backward_ends": backward_ends[args.warmup:],
            "params": sum(p.numel() for p in models["none"].parameters())})
    hvd.shutdown()


def launch(args):
    wargs = [os.path.abspath(__file__), "--worker", "--input", str(args.input), "--hidden", str(args.hidden),
             "--layers", str(args.layers), "--classes", str(args.classes), "--batch", str(args.batch),
             "--steps", str(args.steps), "--warmup", str(args.warmup)]
    env = C.python_env()
    port = C.free_port()
    common = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(args.np),
              "LOCAL_WORLD_SIZE": str(args.np)}
    group = [([sys.executable] + wargs, dict(env, **common, RANK=str(r), LOCAL_RANK=str(r))) for r in range(args.np)]
    recs = C.run_records(group, args.timeout, f"step_cost n={args.np}")
    if len(recs) != args.np:
        raise C.LaunchError(f"step_cost n={args.np}: {len(recs)} records for {args.np} ranks")
    return sorted(recs, key=lambda r: r["rank"])


def report(recs, args):
    ms = lambda s: f"{s * 1e3:.2f}"  # noqa: E731
    print(f"# step cost, mlp {recs[0]['params'] / 1e6:.2f}M params, batch {args.batch}/rank, {args.np} ranks, "
          f"{args.steps} steps of each mode, alternated")
    rows, out = [], {}
    for r in recs:
        for mode in MODES:
            w, c = r["wall"][mode], r["cpu"][mode]
            paired = [a - b for a, b in zip(w, r["wall"]["none"])]
            paired_cpu = [a - b for a, b in zip(c, r["cpu"]["none"])]
            med, (lo, hi), _ = C.median_ci95(paired)
            rows.append([r["rank"], mode, ms(C.median(w)), ms(C.median(c)), ms(C.median([a - b for a, b in zip(w, c)])),
                         f"{ms(med)} ({ms(lo)}..{ms(hi)})" if mode in PAIRED else "-",
                         ms(C.median(paired_cpu)) if mode in PAIRED else "-"])
            out[f"{r['rank']}|{mode}"] = {"wall_s": C.median(w), "cpu_s": C.median(c), "paired_wall_s": med,
                                          "paired_wall_ci95": [lo, hi], "paired_cpu_s": C.median(paired_cpu)}
    C.print_table(["rank", "mode", "wall ms", "cpu ms", "idle ms", "wall - none ms (95% CI)", "cpu - none ms"], rows)
    # Straggler spread: in `none` steps (aligned at their start), how far apart the ranks end backward.
    spread = [max(ends) - min(ends) for ends in zip(*(r["backward_ends"] for r in recs))]
    out["backward_end_spread_s"] = C.median(spread)
    print(f"\nend of backward in `none` steps, latest rank minus earliest: median {ms(C.median(spread))} ms")
    return out


def main(argv=None):
    p = C.arg_parser(__doc__)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--np", type=int, default=2)
    S.add_mlp_args(p)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--json", default="step_cost.json")
    args = p.parse_args(argv)
    args.model = "mlp"
    if args.worker:
        return worker(args)
    recs = launch(args)
    summary = report(recs, args)
    C.write_result(args.json, {"args": vars(args), "summary": summary, "records": recs})
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
