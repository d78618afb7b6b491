"""Does the allreduce overlap backward? The engine timeline next to rank 0's backward, and the step time
with overlap against a forced synchronize-after-backward.

    python benchmarks/overlap_timeline.py                 # 2 ranks, MLP 1024->1024x3->1000 (4.2M), batch 32
    python benchmarks/overlap_timeline.py --rounds 0      # only the timeline figure

Part 1 (one launch, timeline on): rank 0 stamps with time.monotonic_ns() forward/backward begin and end
and, per parameter, "ready" (a post-accumulate-grad hook registered BEFORE the DistributedOptimizer's) and
"enqueued" (one registered after it). The timeline (csrc/engine/timeline.cc) writes microseconds since an
origin taken with steady_clock::now() inside start_timeline(), on the calling thread; on Linux steady_clock
is CLOCK_MONOTONIC, time.monotonic_ns()'s clock, so stamps just before and after hvd.start_timeline() bound
the origin (error <= half that gap). Check: for a few allreduces stamped in Python, the coordinator's
"rank 0 ready" mark must follow the stamp, by about one engine cycle at most.
Overlap fraction = |union of ALLREDUCE spans ∩ backward| / |union of ALLREDUCE spans| (a union: a fused
unit's span, repeated on each of its tensors, counts once).

Step time, overlap (DistributedOptimizer) / forced synchronize-after-backward (plain SGD after one
grouped_allreduce_ of all gradients: synthetic.py's "pyhvd-nooverlap"), as paired medians: (a) alternated
step by step inside the traced launch (a twin model), (b) synthetic.py's "pyhvd" and "pyhvd-nooverlap"
launched in rounds with alternating order (bimodal machine: shared/anchors.md).
"""
import argparse
import copy
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common as C  # noqa: E402
import synthetic as S  # noqa: E402

COLORS = {"NEGOTIATE_ALLREDUCE": "#c9c9c9", "QUEUE": "#f2d18b", "MEMCPY_IN_FUSION_BUFFER": "#8fd18f",
          "ALLREDUCE": "#d9534f", "MEMCPY_OUT_FUSION_BUFFER": "#4f9e4f"}


def worker(args):
    import torch
    import torch.nn.functional as F
    import pyhorovod.torch as hvd
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    hvd.init()
    rank = hvd.rank()
    model = S.build_model(args)
    named = list(model.named_parameters())
    ready, enq = {}, {}
    for name, p in named:   # before the optimizer's hooks: the gradient exists, its allreduce not yet enqueued
        p.register_post_accumulate_grad_hook(lambda _p, n=name: ready.__setitem__(n, time.monotonic_ns()))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=named)
    for name, p in named:   # after them: the allreduce has been handed to the engine
        p.register_post_accumulate_grad_hook(lambda _p, n=name: enq.__setitem__(n, time.monotonic_ns()))
    gen = torch.Generator().manual_seed(rank)
    data = [(torch.randn(args.batch, args.input, generator=gen),
             torch.randint(0, args.classes, (args.batch,), generator=gen)) for _ in range(4)]

    def step(i):
        x, y = data[i % len(data)]
        ready.clear(), enq.clear()
        t = {"fwd_b": time.monotonic_ns()}
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        t["bwd_b"] = time.monotonic_ns()
        loss.backward()
        t["bwd_e"] = time.monotonic_ns()
        opt.step()   # synchronize(): waits for every allreduce, then the SGD update
        t["step_e"] = time.monotonic_ns()
        t["ready"], t["enqueued"], t["ns"] = dict(ready), dict(enq), t["step_e"] - t["fwd_b"]
        return t

    for i in range(args.warmup):
        step(i)
    hvd.allreduce(torch.zeros(1), name="overlap.sync")
    t0 = time.monotonic_ns()
    hvd.start_timeline(args.trace)   # rank 0 alone writes it; origin = steady_clock::now() in this call
    t1 = time.monotonic_ns()
    align = []
    for k in range(args.align):
        s = time.monotonic_ns()
        hvd.allreduce(torch.ones(4), name=f"overlap.align.{k}")
        align.append(s)
        time.sleep(0.003)   # let the engine idle, so each check starts from a quiet cycle
    steps = [step(args.warmup + i) for i in range(args.steps)]
    hvd.allreduce(torch.zeros(1), name="overlap.sync2")
    hvd.stop_timeline()
    # Step-level pairs, same processes: a twin model whose plain SGD runs after one grouped_allreduce_ of all
    # gradients (synthetic.py's pyhvd-nooverlap), alternated step by step with the overlapped one (ABBA...), so
    # both see the same machine state; launches seconds apart do not (load on this machine moves fast).
    twin = copy.deepcopy(model)
    opt_b, params_b = torch.optim.SGD(twin.parameters(), lr=0.01), list(twin.parameters())

    def step_b(i):
        x, y = data[i % len(data)]
        t = time.monotonic_ns()
        opt_b.zero_grad()
        F.cross_entropy(twin(x), y).backward()
        hvd.grouped_allreduce_([q.grad for q in params_b], op=hvd.Average)
        opt_b.step()
        return time.monotonic_ns() - t

    for i in range(args.warmup):
        step_b(i)
    pairs = []
    for i in range(args.pairs):
        if i % 2 == 0:
            a = step(i)["ns"]
            b = step_b(i)
        else:
            b = step_b(i)
            a = step(i)["ns"]
        pairs.append([a / 1e6, b / 1e6])
    if rank == 0:
        C.emit({"origin_bounds_ns": [t0, t1], "align_ns": align, "steps": steps,
                "numel": {n: p.numel() for n, p in named}, "pairs_ms": pairs})
    hvd.shutdown()


