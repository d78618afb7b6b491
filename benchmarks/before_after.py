"""Two builds of pyhorovod, paired: the headline figures of RESULTS.md from each, interleaved round by round.

    python benchmarks/before_after.py --before /work/wt/before --after . --rounds 5

--before and --after are two source trees, each with its extension built in place (pyhorovod/_core*.so).
Each round runs, in each tree and with that tree's own benchmark scripts, the 4 B and 64 MiB allreduce
(benchmarks/collectives.py, candidates core and api, 2 ranks) and the training step of the 4.2M MLP
(benchmarks/synthetic.py, candidate pyhvd, 2 ranks); the order of the two trees alternates every round.
Reported per figure: the median over rounds of each tree and the median of the per-round ratios
time(after) / time(before) (1.00 = unchanged, > 1 = the after tree is slower), with the spread of those
ratios, so that "within noise" can be read off: a ratio whose min..max spans 1.0 did not move.

Why this and not two separate runs: this machine flips between a fast and a slow state (shared/anchors.md),
so only figures taken close together in time compare; a refactor that claims "nothing moved" needs both
builds measured in the same minutes.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common as C  # noqa: E402


def run_tree(tree: str, args, tmp: str, tag: str) -> dict:
    """One round in one tree: {figure name: seconds}."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=os.path.abspath(tree))
    figures = {}
    cj = os.path.join(tmp, f"c-{tag}.json")
    subprocess.run([sys.executable, "benchmarks/collectives.py", "--np", "2", "--ops", "allreduce", "--sizes",
                    "4,64M", "--candidates", "core,api", "--rounds", "1", "--json", cj, "--png",
                    os.path.join(tmp, f"c-{tag}.png")], cwd=tree, env=env, check=True, timeout=args.timeout,
                   stdout=subprocess.DEVNULL)
    for r in json.load(open(cj))["results"]:
        size = "4B" if r["bytes"] == 4 else f"{r['bytes'] >> 20}MiB"
        figures[f"allreduce {size} {r['cand']}"] = r["time_s"]
    sj = os.path.join(tmp, f"s-{tag}.json")
    subprocess.run([sys.executable, "benchmarks/synthetic.py", "--np", "2", "--candidates", "pyhvd", "--rounds", "1",
                    "--steps", str(args.steps), "--json", sj], cwd=tree, env=env, check=True, timeout=args.timeout,
                   stdout=subprocess.DEVNULL)
    for r in json.load(open(sj))["results"]:
        figures["MLP 4.2M step pyhvd"] = r["step_s"]
    return figures


def main():
    p = C.arg_parser(__doc__)
    p.add_argument("--before", required=True, help="the source tree measured as 'before'")
    p.add_argument("--after", default=".", help="the source tree measured as 'after'")
    p.add_argument("--rounds", type=int, default=5, help="rounds; each runs both trees, alternating the order")
    p.add_argument("--steps", type=int, default=40, help="timed training steps per launch")
    p.add_argument("--timeout", type=float, default=600.0, help="hard limit per benchmark launch, seconds")
    p.add_argument("--json", default="before_after.json", help="where the figures of every round go")
    args = p.parse_args()
    trees = {"before": args.before, "after": args.after}
    rounds = []
    with tempfile.TemporaryDirectory(prefix="pyhvd-before-after-") as tmp:
        for i in range(args.rounds):
            order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
            got = {name: run_tree(trees[name], args, tmp, f"{name}{i}") for name in order}
            rounds.append(got)
            print(f"round {i + 1}/{args.rounds} ({' then '.join(order)}) done", flush=True)
    print(f"\n{'figure':<24} {'before(ms)':>11} {'after(ms)':>10} {'after/before':>13} {'ratios min..max':>17}")
    summary = {}
    for fig in rounds[0]["before"]:
        b = [r["before"][fig] for r in rounds]
        a = [r["after"][fig] for r in rounds]
        ratios = [x / y for x, y in zip(a, b)]
        summary[fig] = {"before_s": b, "after_s": a, "ratios": ratios, "median_ratio": statistics.median(ratios)}
        print(f"{fig:<24} {statistics.median(b) * 1e3:>11.3f} {statistics.median(a) * 1e3:>10.3f} "
              f"{statistics.median(ratios):>13.3f} {min(ratios):>8.2f}..{max(ratios):.2f}")
    with open(args.json, "w") as f:
        json.dump({"before": args.before, "after": args.after, "rounds": rounds, "summary": summary}, f, indent=1)
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
