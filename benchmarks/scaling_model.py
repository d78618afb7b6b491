"""Fit the alpha-beta model to measured collectives, predict scaling to 256 workers, check against
what is measured here and against Horovod's published figures.

    python benchmarks/scaling_model.py --collectives collectives.json [--synthetic synthetic.json] \
        [--png scaling_model.png] [--json scaling_model.json]

Sections printed:
 1. fit: alpha and beta per candidate from the ring allreduce points of benchmarks/collectives.py, with
    each point's prediction error (the issue's target: within 25%).
 2. published check: ResNet-101 and Inception V3 on 128 Pascal GPUs over 25 Gbit/s, ring vs parameter
    server, with every assumed input listed (Sergeev & Del Balso 2018 report ~88-90% for Horovod's ring
    and ~50% for standard distributed TensorFlow with parameter servers).
 3. curves: efficiency vs workers 2..256 for ring, recursive doubling, tree and parameter servers, with
    and without overlap of communication and backward.
 4. local: the synthetic benchmark's measured efficiency (benchmarks/synthetic.py JSON) against the model
    built from the fitted loopback network and the measured one-process step time.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402
import plotting as P  # noqa: E402
from pyhorovod.scaling import cost_model as cm  # noqa: E402

WORKERS = [2, 4, 8, 16, 32, 64, 128, 256]

# ---- assumed inputs of the published check (every one of them is an assumption; see RESULTS) ----
PUBLISHED = {
    "link": "25 Gbit/s Ethernet, one NIC per host, 90% of line rate usable: beta = 2.81 GB/s",
    "beta_bytes_per_s": 25e9 / 8 * 0.9,
    "alpha_s": 20e-6,               # one hop over a 2017 datacenter network, TCP or RoCE
    "gpus_per_host": 4,             # Horovod's paper: 128 Pascal GPUs on 32 servers
    "batch_per_gpu": 64,
    "fusion_bytes": 64 << 20,       # Horovod's default fusion buffer
    "backward_fraction": 2.0 / 3.0,  # backward ~ twice the forward FLOPs
    "models": {
        # params, images/s of one P100 (TensorFlow's published P100 synthetic-data figures: Inception V3
        # ~142 img/s; ResNet-101 ~130 img/s, between ResNet-50's 219 and ResNet-152's 92 by FLOPs)
        "ResNet-101": {"params": 44.5e6, "images_per_s": 130.0},
        "Inception V3": {"params": 23.8e6, "images_per_s": 142.0},
    },
    # parameter servers as in tf_cnn_benchmarks' distributed mode: one server per host, colocated,
    # each GPU a worker that pushes and pulls its own gradients (no local aggregation)
    "ps": {"servers": 32, "colocated": True, "workers_per_host": 4},
    "published": {"ring_128": "0.88-0.90", "ps_128": "~0.50"},
}


def fit_with_loo(pts):
    """Fit the ring model to pts; every point's in-sample error and its leave-one-out error (the point
    predicted by a fit to the others: the honest check, since with as many points as parameters the
    in-sample fit is exact by construction)."""
    net, worst = cm.fit_ring(pts)
    rows = cm.predicted_vs_measured(pts, net)
    for i, r in enumerate(rows):
        rest = pts[:i] + pts[i + 1:]
        r["loo_rel_error"] = None
        if len({(q, m) for q, m, _ in rest}) >= 2:
            loo, _ = cm.fit_ring(rest)
            r["loo_rel_error"] = cm.ring_allreduce_time(r["bytes"], r["p"], loo) / r["measured_s"] - 1.0
    return net, worst, rows


def fit_section(coll, candidates, min_bytes):
    fits = {}
    for cand in candidates:
        pts = cm.points_from_collectives_json(coll, cand, "allreduce", min_bytes=min_bytes)
        if len({(p, m) for p, m, _ in pts}) < 2:
            continue
        net, worst, rows = fit_with_loo(pts)
        fits[cand] = {"alpha_s": net.alpha_s, "beta_bytes_per_s": net.beta_bytes_per_s,
                      "worst_rel_error": worst, "points": rows, "per_n": {}}
        print(f"\n# fit, ring allreduce, {cand}: alpha = {net.alpha_s * 1e6:.1f} us, "
              f"beta = {net.beta_bytes_per_s / 1e9:.3f} GB/s, {len(pts)} points, "
              f"worst in-sample error {worst * 100:.0f}%")
        C.print_table(["n", "size", "measured(us)", "model(us)", "error", "leave-one-out", "within 25%"],
                      [[r["p"], C.fmt_size(int(r["bytes"])), f"{r['measured_s'] * 1e6:.1f}",
                        f"{r['predicted_s'] * 1e6:.1f}", f"{r['rel_error'] * 100:+.0f}%",
                        "-" if r["loo_rel_error"] is None else f"{r['loo_rel_error'] * 100:+.0f}%",
                        "yes" if abs(r["rel_error"]) <= 0.25 else "NO"] for r in rows])
        # One (alpha, beta) per rank count: on one host the regime changes with n (ranks > cores share
        # them; n ranks' buffers fit the last-level cache or not), so a joint fit mixes regimes.
        per_n_rows = []
        for n in sorted({p for p, _, _ in pts}):
            sub = [q for q in pts if q[0] == n]
            if len(sub) < 3:   # leave-one-out needs two points left
                continue
            net_n, _, rows_n = fit_with_loo(sub)
            fits[cand]["per_n"][n] = {"alpha_s": net_n.alpha_s, "beta_bytes_per_s": net_n.beta_bytes_per_s,
                                      "points": rows_n}
            per_n_rows += [[n, f"{net_n.alpha_s * 1e6:.1f}", f"{net_n.beta_bytes_per_s / 1e9:.2f}",
                            C.fmt_size(int(r["bytes"])), f"{r['measured_s'] * 1e6:.1f}",
                            "-" if r["loo_rel_error"] is None else f"{r['loo_rel_error'] * 100:+.0f}%"]
                           for r in rows_n]
        if per_n_rows:
            print(f"# {cand}, one fit per rank count: each point's leave-one-out error")
            C.print_table(["n", "alpha(us)", "beta(GB/s)", "size", "measured(us)", "leave-one-out"], per_n_rows)
    return fits


def published_step(name):
    mdl = PUBLISHED["models"][name]
    return cm.StepModel(compute_s=PUBLISHED["batch_per_gpu"] / mdl["images_per_s"], grad_bytes=mdl["params"] * 4,
                        backward_fraction=PUBLISHED["backward_fraction"], fusion_bytes=PUBLISHED["fusion_bytes"])


def ps_kw(p):
    """The published layout for p GPUs: a colocated server on each host of gpus_per_host GPUs."""
    g = PUBLISHED["ps"]["workers_per_host"]
    return {"servers": p // g, "colocated": True, "workers_per_host": g}


def published_section():
    net = cm.Network(PUBLISHED["alpha_s"], PUBLISHED["beta_bytes_per_s"])
    print("\n# published check: assumed inputs")
    for k in ("link", "alpha_s", "gpus_per_host", "batch_per_gpu", "fusion_bytes", "backward_fraction", "ps"):
        print(f"  {k}: {PUBLISHED[k]}")
    rows, out = [], {}
    for name, mdl in PUBLISHED["models"].items():
        step = published_step(name)
        print(f"  {name}: {mdl['params'] / 1e6:.1f}M params = {step.grad_bytes / 1e6:.0f} MB fp32, "
              f"{mdl['images_per_s']:.0f} img/s per GPU -> compute {step.compute_s * 1e3:.0f} ms/step")
        for ov in (False, True):
            ring = cm.scaling_efficiency(step, "ring", 128, net, ov)
            ps = cm.scaling_efficiency(step, "parameter_server", 128, net, ov, **ps_kw(128))
            out[f"{name}|overlap={ov}"] = {"ring_128": ring, "ps_128": ps}
            rows.append([name, "yes" if ov else "no", f"{ring * 100:.0f}%", PUBLISHED["published"]["ring_128"],
                         f"{ps * 100:.0f}%", PUBLISHED["published"]["ps_128"]])
    print("\n# scaling efficiency at 128 GPUs: model vs published (Horovod paper)")
    C.print_table(["model", "overlap", "ring", "published ring", "param server", "published PS"], rows)
    print("  (the published ring figure lies between the no-overlap and full-overlap bounds of the model;\n"
          "   Horovod overlaps partly: a bucket waits for a 5 ms negotiation cycle and for 64 MiB to fill)")
    return out


def curves(step, net, overlap):
    """One worker per NIC (so p = 2 and 4 are not hidden inside one host). Parameter servers: one
    dedicated server, or one dedicated server per 4 workers (each server then takes 4M per phase)."""
    cfg = {"ring": ("ring", {}), "recursive doubling": ("recursive_doubling", {}), "tree": ("tree", {}),
           "param server x1": ("parameter_server", {"servers": 1})}
    eff = cm.efficiency_table(step, net, WORKERS, cfg, overlap)
    eff["param server, 1 per 4 workers"] = [
        cm.scaling_efficiency(step, "parameter_server", p, net, overlap, servers=max(1, p // 4)) for p in WORKERS]
    return eff


def curves_section():
    net = cm.Network(PUBLISHED["alpha_s"], PUBLISHED["beta_bytes_per_s"])
    out = {}
    for name in PUBLISHED["models"]:
        step = published_step(name)
        for ov in (False, True):
            eff = curves(step, net, ov)
            out[f"{name}|overlap={ov}"] = eff
            print(f"\n# {name}, 25 Gbit/s, one worker per NIC, efficiency vs workers, overlap={'yes' if ov else 'no'}")
            C.print_table(["algorithm"] + [str(p) for p in WORKERS],
                          [[k] + [f"{v * 100:.0f}%" for v in vs] for k, vs in eff.items()])
    return out


def local_section(syn, fits, cores):
    """Measured synthetic efficiency vs the model with the loopback fit. On `cores` cores, n ranks each
    get cores/n of a core once n > cores, so per-rank compute is stretched by max(1, n/cores)."""
    single = syn.get("single_step_s")
    grad_bytes = syn.get("grad_bytes")
    if not single or not grad_bytes:
        return {}
    out = {}
    rows = []
    for r in syn["results"]:
        fit = fits.get(r.get("fit_candidate", "core"))
        if not fit or r["n"] < 2:
            continue
        net = cm.Network(fit["alpha_s"], fit["beta_bytes_per_s"])
        stretch = max(1.0, r["n"] / cores)
        fusion = 25 << 20 if r["cand"] == "ddp" else syn.get("fusion_bytes", 64 << 20)   # DDP's bucket_cap_mb
        step = cm.StepModel(single * stretch, grad_bytes, fusion_bytes=fusion)
        ov = r["cand"] != "pyhvd-nooverlap"
        t = cm.step_time(step, lambda b: cm.ring_allreduce_time(b, r["n"], net), ov)
        pred = single / t
        rows.append([r["cand"], r["n"], r["fit_candidate"], "yes" if ov else "no", f"{r['efficiency'] * 100:.0f}%",
                     f"{pred * 100:.0f}%", f"{(pred / r['efficiency'] - 1) * 100:+.0f}%"])
        out[f"{r['cand']}|{r['n']}"] = {"measured": r["efficiency"], "predicted": pred, "overlap": ov}
    if rows:
        print(f"\n# local: synthetic benchmark, measured vs model (loopback fit, {cores} cores shared)")
        C.print_table(["candidate", "n", "alpha/beta of", "overlap", "measured eff", "model eff", "error"], rows)
    return out


def figure(curves_out, syn):
    """Per published model: the cost model's efficiency curves (lines, no markers: nothing was measured
    there); and the synthetic benchmark's measured efficiencies (markers)."""
    names = list(PUBLISHED["models"])
    fig, axes = P.new_figure(1, len(names) + (1 if syn else 0), width=6, height=4.2)
    axes = axes[0]
    for ax, name in zip(axes, names):
        for ov, ls in ((False, "--"), (True, "-")):
            for i, (label, vs) in enumerate(curves_out[f"{name}|overlap={ov}"].items()):
                ax.plot(WORKERS, [v * 100 for v in vs], ls=ls, color=f"C{i}",
                        label=f"{label} ({'overlap' if ov else 'no overlap'}, model)")
        ax.axhspan(88, 90, color="g", alpha=0.15, label="Horovod published (ring)")
        ax.axhline(50, color="r", alpha=0.3, label="published PS ~50%")
        P.count_axis(ax, [w for w in WORKERS if w & (w - 1) == 0], "workers")
        ax.set_title(f"{name}, 25 Gbit/s, 1 worker per NIC (model)")
        ax.set_ylabel("scaling efficiency (%)")
        ax.set_ylim(0, 105)
        ax.grid(True, alpha=0.3)
        P.legend_outside(ax)
    if syn:
        ax = axes[-1]
        for cand in sorted({r["cand"] for r in syn["results"]}):
            pts = sorted((r["n"], r["efficiency"]) for r in syn["results"] if r["cand"] == cand)
            P.measured(ax, [p for p, _ in pts], [e * 100 for _, e in pts], cand, cand.startswith("pyhvd"))
        ax.set_title("synthetic MLP, loopback (measured)")
        P.count_axis(ax, [r["n"] for r in syn["results"]], "ranks")
        ax.set_ylabel("scaling efficiency (%)")
        ax.grid(True, alpha=0.3)
        P.legend_outside(ax)
    return fig