def read_spans(path):
    """Chrome trace -> ({track name: [(span, begin_us, end_us)]}, {track name: [(mark, ts_us)]})."""
    text = open(path).read().rstrip()
    ev = json.loads(text if text.endswith("]") else text + "]")   # a trace cut short lacks the "]"
    names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    open_, spans, marks = {}, {}, {}
    for e in ev:
        track = names.get(e["tid"], str(e["tid"]))
        if e["ph"] == "B":
            open_.setdefault((track, e["name"]), []).append(e["ts"])
        elif e["ph"] == "E" and open_.get((track, e["name"])):
            spans.setdefault(track, []).append((e["name"], open_[(track, e["name"])].pop(), e["ts"]))
        elif e["ph"] == "i":
            marks.setdefault(track, []).append((e["name"], e["ts"]))
    return spans, marks


def union(intervals):
    out = []
    for b, e in sorted(intervals):
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return out


def frac(intervals, hi):
    """The fraction of the (disjoint) intervals' length that lies inside [0, hi]; None if they are empty."""
    total = sum(e - b for b, e in intervals)
    return sum(max(0.0, min(e, hi) - max(b, 0.0)) for b, e in intervals) / total if total > 0 else None


def analyze(rec, spans, marks, slack_ms):
    origin_ns = sum(rec["origin_bounds_ns"]) / 2
    err_us = (rec["origin_bounds_ns"][1] - rec["origin_bounds_ns"][0]) / 2e3
    to_ms = lambda ts_us: (origin_ns + ts_us * 1e3) / 1e6   # timeline -> absolute monotonic ms
    offsets = [next(ts for m, ts in marks.get(f"overlap.align.{k}", []) if m == "rank 0 ready")
               - (s - origin_ns) / 1e3 for k, s in enumerate(rec["align_ns"])
               if any(m == "rank 0 ready" for m, _ in marks.get(f"overlap.align.{k}", []))]
    names = list(rec["numel"])
    per_step = []
    for t in rec["steps"]:
        b0 = t["bwd_b"] / 1e6   # every time below: ms since this step's backward began
        lo, hi = t["fwd_b"] / 1e6 - slack_ms, t["step_e"] / 1e6 + slack_ms
        grads, bwd_ms = [], (t["bwd_e"] - t["bwd_b"]) / 1e6
        for n in names:
            mine = {}
            for span, b, e in spans.get(n, []):   # the span of this step: the one that ends inside it
                if lo <= to_ms(e) <= hi:
                    mine[span] = [to_ms(b) - b0, to_ms(e) - b0]
            seen = {m: ts for m, ts in marks.get(n, []) if lo <= to_ms(ts) <= hi}   # "rank r ready"
            grads.append({"name": n, "numel": rec["numel"][n], "ready_ms": t["ready"][n] / 1e6 - b0,
                          "enqueued_ms": t["enqueued"][n] / 1e6 - b0, "spans": mine,
                          "coordinator_marks_ms": {m: to_ms(ts) - b0 for m, ts in seen.items()},
                          "allreduce_inside_backward": (frac([mine["ALLREDUCE"]], bwd_ms)
                                                        if "ALLREDUCE" in mine else None)})
        ar = union([tuple(g["spans"]["ALLREDUCE"]) for g in grads if "ALLREDUCE" in g["spans"]])
        ar_ms = sum(e - b for b, e in ar)
        per_step.append({"forward_ms": [t["fwd_b"] / 1e6 - b0, 0.0], "backward_ms": [0.0, bwd_ms],
                         "step_end_ms": t["step_e"] / 1e6 - b0, "step_ms": (t["step_e"] - t["fwd_b"]) / 1e6,
                         "allreduce_busy_ms": ar_ms, "allreduce_units": len(ar),
                         "overlap_fraction": frac(ar, bwd_ms),
                         "after_backward_ms": t["step_e"] / 1e6 - b0 - bwd_ms, "gradients": grads})
    return {"origin_error_us": err_us, "align_mark_minus_enqueue_us": offsets, "steps": per_step}


