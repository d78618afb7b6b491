"""Training over slow links: pyhorovod (no compression, fp16, bf16, PowerSGD; pyhvd-hier: uncompressed with
the hierarchical allreduce forced on) against torch DDP over gloo (no hook, its fp16 hook, its PowerSGD hook
at the same rank) on an emulated cluster; the model is the 4.2M MLP or (--model cnn) the example CNN.

    flock /tmp/bench.lock python3 benchmarks/cluster.py --hosts 4 --ranks-per-host 1 --links 1000,10000

Cluster: H hosts as network namespaces (tests/netns.py) on one bridge; each host's link is shaped by tbf
to the link speed (what a host sends; every rank of a ring sends as much as it receives, so that is the
bottleneck); R ranks per host. Shared memory is off (PYHOROVOD_SHM=0): namespaces on one machine share
/dev/shm and the boot id, and ranks of different "hosts" must talk over the shaped links. Each round runs
every candidate once per link speed, in the same namespaces, one after the other (interleaved rounds on
this bimodal machine; medians over rounds); "single" (one process, no communication) is the baseline of
the scaling efficiency: samples/s of the job / (workers x samples/s of one).

Then a probe of the communication alone (--probe-rounds): the gradient's allreduce, flat and per layer,
pyhorovod against gloo, at the first link speed. Then the accuracy runs (--accuracy-steps, at the first link
speed): each candidate of --accuracy-candidates trains from scratch for the step budget, rank 0 evaluating
every --eval-every steps; reported: final test accuracy and the steps and training seconds each needed to
reach the uncompressed pyhorovod run's final accuracy. Horovod 0.28.1 (hvd-none, hvd-fp16: its gloo
controller and operations, ranks started directly with its rendezvous variables, since horovodrun would need
ssh into the namespaces) is a candidate where a Python that imports horovod.torch is found (this one or
/opt/hvd-venv); elsewhere it is skipped with the reason.

Outputs: benchmarks/results/cluster_<H>x<R>.json, cluster_<H>x<R>_throughput.png (samples/s by candidate
and link), cluster_<H>x<R>_accuracy.png (test accuracy against training time).
"""
import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
import common as C  # noqa: E402
import plotting  # noqa: E402

CANDIDATES = ["pyhvd-none", "pyhvd-fp16", "pyhvd-bf16", "pyhvd-powersgd", "ddp-none", "ddp-fp16", "ddp-powersgd",
              "hvd-none", "hvd-fp16", "pyhvd-hier"]
DEFAULT_CANDIDATES = CANDIDATES[:7] + ["hvd-fp16"]
WORKER = os.path.join(HERE, "cluster_worker.py")
STORE = ("from pyhorovod import _core; import sys, time; s = _core.TcpStoreServer(sys.argv[1], 0, "
         "sys.argv[2].encode()); print(s.port, flush=True); time.sleep(float(sys.argv[3]))")
# Horovod's own rendezvous (an HTTP key-value server that also hands out each rank's slot), run by the
# Horovod venv's Python on host 0: argv hosts ("h0:R,h1:R,..."), number of ranks, lifetime.
HVD_RENDEZVOUS = ("import sys, time; from horovod.runner.http.http_server import RendezvousServer; "
                  "from horovod.runner.common.util.hosts import parse_hosts, get_host_assignments; "
                  "s = RendezvousServer(); port = s.start(); "
                  "s.init(get_host_assignments(parse_hosts(sys.argv[1]), int(sys.argv[2]))); "
                  "print(port, flush=True); time.sleep(float(sys.argv[3]))")