def plot(curves_out, syn, path):
    P.save(figure(curves_out, syn), path)


def main(argv=None):
    p = C.arg_parser(__doc__)
    p.add_argument("--collectives", help="JSON of benchmarks/collectives.py")
    p.add_argument("--candidates", default="core,core-tcp,api,mpi,mpi-tcp,gloo,hvd-mpi,hvd-gloo",
                   help="candidates of the --collectives JSON to fit, comma-separated")
    p.add_argument("--min-bytes", type=C.parse_size, default=0, help="fit only sizes >= this")
    p.add_argument("--synthetic", help="JSON of benchmarks/synthetic.py")
    p.add_argument("--cores", type=int, default=os.cpu_count())
    p.add_argument("--json", default="scaling_model.json")
    p.add_argument("--png", default="scaling_model.png")
    args = p.parse_args(argv)
    fits = {}
    if args.collectives:
        with open(args.collectives) as f:
            coll = json.load(f)
        fits = fit_section(coll, args.candidates.split(","), args.min_bytes)
    pub = published_section()
    cur = curves_section()
    syn = None
    local = {}
    if args.synthetic:
        with open(args.synthetic) as f:
            syn = json.load(f)
        local = local_section(syn, fits, args.cores)
    C.write_result(args.json, {"assumed": PUBLISHED, "fits": fits, "published_check": pub, "curves": cur,
                             "workers": WORKERS, "local": local})
    if args.png:
        plot(cur, syn, args.png)
    print(f"\nwrote {args.json}" + (f" and {args.png}" if args.png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
