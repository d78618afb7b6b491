"""Alpha-beta cost model of allreduce algorithms and of the step time of data-parallel training.

Terms:
  alpha  seconds of fixed cost per message (latency: system calls, wake-ups, one network hop).
  beta   bytes per second that one link (a host's NIC, or one rank's path) moves in each direction.
         Links are full duplex: a rank can send and receive beta bytes/s at the same time.
  gamma  seconds per byte to reduce (add) received data into a buffer; 0 by default. With a fixed world
         size a fit cannot tell gamma from 1/beta (both scale with M), so fitted betas include it.
  M      bytes of gradients reduced per step; p workers (ranks, GPUs); g workers per host (NIC).

Allreduce time on M bytes (derivations next to each function):
  ring                 2(p-1) alpha + 2(p-1)/p M/beta + (p-1)/p M gamma
  recursive doubling   ceil(log2 p) (alpha + M/beta + M gamma), + 2(alpha + M/beta) when p is no power of two
  tree                 2L (alpha + c M/beta) + L c M gamma, L = ceil(log2 p), c = 2 children (1 if p = 2):
                       binary-tree reduce, then broadcast, whole buffer per hop
  parameter server     2 alpha + 2 max(traffic through the busiest NIC in one direction)/beta + reduce
The bandwidth term of the ring stops growing with p; the parameter server's grows linearly in p/S.

Step time (weak scaling: fixed batch per worker, compute t_c per step, of which t_b is backward):
  no overlap   T = t_c + T_ar(M)
  overlap      gradients become ready uniformly during backward; they are reduced in fusion buckets of F
               bytes, one after another, each as soon as it is full and the previous one is done (the
               Horovod/DDP schedule). T = the end of the last bucket (simulated exactly, see step_time).
  efficiency   t_c / T  (per-worker throughput at p relative to one worker, which does no communication).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

ALGORITHMS = ("ring", "recursive_doubling", "tree", "parameter_server")


@dataclass(frozen=True)
class Network:
    alpha_s: float
    beta_bytes_per_s: float
    gamma_s_per_byte: float = 0.0

    def __post_init__(self):
        if self.alpha_s < 0 or self.beta_bytes_per_s <= 0 or self.gamma_s_per_byte < 0:
            raise ValueError(f"need alpha >= 0, beta > 0, gamma >= 0; got {self}")


def _check(m_bytes: float, p: int) -> None:
    if m_bytes < 0:
        raise ValueError(f"message size must be >= 0, got {m_bytes}")
    if int(p) != p or p < 1:
        raise ValueError(f"worker count must be an integer >= 1, got {p}")


def _log2_ceil(p: int) -> int:
    return (p - 1).bit_length()


def ring_allreduce_time(m_bytes: float, p: int, net: Network) -> float:
    """Reduce-scatter then allgather over a ring: M is cut into p chunks; each phase has p-1 steps, and
    in each step every rank sends one chunk (M/p) to its successor while receiving one from its
    predecessor (full duplex). 2(p-1) steps of (alpha + M/(p beta)); the reduce-scatter steps also add
    a received chunk into the local one ((p-1) M/p gamma in all)."""
    _check(m_bytes, p)
    if p == 1:
        return 0.0
    return (2 * (p - 1) * net.alpha_s + 2 * (p - 1) / p * m_bytes / net.beta_bytes_per_s
            + (p - 1) / p * m_bytes * net.gamma_s_per_byte)


def recursive_doubling_time(m_bytes: float, p: int, net: Network) -> float:
    """log2 p rounds; in round k each rank exchanges the whole buffer with the rank whose index differs
    in bit k, and adds. For p not a power of two, the r = p - 2^floor(log2 p) extra ranks first fold
    their buffer into a partner and get the result back at the end: two more whole-buffer steps."""
    _check(m_bytes, p)
    if p == 1:
        return 0.0
    q = 1 << (p.bit_length() - 1)                # largest power of two <= p
    rounds = q.bit_length() - 1
    per_round = net.alpha_s + m_bytes / net.beta_bytes_per_s + m_bytes * net.gamma_s_per_byte
    extra = 0.0 if q == p else 2 * (net.alpha_s + m_bytes / net.beta_bytes_per_s) + m_bytes * net.gamma_s_per_byte
    return rounds * per_round + extra


def tree_allreduce_time(m_bytes: float, p: int, net: Network) -> float:
    """Binary-tree reduce to the root, then broadcast back, whole buffer per hop (no pipelining), over
    L = ceil(log2 p) levels each way. Going up, an interior node takes in M from each of its c = 2
    children through its one link (c M/beta) and adds both (c M gamma); going down it sends M to each
    child (c M/beta). T = 2L (alpha + c M/beta) + L c M gamma, with c = 1 when p = 2 (a single child)."""
    _check(m_bytes, p)
    if p == 1:
        return 0.0
    levels = _log2_ceil(p)
    children = 1 if p == 2 else 2               # fan-in of the busiest node
    return (2 * levels * (net.alpha_s + children * m_bytes / net.beta_bytes_per_s)
            + levels * children * m_bytes * net.gamma_s_per_byte)


def parameter_server_time(m_bytes: float, p: int, net: Network, servers: int = 1,
                          colocated: bool = False, workers_per_host: int = 1) -> float:
    """Push (every worker sends its gradients, sharded over S servers, M/S to each), reduce on the
    servers, pull (every worker receives the M reduced bytes back). Each phase lasts as long as the
    busiest NIC needs for the bytes it must move in one direction; the phases do not overlap.

    dedicated servers (hosts of their own): a worker host moves g*M each way per phase; a server NIC
      receives (push) and sends (pull) p*M/S.
    colocated (each server on one of the h = p/g worker hosts, S <= h): a host with a server pushes
      g*M*(S-1)/S of its workers' shards out and takes in (p-g)*M/S for its own shard; a host without a
      server pushes g*M. Pull mirrors push.
    Reduce: each server adds p (dedicated) or p (colocated, the local shards included) shards of M/S."""
    _check(m_bytes, p)
    if servers < 1 or workers_per_host < 1 or p % workers_per_host:
        raise ValueError(f"need servers >= 1 and workers_per_host dividing p; "
                         f"got S={servers}, g={workers_per_host}, p={p}")
    g, s = workers_per_host, servers
    hosts = p // g
    if colocated:
        if s > hosts:
            raise ValueError(f"{s} colocated servers need at least as many hosts, got {hosts}")
        if p == g:
            return 0.0                           # one host: nothing crosses a NIC
        busiest = max(g * m_bytes * (s - 1) / s, (p - g) * m_bytes / s)
        if s < hosts:
            busiest = max(busiest, g * m_bytes)
    else:
        busiest = max(g * m_bytes, p * m_bytes / s)
    reduce = (p - 1) * m_bytes / s * net.gamma_s_per_byte
    return 2 * net.alpha_s + 2 * busiest / net.beta_bytes_per_s + reduce


def allreduce_time(algorithm: str, m_bytes: float, p: int, net: Network, **kw) -> float:
    if algorithm == "ring":
        return ring_allreduce_time(m_bytes, p, net)
    if algorithm == "recursive_doubling":
        return recursive_doubling_time(m_bytes, p, net)
    if algorithm == "tree":
        return tree_allreduce_time(m_bytes, p, net)
    if algorithm == "parameter_server":
        return parameter_server_time(m_bytes, p, net, **kw)
    raise ValueError(f"unknown algorithm {algorithm!r}; known: {ALGORITHMS}")


@dataclass(frozen=True)
class StepModel:
    """A training step: compute t_c seconds per step on one worker, backward_fraction of it backward,
    M gradient bytes, fused into buckets of fusion_bytes (0: one bucket), per_call_overhead_s added to
    every allreduce call (a framework's negotiation or cycle time)."""
    compute_s: float
    grad_bytes: float
    backward_fraction: float = 2.0 / 3.0
    fusion_bytes: float = 64 << 20
    per_call_overhead_s: float = 0.0

    def __post_init__(self):
        if self.compute_s <= 0 or self.grad_bytes < 0 or not 0 <= self.backward_fraction <= 1 or self.fusion_bytes < 0:
            raise ValueError(f"bad step model {self}")


def bucket_sizes(total: float, fusion: float) -> List[float]:
    if total <= 0:
        return []
    if fusion <= 0 or fusion >= total:
        return [total]
    k = int(math.ceil(total / fusion))
    return [fusion] * (k - 1) + [total - fusion * (k - 1)]


def step_time(step: StepModel, comm: Callable[[float], float], overlap: bool) -> float:
    """comm(bytes) -> seconds of one allreduce call. Without overlap every bucket is reduced after the
    whole backward pass; with overlap bucket k (ready when the backward pass has produced its last byte,
    at t_f + t_b * (bytes so far)/M) starts when it is ready and the previous bucket is done."""
    t_b = step.compute_s * step.backward_fraction
    t_f = step.compute_s - t_b
    end = step.compute_s if not overlap else t_f
    done = 0.0
    for b in bucket_sizes(step.grad_bytes, step.fusion_bytes):
        done += b
        ready = t_f + t_b * done / step.grad_bytes if overlap else step.compute_s
        end = max(end, ready) + comm(b) + step.per_call_overhead_s
    return max(end, step.compute_s)


def scaling_efficiency(step: StepModel, algorithm: str, p: int, net: Network, overlap: bool, **kw) -> float:
    """Per-worker throughput at p workers relative to one (weak scaling): t_c / T(p)."""
    if p == 1:
        return 1.0
    return step.compute_s / step_time(step, lambda b: allreduce_time(algorithm, b, p, net, **kw), overlap)


# ---------------------------------------------------------------- fitting alpha and beta to measurements

def fit_ring(points: Iterable[Tuple[int, float, float]]) -> Tuple[Network, float]:
    """Least-squares fit of T = 2(p-1) alpha + 2(p-1)/p M (1/beta) to (p, M bytes, seconds) points, each
    row divided by its measured T so that every point counts by its relative error (otherwise the largest
    sizes alone would decide alpha). Returns (Network, worst relative error of the fit). If the free fit
    gives a negative coefficient, that one is pinned at 0 (beta then gets an upper bound of 1e15 B/s)."""
    rows = []
    for p, m, t in points:
        if p < 2 or t <= 0:
            raise ValueError(f"need p >= 2 and t > 0, got {(p, m, t)}")
        rows.append((2.0 * (p - 1) / t, 2.0 * (p - 1) / p * m / t))   # coefficients of alpha, 1/beta; target 1
    if len(rows) < 2:
        raise ValueError("need at least two points to fit alpha and beta")
    saa = sum(a * a for a, _ in rows)
    sbb = sum(b * b for _, b in rows)
    sab = sum(a * b for a, b in rows)
    sa = sum(a for a, _ in rows)
    sb = sum(b for _, b in rows)
    det = saa * sbb - sab * sab
    alpha, inv_beta = ((sa * sbb - sb * sab) / det, (saa * sb - sab * sa) / det) if det > 0 else (-1.0, -1.0)
    if alpha < 0 or inv_beta <= 0:
        # one-parameter fits; keep the better of the two
        cand = []
        if sbb > 0:
            cand.append((0.0, sb / sbb))
        if saa > 0:
            cand.append((sa / saa, 1e-15))
        alpha, inv_beta = min(cand, key=lambda c: sum((a * c[0] + b * c[1] - 1) ** 2 for a, b in rows))
    net = Network(alpha, 1.0 / max(inv_beta, 1e-15))
    worst = max(abs(ring_allreduce_time(m, p, net) / t - 1.0) for p, m, t in points)
    return net, worst


def points_from_collectives_json(path_or_obj, candidate: str, op: str = "allreduce",
                                 min_bytes: int = 0) -> List[Tuple[int, float, float]]:
    """(p, bytes, median seconds) of one candidate from benchmarks/collectives.py's JSON."""
    obj = path_or_obj
    if isinstance(path_or_obj, str):
        with open(path_or_obj) as f:
            obj = json.load(f)
    return [(r["n"], float(r["bytes"]), float(r["time_s"])) for r in obj["results"]
            if r["cand"] == candidate and r["op"] == op and r["bytes"] >= min_bytes and r["n"] >= 2]


def efficiency_table(step: StepModel, net: Network, workers: Sequence[int],
                     configs: Dict[str, Tuple[str, dict]], overlap: bool) -> Dict[str, List[float]]:
    """configs: label -> (algorithm, keyword arguments); returns label -> efficiency at each worker count."""
    return {label: [scaling_efficiency(step, alg, p, net, overlap, **kw) for p in workers]
            for label, (alg, kw) in configs.items()}


def predicted_vs_measured(points: Sequence[Tuple[int, float, float]], net: Network,
                          algorithm: str = "ring") -> List[dict]:
    out = []
    for p, m, t in points:
        pred = allreduce_time(algorithm, m, p, net)
        out.append({"p": p, "bytes": m, "measured_s": t, "predicted_s": pred, "rel_error": pred / t - 1.0})
    return out


def best_servers(m_bytes: float, p: int, net: Network, candidates: Optional[Sequence[int]] = None, **kw) -> int:
    """The server count (from candidates, default 1..p) with the shortest parameter-server time."""
    cands = list(candidates) if candidates else list(range(1, p + 1))
    return min(cands, key=lambda s: parameter_server_time(m_bytes, p, net, servers=s, **kw))


# ---------------------------------------------------------------- hosts, hierarchy and compression

@dataclass(frozen=True)
class Cluster:
    """H hosts of g workers each. `intra` is the link between two workers of a host (shared memory,
    NVLink); `inter` is a host's NIC, shared by all its workers (beta: the NIC's rate per direction)."""
    hosts: int
    per_host: int
    intra: Network
    inter: Network

    def __post_init__(self):
        if self.hosts < 1 or self.per_host < 1:
            raise ValueError(f"need hosts >= 1 and per_host >= 1, got {self.hosts} x {self.per_host}")

    @property
    def workers(self) -> int:
        return self.hosts * self.per_host


def flat_ring_time(m_bytes: float, c: Cluster) -> float:
    """One ring over all p = H g workers, numbered host by host: each of its 2(p-1) steps moves M/p over
    every link at once, and with H > 1 each step includes a host-to-host link (one ring edge leaves every
    host, so a NIC carries one stream each way), which is the slowest: 2(p-1) (alpha_inter + M/(p beta_inter)).
    On one host it is the ring over intra links."""
    _check(m_bytes, c.workers)
    return ring_allreduce_time(m_bytes, c.workers, c.inter if c.hosts > 1 else c.intra)


def flat_small_time(m_bytes: float, c: Cluster) -> float:
    """Recursive doubling over all p = H g workers numbered host by host, which is what the engine runs
    for a flat allreduce below its small-message threshold: ceil(log2 g) whole-buffer exchanges inside the
    host, then ceil(log2 H) across it, in which all g workers of a host send M through its NIC at once:
      T = ceil(log2 g) (alpha_intra + M/beta_intra) + ceil(log2 H) (alpha_inter + g M/beta_inter)."""
    _check(m_bytes, c.workers)
    inside = _log2_ceil(c.per_host) * (c.intra.alpha_s + m_bytes / c.intra.beta_bytes_per_s)
    across = _log2_ceil(c.hosts) * (c.inter.alpha_s + c.per_host * m_bytes / c.inter.beta_bytes_per_s)
    return inside + across


def flat_allreduce_time(m_bytes: float, c: Cluster, small_threshold_bytes: float = 0.0) -> float:
    """The flat allreduce the engine runs for this size: recursive doubling below small_threshold_bytes
    (the engine's small-message threshold of p ranks; 0: always the ring), the ring from there."""
    if m_bytes < small_threshold_bytes:
        return flat_small_time(m_bytes, c)
    return flat_ring_time(m_bytes, c)


def hierarchical_allreduce_time(m_bytes: float, c: Cluster) -> float:
    """Reduce-scatter inside each host (g-1 steps of M/g over intra links), then g cross-host ring
    allreduces at once, each on its shard of M/g over H hosts -- all g share the host's NIC, so the NIC
    moves g * 2(H-1)/H * M/g = 2(H-1)/H * M each way -- then an allgather inside the host (g-1 steps):
      T = 2(g-1) alpha_intra + 2(g-1)/g M/beta_intra + 2(H-1) alpha_inter + 2(H-1)/H M/beta_inter.
    A flat ring's NIC moves 2(p-1)/p M: the saving is the ratio (p-1)/p : (H-1)/H (1.5x at 2 x 2)."""
    _check(m_bytes, c.workers)
    local = ring_allreduce_time(m_bytes, c.per_host, c.intra)
    if c.hosts == 1:
        return local
    cross = (2 * (c.hosts - 1) * c.inter.alpha_s + 2 * (c.hosts - 1) / c.hosts * m_bytes / c.inter.beta_bytes_per_s
             + (c.hosts - 1) / c.hosts * m_bytes / c.per_host * c.inter.gamma_s_per_byte)
    return local + cross


def auto_allreduce_time(m_bytes: float, c: Cluster, small_threshold_bytes: float = 0.0) -> float:
    """What an engine that picks the faster of the two per size would take."""
    return min(flat_allreduce_time(m_bytes, c, small_threshold_bytes), hierarchical_allreduce_time(m_bytes, c))


@dataclass(frozen=True)
class Compression:
    """A gradient compressor as the network sees it: `ratio` = bytes on the wire / raw bytes (fp16 and
    bf16: 0.5; PowerSGD rank r on an n x k matrix: r (n + k) / (n k)); `messages` allreduces per call
    (PowerSGD: 2, one for the P's and one for the Q's); `compute_s_per_byte` the compression plus
    decompression work per raw byte (casts, or PowerSGD's matrix products and orthogonalisation)."""
    ratio: float
    messages: int = 1
    compute_s_per_byte: float = 0.0

    def __post_init__(self):
        if not 0 < self.ratio <= 1 or self.messages < 1 or self.compute_s_per_byte < 0:
            raise ValueError(f"need 0 < ratio <= 1, messages >= 1, compute >= 0; got {self}")


NO_COMPRESSION = Compression(1.0)


def compressed_allreduce_time(m_bytes: float, comm: Callable[[float], float], comp: Compression) -> float:
    """comm(bytes) -> seconds of one allreduce. The compressed bytes go in `messages` equal allreduces,
    one after another, plus the compute: messages * comm(ratio M / messages) + M compute_s_per_byte."""
    if m_bytes < 0:
        raise ValueError(f"message size must be >= 0, got {m_bytes}")
    if m_bytes == 0:
        return 0.0
    wire = m_bytes * comp.ratio / comp.messages
    return comp.messages * comm(wire) + m_bytes * comp.compute_s_per_byte


def cluster_step_efficiency(step: StepModel, c: Cluster, algorithm: str = "auto",
                            comp: Compression = NO_COMPRESSION, overlap: bool = True) -> float:
    """Weak-scaling efficiency t_c / T of a step on cluster c; algorithm: "flat", "hierarchical" or "auto"."""
    fn = {"flat": flat_ring_time, "hierarchical": hierarchical_allreduce_time,
          "auto": auto_allreduce_time}.get(algorithm)
    if fn is None:
        raise ValueError(f"algorithm must be flat, hierarchical or auto, got {algorithm!r}")
    if c.workers == 1:
        return 1.0
    return step.compute_s / step_time(step, lambda b: compressed_allreduce_time(b, lambda x: fn(x, c), comp), overlap)
