"""What pyhorovod adds on one GPU at one rank, measured in one process, interleaved:

1. Step time of a model trained with hvd.DistributedOptimizer against the same model with plain torch
   (goal <= 1.03x on a model whose plain step takes >= --min-step-ms: the batch doubles until it does).
2. The fusion buffer's device copies against the device's own copy bandwidth (goal >= 70%): a grouped
   allreduce of k tensors (k copies into the fusion buffer, the reduction, k copies out) against a lone
   in-place allreduce of the same bytes (no copies; submitted the same way, as a group of one, so both
   wait for the engine's cycle alike); fusion copy bandwidth = 2 x bytes / (fused - lone), copy
   bandwidth = bytes / time of one device-to-device copy of the same size.

    python benchmarks/gpu_overhead.py [--device cuda|cpu] [--rounds 7] [--json gpu_overhead.json]

--device cpu rehearses the same code on host tensors (tensors of the group stay under
PYHOROVOD_FUSION_MAX_TENSOR_BYTES there, so that they are fused); its figures mean nothing for the goals.
Each figure is the median over rounds of a per-round ratio; the order of the two candidates alternates.
"""
import json
import os
import statistics
import sys
import time

import torch

import pyhorovod.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(dev, fn, iters):
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync(dev)
    return (time.perf_counter() - t0) / iters


def mlp(width, layers):
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods, torch.nn.Linear(width, 10))


def optimizer_overhead(args, dev):
    torch.manual_seed(0)
    plain_model = mlp(args.width, args.layers).to(dev)
    hvd_model = mlp(args.width, args.layers).to(dev)
    hvd_model.load_state_dict(plain_model.state_dict())
    plain_opt = torch.optim.SGD(plain_model.parameters(), lr=1e-4)
    hvd_opt = hvd.DistributedOptimizer(torch.optim.SGD(hvd_model.parameters(), lr=1e-4),
                                       named_parameters=hvd_model.named_parameters())
    batch = args.batch

    def step(model, opt, x, y):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    def data(b):
        return torch.randn(b, args.width, device=dev), torch.randint(0, 10, (b,), device=dev)

    x, y = data(batch)
    plain_step = timed(dev, lambda: step(plain_model, plain_opt, x, y), 3)
    while plain_step * 1e3 < args.min_step_ms and batch < args.max_batch:
        batch *= 2
        x, y = data(batch)
        plain_step = timed(dev, lambda: step(plain_model, plain_opt, x, y), 3)
    for _ in range(3):
        step(hvd_model, hvd_opt, x, y)
    ratios, plain_times, hvd_times = [], [], []
    for rnd in range(args.rounds):
        pair = [("plain", plain_model, plain_opt), ("hvd", hvd_model, hvd_opt)]
        got = {}
        for name, model, opt in (pair if rnd % 2 == 0 else pair[::-1]):
            got[name] = timed(dev, lambda: step(model, opt, x, y), args.steps)
        plain_times.append(got["plain"])
        hvd_times.append(got["hvd"])
        ratios.append(got["hvd"] / got["plain"])
    params = sum(p.numel() for p in plain_model.parameters())
    res = {"params": params, "batch": batch, "plain_step_s": statistics.median(plain_times),
           "hvd_step_s": statistics.median(hvd_times), "ratio": statistics.median(ratios), "ratios": ratios,
           "goal_ratio_max": 1.03, "goal_min_step_s": args.min_step_ms / 1e3}
    res["goal_met"] = res["ratio"] <= 1.03 and res["plain_step_s"] * 1e3 >= args.min_step_ms
    print(f"optimizer: MLP {params / 1e6:.1f}M params, batch {batch}: plain {res['plain_step_s'] * 1e3:.2f} ms, "
          f"DistributedOptimizer {res['hvd_step_s'] * 1e3:.2f} ms per step; ratio {res['ratio']:.3f} "
          f"(goal <= 1.03 at >= {args.min_step_ms:g} ms: {'met' if res['goal_met'] else 'MISSED'})", flush=True)
    return res


def fusion_copies(args, dev):
    k = args.tensors
    per = args.fusion_mib * (1 << 20) // k // 4  # float32 elements per tensor
    total_bytes = per * k * 4
    group = [torch.ones(per, device=dev) for _ in range(k)]
    lone = torch.ones(per * k, device=dev)
    src, dst = torch.ones(per * k, device=dev), torch.empty(per * k, device=dev)
    for _ in range(2):
        hvd.grouped_allreduce_(group, op=hvd.Sum, name="overhead.group")
        hvd.grouped_allreduce_([lone], op=hvd.Sum, name="overhead.lone")
    fused_t, lone_t, copy_t, ratios = [], [], [], []
    for rnd in range(args.rounds):
        cands = [("fused", lambda: hvd.grouped_allreduce_(group, op=hvd.Sum, name="overhead.group")),
                 ("lone", lambda: hvd.grouped_allreduce_([lone], op=hvd.Sum, name="overhead.lone")),
                 ("copy", lambda: dst.copy_(src))]
        got = {name: timed(dev, fn, args.iters) for name, fn in (cands if rnd % 2 == 0 else cands[::-1])}
        fused_t.append(got["fused"])
        lone_t.append(got["lone"])
        copy_t.append(got["copy"])
        extra = got["fused"] - got["lone"]
        copy_bw = total_bytes / got["copy"]
        ratios.append((2 * total_bytes / extra) / copy_bw if extra > 0 else float("inf"))
    res = {"tensors": k, "bytes": total_bytes, "fused_s": statistics.median(fused_t),
           "lone_s": statistics.median(lone_t), "copy_s": statistics.median(copy_t),
           "ratio": statistics.median(ratios), "ratios": ratios, "goal_ratio_min": 0.70}
    res["copy_gbps"] = total_bytes / res["copy_s"] / 1e9
    extra = res["fused_s"] - res["lone_s"]
    res["fusion_copy_gbps"] = 2 * total_bytes / extra / 1e9 if extra > 0 else float("inf")
    res["goal_met"] = res["ratio"] >= 0.70
    print(f"fusion: {k} tensors, {total_bytes / 2 ** 20:.0f} MiB: grouped {res['fused_s'] * 1e6:.0f} us, "
          f"lone {res['lone_s'] * 1e6:.0f} us, copy {res['copy_s'] * 1e6:.0f} us; fusion copies "
          f"{res['fusion_copy_gbps']:.1f} GB/s against copy bandwidth {res['copy_gbps']:.1f} GB/s: ratio "
          f"{res['ratio']:.2f} (goal >= 0.70: {'met' if res['goal_met'] else 'MISSED'})", flush=True)
    return res


def main(argv=None):
    p = C.arg_parser(__doc__)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--batch", type=int, default=256, help="first batch; doubled until the step is long enough")
    p.add_argument("--max-batch", type=int, default=16384)
    p.add_argument("--min-step-ms", type=float, default=5.0)
    p.add_argument("--steps", type=int, default=10, help="timed steps per candidate and round")
    p.add_argument("--tensors", type=int, default=16)
    p.add_argument("--fusion-mib", type=int, default=64)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--json", default="")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device visible to torch (use --device cpu to rehearse)")
    hvd.init()
    if hvd.size() != 1:
        raise SystemExit(f"gpu_overhead.py measures one rank; got {hvd.size()}")
    dev = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        torch.backends.cuda.matmul.allow_tf32 = False
    out = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "argv": sys.argv,
           "optimizer": optimizer_overhead(args, dev), "fusion": fusion_copies(args, dev)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
