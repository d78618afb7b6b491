"""The summary of benchmarks/device_check.sh: every step's outcome, the goals checked against the figures
the steps wrote, one JSON file.

    python benchmarks/device_summary.py --steps STEPS.tsv --dir WORKDIR [--json OUT/device_check.json]

STEPS.tsv: one line per step, "name<TAB>status<TAB>seconds<TAB>detail" (status pass, fail or skip).
WORKDIR: the JSON files the steps wrote (gpu_overhead.json, busbw_*.json, synthetic.json, step_cost.json,
the last one carried along as it is); a missing file
leaves its goals "not measured". Exit code: 1 when a step failed, else 2 when a measured goal was missed,
else 0.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def synthetic_goals(syn):
    """Part 4: pyhvd's speedup over one process at 2/4 ranks, its step against DDP's, the ceiling."""
    goals, figures = [], {}
    if syn is None:
        return [{"goal": "CPU scaling and DDP ratio (synthetic.py)", "status": "not measured"}], figures
    by = {(r["cand"], r["n"]): r for r in syn.get("results", [])}
    for n, need in ((2, 1.8), (4, 3.4)):
        r = by.get(("pyhvd", n))
        ceiling = by.get(("independent", n))
        if ceiling:
            figures[f"independent_speedup_n{n}"] = ceiling["speedup_vs_single"]
        if r:
            figures[f"pyhvd_speedup_n{n}"] = r["speedup_vs_single"]
            goals.append({"goal": f"pyhvd samples/s at {n} ranks >= {need}x one process",
                          "value": round(r["speedup_vs_single"], 3),
                          "ceiling (independent)": round(ceiling["speedup_vs_single"], 3) if ceiling else None,
                          "status": "met" if r["speedup_vs_single"] >= need else "missed"})
    for q in syn.get("ratios", []):
        if q["ours"] == "pyhvd" and q["peer"] == "ddp":
            v = q["step_ratio_paired_median"]
            figures[f"pyhvd_over_ddp_step_n{q['n']}"] = v
            goals.append({"goal": f"pyhvd step <= 0.85x DDP (gloo) at {q['n']} ranks", "value": round(v, 3),
                          "status": "met" if v <= 0.85 else "missed"})
    figures["single_step_s"] = syn.get("single_step_s")
    figures["skipped"] = syn.get("skipped")
    return goals, figures


def overhead_goals(ov):
    if ov is None:
        return [{"goal": "GPU overheads (gpu_overhead.py)", "status": "not measured"}]
    o, f = ov["optimizer"], ov["fusion"]
    return [{"goal": "DistributedOptimizer step <= 1.03x plain torch at one rank (plain step >= 5 ms)",
             "value": round(o["ratio"], 4), "plain_step_ms": round(o["plain_step_s"] * 1e3, 2),
             "status": "met" if o["goal_met"] else "missed"},
            {"goal": "fusion buffer copies >= 70% of device copy bandwidth", "value": round(f["ratio"], 3),
             "copy_gbps": round(f["copy_gbps"], 1), "status": "met" if f["goal_met"] else "missed"}]


def main(argv=None):
    p = C.arg_parser(__doc__)
    p.add_argument("--steps", required=True, help="the steps' status file that device_check.sh wrote")
    p.add_argument("--dir", required=True, help="the folder of the steps' raw JSON results")
    p.add_argument("--json", default="", help="write the summary here too")
    args = p.parse_args(argv)
    steps = []
    with open(args.steps) as f:
        for line in f:
            name, status, seconds, detail = (line.rstrip("\n").split("\t") + ["", "", ""])[:4]
            steps.append({"step": name, "status": status, "seconds": float(seconds or 0), "detail": detail})
    syn_goals, syn_figures = synthetic_goals(load(os.path.join(args.dir, "synthetic.json")))
    goals = overhead_goals(load(os.path.join(args.dir, "gpu_overhead.json"))) + syn_goals
    busbw = {}
    for name in sorted(os.listdir(args.dir)):
        if name.startswith("busbw_") and name.endswith(".json"):
            busbw[name[len("busbw_"):-len(".json")]] = load(os.path.join(args.dir, name))
    print("\n== steps")
    for s in steps:
        print(f"  {s['status']:5s} {s['step']:28s} {s['seconds']:7.1f} s  {s['detail']}")
    print("== goals")
    for g in goals:
        extra = ", ".join(f"{k} {v}" for k, v in g.items() if k not in ("goal", "status"))
        print(f"  {g['status']:12s} {g['goal']}" + (f"  ({extra})" if extra else ""))
    for name, b in busbw.items():
        if b and b.get("rows"):
            last = b["rows"][-1]
            print(f"  busbw {name}: {last['bytes']} bytes, busbw {last['busbw_gbps']:.2f} GB/s, algbw "
                  f"{last['algbw_gbps']:.2f} GB/s; pinned copies in series {b['pinned_series_gbps']:.2f} GB/s")
    failed = [s["step"] for s in steps if s["status"] == "fail"]
    missed = [g["goal"] for g in goals if g["status"] == "missed"]
    summary = {"steps": steps, "goals": goals, "cpu_figures": syn_figures, "busbw": busbw,
               "gpu_overhead": load(os.path.join(args.dir, "gpu_overhead.json")),
               "step_cost": load(os.path.join(args.dir, "step_cost.json")),
               "failed_steps": failed, "missed_goals": missed,
               "notes": ["Horovod itself is not on the device (no network to install it): the CPU comparison is "
                         "against one process, independent processes and torch DDP over gloo only."]}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
        print(f"wrote {args.json}")
    print(f"== {len(failed)} failed step(s): {', '.join(failed) or '-'}; {len(missed)} missed goal(s)")
    return 1 if failed else 2 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
