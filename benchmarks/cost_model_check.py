"""The cost model of hierarchical and compressed allreduce (pyhorovod.scaling.cost_model: Cluster,
flat_ring_time, hierarchical_allreduce_time, Compression) against the shaped-link measurements of
benchmarks/hierarchical.py, then extrapolated to Horovod's published 128-GPU set-up.

    python3 benchmarks/cost_model_check.py --measured benchmarks/results/hierarchical_2x2_1g.json \\
        [--json benchmarks/results/cost_model_check.json]

1. prediction: the inter-host link is the tbf rate the benchmark shaped (nominal, not fitted: 1 Gbit/s
   = 125 MB/s, alpha 0), the intra-host link is the engine's own fit of its shared-memory rings at init
   (reported in the measurement file). Every size's flat and hierarchical medians against the model;
   the goal is within 25%.
2. extrapolation: ResNet-101 (44.5M params, 178 MB fp32 -- the "~170 MB" gradient) on 32 hosts x 4
   GPUs, 25 GbE (90% usable), NVLink-class links inside a host, the step inputs of
   benchmarks/scaling_model.py (P100, batch 64, 64 MiB fusion, backward 2/3 of compute); efficiency
   of flat, hierarchical and automatic allreduce, with and without fp16 compression, against the
   published 88%.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]
import common as C  # noqa: E402
from pyhorovod import _core  # noqa: E402
from pyhorovod.scaling import cost_model as cm  # noqa: E402
from scaling_model import PUBLISHED, published_step  # noqa: E402

NVLINK = cm.Network(alpha_s=5e-6, beta_bytes_per_s=20e9)  # P100 NVLink-class: ~20 GB/s per direction, per pair
FP16 = cm.Compression(ratio=0.5, compute_s_per_byte=1 / 50e9)  # a cast each way at ~50 GB/s on a GPU


def prediction_section(measured):
    fit = measured["fit"]
    cluster = cm.Cluster(measured["hosts"], measured["per_host"],
                         intra=cm.Network(fit["local"][0], fit["local"][1]),
                         inter=cm.Network(0.0, measured["rate_mbit"] * 1e6 / 8))
    # Below the engine's own threshold (p ranks over TCP, default tuning) flat is recursive doubling.
    small = _core.small_message_threshold(_core.Tuning(), cluster.workers, False)
    flat = lambda m, c: cm.flat_allreduce_time(m, c, small)  # noqa: E731
    rows, out = [], []
    for size, r in sorted(measured["sizes"].items(), key=lambda kv: int(kv[0])):
        m = int(size)
        for mode, fn in (("flat", flat), ("hierarchical", cm.hierarchical_allreduce_time)):
            pred, meas = fn(m, cluster), r["median_s"][mode]
            err = pred / meas - 1
            out.append({"bytes": m, "mode": mode, "measured_s": meas, "predicted_s": pred, "rel_error": err})
            rows.append([C.fmt_size(m), mode, f"{meas * 1e3:.2f}", f"{pred * 1e3:.2f}", f"{err * 100:+.0f}%",
                         "yes" if abs(err) <= 0.25 else "NO"])
    print(f"# prediction on the shaped links: {measured['hosts']} hosts x {measured['per_host']}, "
          f"inter {measured['rate_mbit']:g} Mbit/s (tbf rate), "
          f"intra beta {fit['local'][1] / 1e9:.2f} GB/s (engine fit)")
    C.print_table(["size", "mode", "measured ms", "model ms", "error", "within 25%"], rows)
    return out


def extrapolation_section():
    step = published_step("ResNet-101")
    inter = cm.Network(PUBLISHED["alpha_s"], PUBLISHED["beta_bytes_per_s"])
    cluster = cm.Cluster(32, 4, intra=NVLINK, inter=inter)
    rows, out = [], {}
    for comp_name, comp in (("none", cm.NO_COMPRESSION), ("fp16", FP16)):
        for alg in ("flat", "hierarchical", "auto"):
            for ov in (False, True):
                e = cm.cluster_step_efficiency(step, cluster, alg, comp, overlap=ov)
                out[f"{alg}|{comp_name}|overlap={ov}"] = e
                rows.append([alg, comp_name, "yes" if ov else "no", f"{e * 100:.1f}%"])
    m = step.grad_bytes
    print(f"\n# extrapolation: ResNet-101, {m / 1e6:.0f} MB fp32, compute {step.compute_s * 1e3:.0f} ms/step, "
          f"32 hosts x 4 GPUs, 25 GbE (beta {inter.beta_bytes_per_s / 1e9:.2f} GB/s), "
          f"intra {NVLINK.beta_bytes_per_s / 1e9:.0f} GB/s")
    print(f"  one allreduce of the whole gradient: flat {cm.flat_ring_time(m, cluster) * 1e3:.0f} ms, "
          f"hierarchical {cm.hierarchical_allreduce_time(m, cluster) * 1e3:.0f} ms")
    C.print_table(["allreduce", "compression", "overlap", "efficiency at 128"], rows)
    print("  published (Horovod, flat NCCL ring, fp32): 88%")
    return out


def main():
    p = C.arg_parser(__doc__)
    p.add_argument("--measured", default=os.path.join(HERE, "results", "hierarchical_2x2_1g.json"))
    p.add_argument("--json", default="")
    a = p.parse_args()
    with open(a.measured) as f:
        measured = json.load(f)
    out = {"prediction": prediction_section(measured), "extrapolation": extrapolation_section()}
    if a.json:
        C.write_result(a.json, out)


if __name__ == "__main__":
    main()