def rank_envs(cand, net, hosts, per_host, store_port, secret, ddp_port):
    """(host, env) of each rank, host-major: ranks h*R .. h*R+R-1 live on host h."""
    size, out = hosts * per_host, []
    head = net.hosts[0].addr()
    for h in range(hosts):
        for lr in range(per_host):
            r = h * per_host + lr
            if cand.startswith("pyhvd"):
                env = {"PYHOROVOD_RANK": r, "PYHOROVOD_SIZE": size, "PYHOROVOD_LOCAL_RANK": lr,
                       "PYHOROVOD_LOCAL_SIZE": per_host, "PYHOROVOD_CROSS_RANK": h, "PYHOROVOD_CROSS_SIZE": hosts,
                       "PYHOROVOD_STORE_ADDR": head, "PYHOROVOD_STORE_PORT": store_port,
                       "PYHOROVOD_SECRET": secret, "PYHOROVOD_IFACE": "hv0", "PYHOROVOD_SHM": "0",
                       "PYHOROVOD_TIMEOUT_SECONDS": 120}
                if cand == "pyhvd-hier":
                    env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = 1
            elif cand.startswith("hvd"):
                env = {"HOROVOD_RANK": r, "HOROVOD_SIZE": size, "HOROVOD_LOCAL_RANK": lr,
                       "HOROVOD_LOCAL_SIZE": per_host, "HOROVOD_CROSS_RANK": h, "HOROVOD_CROSS_SIZE": hosts,
                       "HOROVOD_HOSTNAME": f"h{h}", "HOROVOD_GLOO_RENDEZVOUS_ADDR": head,
                       "HOROVOD_GLOO_RENDEZVOUS_PORT": store_port, "HOROVOD_CONTROLLER": "gloo",
                       "HOROVOD_CPU_OPERATIONS": "gloo", "HOROVOD_GLOO_IFACE": "hv0",
                       "HOROVOD_GLOO_TIMEOUT_SECONDS": 120}
            else:
                env = {"RANK": r, "WORLD_SIZE": size, "LOCAL_RANK": lr, "LOCAL_WORLD_SIZE": per_host,
                       "MASTER_ADDR": head, "MASTER_PORT": ddp_port, "GLOO_SOCKET_IFNAME": "hv0"}
            out.append((net.hosts[h], C.python_env({k: str(v) for k, v in env.items()})))
    return out


@contextlib.contextmanager
def resolvable_host_names(net):
    """Each namespace's host name resolving to its own link address while the block runs. Horovod 0.28.1's
    process-set contexts ignore HOROVOD_GLOO_IFACE and bind to whatever the host name resolves to (its
    global context honours it); a namespace's name does not resolve at all (its init crashes) and the
    machine's resolves to 127.0.0.1 (its ranks cannot reach each other). `ip netns exec NAME` mounts the
    files of /etc/netns/NAME/ over /etc/, so a hosts file there is seen by that namespace alone."""
    made = []
    try:
        for host in net.hosts:
            folder = os.path.join("/etc/netns", host.name)
            os.makedirs(folder, exist_ok=True)
            made.append(folder)
            with open(os.path.join(folder, "hosts"), "w") as f:
                f.write(f"127.0.0.1 localhost\n{host.addr()} {host.name}\n")
        yield
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


def launch(cand, net, args, mode, steps, warmup=0, eval_every=0, timeout_s=600):
    """Runs one candidate's job in the namespaces; returns its records."""
    python = args.hvd_python if cand.startswith("hvd") else sys.executable
    argv = [python, WORKER, cand, mode, "--model", args.model, "--steps", str(steps), "--warmup", str(warmup),
            "--eval-every", str(eval_every), "--seed", str(args.seed)]
    if cand == "single":
        return C.run_records([(net.hosts[0].argv(argv), C.python_env())], timeout_s, cand)
    secret = secrets.token_hex(16)
    if cand.startswith("hvd"):
        plan = ",".join(f"h{h}:{args.ranks_per_host}" for h in range(args.hosts))
        server = [python, "-c", HVD_RENDEZVOUS, plan, str(args.hosts * args.ranks_per_host), str(timeout_s)]
    else:
        server = [sys.executable, "-c", STORE, net.hosts[0].addr(), secret, str(timeout_s)]
    store = net.hosts[0].popen(server, stdout=subprocess.PIPE, text=True, env=C.python_env(), cwd=ROOT)
    try:
        port = int(store.stdout.readline())
        envs = rank_envs(cand, net, args.hosts, args.ranks_per_host, port, secret, 29500 + secrets.randbelow(2000))
        return C.run_records([(host.argv(argv), env) for host, env in envs], timeout_s, cand)
    finally:
        store.kill()
        store.wait()


