"""Horovod 0.28 environment variables that do nothing in pyhorovod, and the one warning that says so.

A script or cluster set-up written for Horovod may set variables whose feature pyhorovod lacks or does
differently. Rather than ignoring them silently, `init()` on rank 0 logs one WARNING line (logger
"pyhorovod") naming those that are set, once per process. The variables pyhorovod does honour are read in
pyhorovod/_config.py and pyhorovod/_bootstrap.py; the launcher (pyhorovod/runner/horovod_flags.py) uses
the same table for its flags. Honouring one later means deleting its line here.

A name ending in "*" covers every variable with that prefix.
"""
import logging
from typing import Dict, List, Mapping

_BUILD = "a build-time setting of Horovod's; pyhorovod's build is chosen by PYHOROVOD_WITH_NCCL"
_AUTOTUNE = ("pyhorovod has no autotuner: ring segments come from its cost model; set "
             "HOROVOD_FUSION_THRESHOLD and HOROVOD_CYCLE_TIME by hand")
_GPU_OPS = "CUDA tensors always go through NCCL when the GPU backend is built"
_NO_MPI = "pyhorovod links no MPI library (mpirun is only a launcher here)"
_CCL = "pyhorovod has no oneCCL backend"

INERT: Dict[str, str] = {
    "HOROVOD_AUTOTUNE": _AUTOTUNE,
    "HOROVOD_AUTOTUNE_LOG": _AUTOTUNE,
    "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": _AUTOTUNE,
    "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": _AUTOTUNE,
    "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": _AUTOTUNE,
    "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": _AUTOTUNE,
    "HOROVOD_HIERARCHICAL_ALLREDUCE": "allreduce is one ring over all ranks (shared memory between ranks "
                                      "of a host); there is no hierarchical variant",
    "HOROVOD_HIERARCHICAL_ALLGATHER": "allgather is one ring over all ranks; there is no hierarchical variant",
    "HOROVOD_TORUS_ALLREDUCE": "there is no torus allreduce",
    "HOROVOD_THREAD_AFFINITY": "the engine thread is not pinned; use taskset or numactl on the command",
    "HOROVOD_CONTROLLER": "pyhorovod negotiates through its own TCP controller (no MPI or Gloo controller)",
    "HOROVOD_CPU_OPERATIONS": "CPU tensors always use pyhorovod's TCP and shared-memory core",
    "HOROVOD_GPU_OPERATIONS": _GPU_OPS,
    "HOROVOD_GPU_ALLREDUCE": _GPU_OPS,
    "HOROVOD_GPU_ALLGATHER": _GPU_OPS,
    "HOROVOD_GPU_BROADCAST": _GPU_OPS,
    "HOROVOD_GPU_ALLTOALL": _GPU_OPS,
    "HOROVOD_GPU_REDUCESCATTER": _GPU_OPS,
    "HOROVOD_MPI_THREADS_DISABLE": _NO_MPI,
    "HOROVOD_ADASUM_MPI_CHUNK_SIZE": "pyhorovod does not run Adasum over MPI",
    "HOROVOD_NUM_NCCL_STREAMS": "the GPU backend uses one NCCL stream per process",
    "HOROVOD_BATCH_D2D_MEMCOPIES": "fused GPU tensors are copied one by one into the fusion buffer",
    "HOROVOD_DISABLE_GROUP_FUSION": "grouped collectives are always fused as one unit",
    "HOROVOD_ENABLE_ASYNC_COMPLETION": "GPU completion is always tracked with CUDA events",
    "HOROVOD_DISABLE_NVTX_RANGES": "pyhorovod emits no NVTX ranges",
    "HOROVOD_ELASTIC": "the elastic driver (pyhorovod run --min-np/--max-np) tells its workers by other means",
    "HOROVOD_ENABLE_XLA_OPS": "there is no TensorFlow support",
    "HOROVOD_CCL_*": _CCL,
    "HOROVOD_MLSL_BGT_AFFINITY": _CCL,
    "HOROVOD_LOG_HIDE_TIME": "engine log lines carry no timestamp; `pyhorovod run "
                             "--prefix-output-with-timestamp` stamps every output line",
    "HOROVOD_GPU": _BUILD,
    "HOROVOD_WITH_PYTORCH": _BUILD,
    "HOROVOD_WITHOUT_PYTORCH": _BUILD,
    "HOROVOD_WITH_TENSORFLOW": _BUILD,
    "HOROVOD_WITHOUT_TENSORFLOW": _BUILD,
    "HOROVOD_WITH_MXNET": _BUILD,
    "HOROVOD_WITHOUT_MXNET": _BUILD,
    "HOROVOD_WITH_MPI": _BUILD,
    "HOROVOD_WITHOUT_MPI": _BUILD,
    "HOROVOD_WITH_GLOO": _BUILD,
    "HOROVOD_WITHOUT_GLOO": _BUILD,
    "HOROVOD_CUDA_HOME": _BUILD,
    "HOROVOD_CUDA_INCLUDE": _BUILD,
    "HOROVOD_CUDA_LIB": _BUILD,
    "HOROVOD_NCCL_HOME": _BUILD,
    "HOROVOD_NCCL_INCLUDE": _BUILD,
    "HOROVOD_NCCL_LIB": _BUILD,
    "HOROVOD_NCCL_LINK": _BUILD,
    "HOROVOD_ROCM_HOME": _BUILD,
    "HOROVOD_BUILD_CUDA_CC_LIST": _BUILD,
    "HOROVOD_BUILD_ARCH_FLAGS": _BUILD,
    "HOROVOD_ALLOW_MIXED_GPU_IMPL": _BUILD,
    "HOROVOD_CMAKE": _BUILD,
    "HOROVOD_DEBUG": _BUILD,
    "HOROVOD_MPICXX_SHOW": _BUILD,
}

log = logging.getLogger("pyhorovod")
_reported = False


def reason(name: str):
    """Why variable `name` has no effect in pyhorovod, or None when it is honoured (or not Horovod's)."""
    if name in INERT:
        return INERT[name]
    for pattern, why in INERT.items():
        if pattern.endswith("*") and name.startswith(pattern[:-1]):
            return why
    return None


def inert_set(env: Mapping[str, str]) -> List[str]:
    """The variables set (non-empty) in env that have no effect, sorted."""
    return sorted(n for n, v in env.items() if n.startswith("HOROVOD_") and v.strip() and reason(n))


def report_once(env: Mapping[str, str], rank: int) -> None:
    """On rank 0, the first call in this process logs one WARNING naming every inert variable set."""
    global _reported
    if rank != 0 or _reported:
        return
    _reported = True
    names = inert_set(env)
    if names:
        log.warning("pyhorovod: these Horovod variables have no effect here: %s",
                    "; ".join(f"{n} ({reason(n)})" for n in names))