def plot(step, path, title):
    """A Gantt chart of one step (linear time: the bars' lengths are what the reader compares)."""
    import plotting as P   # here: the ranks (--worker) never need matplotlib
    grads = sorted(step["gradients"], key=lambda g: g["ready_ms"])
    fig, axes = P.new_figure(1, 1, width=11, height=2.2 + 0.45 * (len(grads) + 1))
    ax = axes[0][0]
    y0 = len(grads)
    f, b = step["forward_ms"], step["backward_ms"]
    ax.broken_barh([(f[0], f[1] - f[0])], (y0 - 0.35, 0.7), color="#9ecae1", label="forward")
    ax.broken_barh([(b[0], b[1] - b[0])], (y0 - 0.35, 0.7), color="#3182bd", label="backward")
    ax.broken_barh([(b[1], step["step_end_ms"] - b[1])], (y0 - 0.35, 0.7), color="#deebf7",
                   label="synchronize + SGD step")
    for g in grads:
        ax.plot([g["ready_ms"]] * 2, [y0 - 0.45, y0 + 0.45], color="black", lw=1)
    seen = set()
    for i, g in enumerate(grads):
        y = len(grads) - 1 - i
        ax.plot([g["ready_ms"]], [y], marker="v", color="black", ms=5)
        other = [ms for m, ms in g["coordinator_marks_ms"].items() if m != "rank 0 ready"]
        ax.plot(other, [y] * len(other), ls="", marker="|", color="#555555", ms=12,
                label=None if i else "coordinator saw rank 1 ready")
        for span, (sb, se) in g["spans"].items():
            lab = span if span not in seen else None
            seen.add(span)
            h = 0.7 if span == "ALLREDUCE" else 0.4
            ax.broken_barh([(sb, max(se - sb, 1e-3))], (y - h / 2, h), color=COLORS.get(span, "#777777"), label=lab)
    for x in b:
        ax.axvline(x, color="#3182bd", ls="--", lw=0.8)
    ax.set_yticks(range(len(grads) + 1))
    ax.set_yticklabels([f"{g['name']} ({g['numel'] * 4 / 2**20:.2f} MiB)" for g in reversed(grads)]
                       + ["rank 0 compute\n(ticks: gradient ready)"], fontsize=8)
    ax.set_xlabel("ms since backward began (rank 0; ▼ = this gradient ready)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4)  # below the axes
    P.save(fig, path, dpi=120)


def measure(args):
    """synthetic.py's pyhvd vs pyhvd-nooverlap, interleaved; returns per-round step times and ratios."""
    sargs = argparse.Namespace(model="mlp", input=args.input, hidden=args.hidden, layers=args.layers,
                               classes=args.classes, width=32, batch=args.batch, steps=args.measure_steps,
                               warmup=args.warmup, timeout=args.timeout)
    rounds = []
    for r in range(args.rounds):
        order = ("pyhvd", "pyhvd-nooverlap") if r % 2 == 0 else ("pyhvd-nooverlap", "pyhvd")
        got = {c: S.summarize(S.launch(c, 2, sargs, None, f"ov{r}"), 1)["step_s"] for c in order}
        got["ratio"] = got["pyhvd"] / got["pyhvd-nooverlap"]
        rounds.append(got)
        print(f"round {r}: overlap {got['pyhvd'] * 1e3:6.1f} ms  no-overlap {got['pyhvd-nooverlap'] * 1e3:6.1f} ms"
              f"  ratio {got['ratio']:.3f}", flush=True)
    return rounds


def main(argv=None):
    p = C.arg_parser(__doc__)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--trace", default="", help="where rank 0 writes the timeline (default: a temp dir)")
    S.add_mlp_args(p)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=5, help="traced steps")
    p.add_argument("--align", type=int, default=5, help="stamped allreduces that check the clock alignment")
    p.add_argument("--pairs", type=int, default=40, help="alternated overlap / no-overlap steps in one launch")
    p.add_argument("--rounds", type=int, default=4, help="interleaved rounds of the step-time comparison")
    p.add_argument("--measure-steps", type=int, default=20)
    p.add_argument("--timeout", type=float, default=240.0)
    p.add_argument("--out", default=os.path.join(HERE, "results", "overlap_timeline"))
    args = p.parse_args(argv)
    args.model = "mlp"
    if args.worker:
        return worker(args)
    tmp = tempfile.mkdtemp(prefix="overlap_tl_")
    trace = args.trace or os.path.join(tmp, "timeline.json")
    wargs = [os.path.abspath(__file__), "--worker", "--trace", trace] + [
        f"--{k}={getattr(args, k)}"
        for k in ("input", "hidden", "layers", "classes", "batch", "warmup", "steps", "align", "pairs")]
    env = dict(C.python_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(C.free_port()), WORLD_SIZE="2",
               LOCAL_WORLD_SIZE="2")
    rec = C.run_records([([sys.executable] + wargs, dict(env, RANK=str(r), LOCAL_RANK=str(r))) for r in range(2)],
                        args.timeout, "overlap timeline")[0]   # rank 0's: the only rank that emits
    spans, marks = read_spans(trace)
    res = analyze(rec, spans, marks, slack_ms=0.5)
    offs = res["align_mark_minus_enqueue_us"]
    print(f"clock alignment: origin known to ±{res['origin_error_us']:.1f} us; 'rank 0 ready' mark - Python "
          f"enqueue stamp: median {C.median(offs):.0f} us, min {min(offs):.0f} us, max {max(offs):.0f} us "
          f"(expect >= -{res['origin_error_us']:.0f} us and within about one engine cycle)")
    steps = res["steps"]
    # representative = the traced step of median overlap fraction (the quantity the figure is about)
    rep_i = sorted(range(len(steps)), key=lambda i: steps[i]["overlap_fraction"] or 0.0)[len(steps) // 2]
    rep = steps[rep_i]
    print(f"\n# representative traced step {rep_i} (median overlap; step time {rep['step_ms']:.1f} ms; backward "
          f"{rep['backward_ms'][1]:.1f} ms; ms since backward began)")
    rows = []
    for g in sorted(rep["gradients"], key=lambda g: g["ready_ms"]):
        neg, ar = g["spans"].get("NEGOTIATE_ALLREDUCE"), g["spans"].get("ALLREDUCE")
        rows.append([g["name"], g["numel"], f"{g['ready_ms']:.2f}", f"{g['enqueued_ms']:.2f}",
                     f"{neg[0]:.2f}..{neg[1]:.2f}" if neg else "-", f"{ar[0]:.2f}..{ar[1]:.2f}" if ar else "-",
                     f"{g['allreduce_inside_backward']:.2f}" if g["allreduce_inside_backward"] is not None else "-"])
    C.print_table(["gradient", "numel", "ready", "enqueued", "negotiate", "allreduce", "AR in bwd"], rows)
    fracs = [s["overlap_fraction"] for s in steps if s["overlap_fraction"] is not None]
    print(f"\nallreduce time inside backward: {rep['overlap_fraction']:.2f} in this step; per traced step "
          f"{', '.join(f'{x:.2f}' for x in fracs)} (median {C.median(fracs):.2f}); allreduce busy "
          f"{rep['allreduce_busy_ms']:.1f} ms in {rep['allreduce_units']} unit(s); backward end -> step end "
          f"{rep['after_backward_ms']:.1f} ms")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    plot(rep, args.out + ".png", f"pyhorovod DistributedOptimizer, 2 ranks, "
         f"MLP {sum(rec['numel'].values()) / 1e6:.1f}M "
         f"params, batch {args.batch}: rank 0, traced step {rep_i}; allreduce time inside backward "
         f"{rep['overlap_fraction']:.0%}")
    pr = [a / b for a, b in rec["pairs_ms"]]
    med, (lo, hi), exact = C.median_ci95(pr)
    print(f"\nstep time, overlap / synchronize-after-backward, alternated steps in one launch: paired median "
          f"{med:.3f} (95% {'CI' if exact else 'min..max'} {lo:.3f}..{hi:.3f}, {len(pr)} pairs; medians "
          f"{C.median([a for a, _ in rec['pairs_ms']]):.1f} vs {C.median([b for _, b in rec['pairs_ms']]):.1f} ms)")
    rounds = measure(args) if args.rounds > 0 else []
    ratio = C.median([r["ratio"] for r in rounds]) if rounds else None
    if rounds:
        print(f"\nstep time overlap / synchronize-after-backward, separate launches "
              f"(paired median of {len(rounds)} rounds): "
              f"{ratio:.3f}  (< 1: overlap faster)")
    C.write_result(args.out + ".json", {
        "meta": {"argv": sys.argv, "np": 2, "batch": args.batch, "params": sum(rec["numel"].values()),
                 "time_unit": "ms since the step's backward began", "trace": trace},
        "alignment": {"origin_error_us": res["origin_error_us"], "mark_minus_enqueue_us": offs},
        "representative_step": rep_i, "steps": steps, "overlap_fraction_median": C.median(fracs),
        "step_time_alternated": {"pairs_ms_overlap_nooverlap": rec["pairs_ms"], "ratio_paired_median": med,
                                 "ratio_ci95": [lo, hi]},
        "step_time_launches": {"rounds": rounds, "ratio_overlap_over_nooverlap_paired_median": ratio}})
    print(f"wrote {args.out}.png and {args.out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