def samples_per_s(records):
    """Global samples/s: the slowest rank's median step time (a step ends when its last rank is done)."""
    step = max(C.median(r["step_times"]) for r in records)
    return records[0]["batch"] * records[0]["size"] / step


def time_to(curve, target):
    for point in curve:
        if point["accuracy"] >= target:
            return point["step"], point["train_s"]
    return None, None


def main(argv=None):
    p = C.arg_parser(__doc__)
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--ranks-per-host", type=int, default=1)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp",
                   help="mlp: the 4.2M MLP of anchors.md; cnn: examples/fashion_mnist.py's Net (56k parameters)")
    p.add_argument("--links", default="1000,10000",
                   help="link speeds in Mbit/s, comma-separated")
    p.add_argument("--candidates", type=C.choice_list(CANDIDATES), default=",".join(DEFAULT_CANDIDATES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20, help="timed steps per throughput run")
    p.add_argument("--warmup", type=int, default=12, help="untimed steps first (past PowerSGD's start_iter=10)")
    p.add_argument("--probe-rounds", type=int, default=3,
                   help="rounds of the gradient-allreduce probe (pyhvd-none, ddp-none, hvd-none where built, "
                        "pyhvd-hier when a candidate) at the first link speed")
    p.add_argument("--accuracy-steps", type=int, default=300, help="step budget of the accuracy runs (0: none)")
    p.add_argument("--eval-every", type=int, default=30)
    p.add_argument("--accuracy-candidates", type=C.choice_list(CANDIDATES),
                   default="pyhvd-none,pyhvd-powersgd,ddp-none,ddp-powersgd")
    p.add_argument("--seed", type=int, default=0,
                   help="offset of the model's initialisation and data-order seeds (0: the fixed ones of earlier runs)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    from netns import Network, cleanup_stale, netns_unavailable_reason
    reason = netns_unavailable_reason()
    if reason:
        sys.exit(f"cluster.py: {reason}")
    if args.hosts * args.ranks_per_host > 4 or args.hosts < 2:
        sys.exit("cluster.py: 2..4 hosts and hosts x ranks-per-host <= 4 on this machine")
    links = [int(x) for x in args.links.split(",")]
    cands = args.candidates.split(",")
    skipped = {}
    args.hvd_python = C.find_horovod_python() if any(c.startswith("hvd") for c in cands) else None
    if any(c.startswith("hvd") for c in cands) and not args.hvd_python:
        skipped["horovod"] = "Horovod 0.28.1 is not built on this machine (no Python imports horovod.torch)"
        cands = [c for c in cands if not c.startswith("hvd")]
    tag = f"{args.hosts}x{args.ranks_per_host}" + ("_cnn" if args.model == "cnn" else "")
    out_path = args.out or os.path.join(HERE, "results", f"cluster_{tag}.json")
    cleanup_stale()
    throughput = {f"{c}@{l}": [] for c in cands for l in links}
    single, curves, probe, t_start = [], {}, {}, time.time()
    with Network(hosts=args.hosts) as net, resolvable_host_names(net):
        for rnd in range(args.rounds):
            single.append(samples_per_s(launch("single", net, args, "throughput", args.steps, args.warmup)))
            for link in links:
                for host in net.hosts:
                    host.shape("hv0", rate_mbit=link)
                for cand in cands:
                    rate = samples_per_s(launch(cand, net, args, "throughput", args.steps, args.warmup))
                    throughput[f"{cand}@{link}"].append(rate)
                    print(f"round {rnd} link {link} Mbit/s {cand:16s} {rate:8.1f} samples/s", flush=True)
        for host in net.hosts:
            host.shape("hv0", rate_mbit=links[0])
        for rnd in range(args.probe_rounds):
            probed = ("pyhvd-none", "ddp-none") + (("hvd-none",) if args.hvd_python else ())
            for cand in probed + (("pyhvd-hier",) if "pyhvd-hier" in cands else ()):
                recs = launch(cand, net, args, "allreduce", 5, 2)
                for kind in ("flat", "tensors"):
                    probe.setdefault(f"{cand} {kind}", []).append(max(C.median(r[kind]) for r in recs))
                probe["bytes"] = recs[0]["bytes"]
        if args.accuracy_steps:
            for cand in args.accuracy_candidates.split(","):
                recs = launch(cand, net, args, "accuracy", args.accuracy_steps, eval_every=args.eval_every,
                              timeout_s=1800)
                curves[cand] = recs[0]
                last = recs[0]["curve"][-1]
                print(f"accuracy {cand:16s} {last['accuracy']:.4f} after {last['step']} steps, "
                      f"{last['train_s']:.1f} s", flush=True)
    result = summarize(args, links, cands, throughput, single, curves, skipped)
    if probe:
        n = args.hosts * args.ranks_per_host
        result["allreduce_probe"] = {
            "median_s": {k: C.median(v) for k, v in probe.items() if k != "bytes"},
            "rounds_s": {k: v for k, v in probe.items() if k != "bytes"}, "bytes": probe["bytes"],
            "ring_floor_s": 2 * (n - 1) / n * probe["bytes"] / (links[0] * 1e6 / 8)}
    result["wall_s"] = time.time() - t_start
    C.write_result(out_path, result, argv=sys.argv)
    draw(result, out_path[:-len(".json")])
    report(result)


def summarize(args, links, cands, throughput, single, curves, skipped):
    workers = args.hosts * args.ranks_per_host
    one = C.median(single) if single else None
    med = {k: C.median(v) for k, v in throughput.items() if v}
    rows = {k: {"samples_per_s": med[k], "rounds": throughput[k], "efficiency": med[k] / (workers * one)}
            for k in med}
    ratios = {}
    for link in links:
        def r(a, b):
            """Median over rounds of the per-round ratio (the two ran minutes apart in the same round)."""
            xs, ys = throughput.get(f"{a}@{link}") or [], throughput.get(f"{b}@{link}") or []
            return C.median([x / y for x, y in zip(xs, ys)]) if xs and ys else float("nan")
        ratios[str(link)] = {"powersgd/ddp-none": r("pyhvd-powersgd", "ddp-none"),
                             "powersgd/ddp-powersgd": r("pyhvd-powersgd", "ddp-powersgd"),
                             "none/ddp-none": r("pyhvd-none", "ddp-none"),
                             "bf16/ddp-fp16": r("pyhvd-bf16", "ddp-fp16"),
                             "none/hvd-none": r("pyhvd-none", "hvd-none"),
                             "fp16/hvd-fp16": r("pyhvd-fp16", "hvd-fp16"),
                             "hier/none": r("pyhvd-hier", "pyhvd-none")}
    accuracy = {}
    if "pyhvd-none" in curves:
        target = curves["pyhvd-none"]["curve"][-1]["accuracy"]
        for cand, rec in curves.items():
            steps, secs = time_to(rec["curve"], target)
            accuracy[cand] = {"final": rec["curve"][-1]["accuracy"], "target": target, "steps_to_target": steps,
                              "seconds_to_target": secs, "train_s": rec["curve"][-1]["train_s"],
                              "epochs": rec["epochs"], "curve": rec["curve"]}
    return {"hosts": args.hosts, "ranks_per_host": args.ranks_per_host, "model": args.model, "links_mbit": links,
            "single_samples_per_s": one, "single_rounds": single, "throughput": rows, "ratios": ratios,
            "accuracy": accuracy, "skipped": skipped, "steps": args.steps, "warmup": args.warmup,
            "rounds": args.rounds, "accuracy_steps": args.accuracy_steps, "seed": args.seed}


def draw(result, stem):
    if result["throughput"]:
        draw_throughput(result, stem)
    if result["accuracy"]:
        draw_accuracy(result, stem)


def draw_throughput(result, stem):
    links = result["links_mbit"]
    cands = sorted({k.split("@")[0] for k in result["throughput"]}, key=CANDIDATES.index)
    fig, axes = plotting.new_figure(width=7.5)
    ax = axes[0][0]
    width = 0.8 / len(links)
    for j, link in enumerate(links):
        ys = [result["throughput"][f"{c}@{link}"]["samples_per_s"] for c in cands]
        ax.bar([i + j * width for i in range(len(cands))], ys, width, label=f"{link / 1000:g} Gbit/s")
    ax.set_xticks([i + width * (len(links) - 1) / 2 for i in range(len(cands))], cands, rotation=30,
                  fontsize=7)
    ax.set_ylabel("samples/s (median of rounds)")
    model = "4.2M MLP" if result.get("model", "mlp") == "mlp" else "56k CNN"
    ax.set_title(f"{result['hosts']} hosts x {result['ranks_per_host']} rank, {model}, batch 32/rank", fontsize=9)
    plotting.legend_outside(ax)
    plotting.save(fig, stem + "_throughput.png")


def draw_accuracy(result, stem):
    fig, axes = plotting.new_figure()
    ax = axes[0][0]
    for cand, acc in result["accuracy"].items():
        curve = acc["curve"]
        plotting.measured(ax, [p["train_s"] for p in curve], [p["accuracy"] for p in curve], cand,
                          cand.startswith("pyhvd"))
    ax.set_xlabel("training time (s, evaluations excluded)")
    ax.set_ylabel("test accuracy (5000 test images)")
    ax.set_title(f"Fashion-MNIST at {result['links_mbit'][0] / 1000:g} Gbit/s", fontsize=9)
    plotting.legend_outside(ax)
    plotting.save(fig, stem + "_accuracy.png")


def report(result):
    rows = [[k, f"{v['samples_per_s']:.1f}", f"{100 * v['efficiency']:.1f}%",
             " ".join(f"{x:.0f}" for x in v["rounds"])] for k, v in result["throughput"].items()]
    C.print_table(["candidate@Mbit/s", "samples/s", "efficiency", "rounds"], rows)
    if result["single_samples_per_s"]:
        print(f"one process: {result['single_samples_per_s']:.1f} samples/s")
    for link, r in result["ratios"].items():
        measured = {k: v for k, v in r.items() if v == v}   # NaN: a candidate of the pair did not run
        if measured:
            print(f"{link} Mbit/s: " + ", ".join(f"{k} {v:.2f}x" for k, v in measured.items()))
    for cand, a in result["accuracy"].items():
        print(f"{cand}: final {100 * a['final']:.2f}% after {a['train_s']:.1f} s; to {100 * a['target']:.2f}%: "
              f"{a['steps_to_target']} steps, {a['seconds_to_target']} s")
    if "allreduce_probe" in result:
        pr = result["allreduce_probe"]
        print(f"gradient allreduce alone ({pr['bytes'] / 1e6:.1f} MB, ring floor {1e3 * pr['ring_floor_s']:.0f} ms): "
              + ", ".join(f"{k} {1e3 * v:.0f} ms" for k, v in pr["median_s"].items()))
    for k, v in result["skipped"].items():
        print(f"skipped {k}: {v}")


if __name__ == "__main__":
    main()
