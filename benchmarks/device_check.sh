#!/usr/bin/env bash
# Everything pyhorovod needs checked on a GPU machine (one H200, 16 cores, no network), in one run of
# under 9 minutes: builds the extension with the GPU backend, runs the GPU tests (NCCL path, ranks
# sharing one GPU, join), measures the GPU overheads and the staged path's bandwidth, then the CPU
# scaling targets that need spare cores. Prints every figure; with $OUT set, writes
# $OUT/device_check.json (device_summary.py) and the raw JSON files beside it.
#
#   bash benchmarks/device_check.sh                   the whole check (what a device session runs)
#   bash benchmarks/device_check.sh --dry-run         prints the plan and the dependency check, runs nothing
#   bash benchmarks/device_check.sh --cpu-only        the steps that need no GPU (rehearsal on any machine)
#   bash benchmarks/device_check.sh --only a,b        only the named steps (names: --dry-run lists them)
#   bash benchmarks/device_check.sh --fetch-wheels    downloads pybind11, cmake and pytest wheels into .whl/
#   options: --no-build (use pyhorovod/_core*.so as it is), --quick (tiny benchmarks: rehearsal only)
#
# Exit code: 1 when a step failed (build, tests, a benchmark that crashed or timed out), 2 when every
# step passed but a measured goal was missed, 0 otherwise. Steps that do not fit in what is left of
# BUDGET_S (default 530 s) are skipped and reported as such. JOBS (default nproc) and BUILD_LIMIT_S
# (default 240) are for rehearsals on small machines.
#
# Dependencies. The device has no network, so nothing is installed from a registry there. The build
# needs cmake (>= 3.18), pybind11, nvcc and NCCL's headers and library; the tests need pytest, and
# pyhorovod numpy (torch does not require it). NCCL is
# found where torch's CUDA wheels put it (site-packages/nvidia/nccl, the nvidia-nccl-cu12/-cu13 wheel:
# cmake/nccl.cmake asks `import nvidia.nccl`, and this script also searches every site-packages folder
# and sets NCCL_ROOT). Missing Python packages are installed from wheels in .whl/ if that folder was
# carried along; prepare it on a machine with network and carry it (the device tool's carry: [".whl"]):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl pybind11 cmake numpy
#   python3 -m pip download --only-binary=:all: --python-version 3.12 -d .whl pytest
# (that is what --fetch-wheels runs; PYVER=3.11 etc. for another Python). Without them the dependency
# step fails and names what is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"
BUDGET_S="${BUDGET_S:-530}"
BUILD_DIR="${BUILD_DIR:-build-device}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

ALL_STEPS="machine deps build unit gpu_tests shared_tests gpu_overhead busbw cpu_scaling cpu_step_cost"
CPU_STEPS="machine deps unit cpu_scaling cpu_step_cost"
DRY=0; NO_BUILD=0; QUICK=0; ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --cpu-only) ONLY="$CPU_STEPS" ;;
    --only) shift; ONLY="${1:-}"; ONLY="${ONLY//,/ }"; [ -n "$ONLY" ] || { echo "--only needs step names" >&2; exit 64; } ;;
    --only=*) ONLY="${1#--only=}"; ONLY="${ONLY//,/ }" ;;
    --no-build) NO_BUILD=1 ;;
    --quick) QUICK=1 ;;
    --fetch-wheels)
      v="${PYVER:-3.12}"
      "$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version "$v" -d .whl pybind11 cmake numpy &&
        "$PYTHON" -m pip download --only-binary=:all: --python-version "$v" -d .whl pytest
      rc=$?; ls -la .whl; exit $rc ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "device_check.sh: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
  shift
done
STEPS="${ONLY:-$ALL_STEPS}"
for s in $STEPS; do
  case " $ALL_STEPS " in *" $s "*) ;; *) echo "device_check.sh: unknown step '$s' (steps: $ALL_STEPS)" >&2; exit 64 ;; esac
done

WORK="$(mktemp -d /tmp/device_check.XXXXXX)"
STEP_LOG="$WORK/steps.tsv"
: > "$STEP_LOG"
T0=$SECONDS

# run_step NAME MIN_S LIMIT_S COMMAND...: runs the command under a timeout of LIMIT_S, or of what is
# left of the budget when less; skipped when fewer than MIN_S seconds are left. Records pass/fail/skip
# and the duration in $STEP_LOG.
run_step() {
  local name="$1" need="$2" limit="$3"; shift 3
  case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
  local left=$((BUDGET_S - (SECONDS - T0)))
  [ "$left" -lt "$limit" ] && limit=$left
  echo; echo "== $name (limit ${limit} s, ${left} s of the budget left)"; date -u +%T
  if [ "$DRY" = 1 ]; then echo "   would run: $*"; return 0; fi
  if [ "$left" -lt "$need" ]; then
    echo "   SKIPPED: not enough budget left (needs $need s)"
    printf '%s\tskip\t0\tnot enough budget left (%s s)\n' "$name" "$left" >> "$STEP_LOG"; return 0
  fi
  local t=$SECONDS rc
  timeout -k 10 "$limit" "$@"; rc=$?
  local detail="rc $rc"; [ "$rc" = 124 ] || [ "$rc" = 137 ] && detail="timed out after $limit s"
  if [ "$rc" = 0 ]; then printf '%s\tpass\t%s\t\n' "$name" $((SECONDS - t)) >> "$STEP_LOG"
  else echo "   FAILED: $detail"; printf '%s\tfail\t%s\t%s\n' "$name" $((SECONDS - t)) "$detail" >> "$STEP_LOG"; fi
  return 0
}

step_machine() {
  uname -a; nproc; free -g | head -2
  nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version --format=csv 2>/dev/null || echo "nvidia-smi: not available"
  "$PYTHON" -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', torch.version.cuda, '| GPUs', torch.cuda.device_count())"
  "$PYTHON" -c "import cupy; print('cupy', cupy.__version__)" 2>/dev/null || echo "cupy: not installed (its test skips)"
  "$PYTHON" -c "import horovod" 2>/dev/null && echo "horovod: installed" || echo "horovod: not installed (no Horovod figures)"
  return 0
}

# Where NCCL's wheel lives: nvidia/nccl under any site-packages, or a system install.
find_nccl() {
  "$PYTHON" - <<'PY'
import glob, os, site, sys
roots = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
for r in roots:
    for d in glob.glob(os.path.join(r, "nvidia", "nccl")):
        if os.path.exists(os.path.join(d, "include", "nccl.h")) and glob.glob(os.path.join(d, "lib", "libnccl.so*")):
            print(d); sys.exit(0)
for d in ("/usr/local/nccl", "/usr/local/cuda", "/usr"):
    if os.path.exists(os.path.join(d, "include", "nccl.h")):
        print(d); sys.exit(0)
PY
}

have_mod() { "$PYTHON" -c "import $1" 2>/dev/null; }

# cmake from its wheel: the console script goes to the interpreter's scripts folder (or ~/.local/bin),
# the binary itself lives in the package (cmake.CMAKE_BIN_DIR). Asked from / so that the repository's
# cmake/ folder does not pass for the package.
cmake_on_path() {
  command -v cmake >/dev/null && return 0
  local d
  d="$(cd / && "$PYTHON" -c "import sysconfig; print(sysconfig.get_path('scripts'))" 2>/dev/null)"
  [ -n "$d" ] && export PATH="$PATH:$d"
  d="$(cd / && "$PYTHON" -c "import cmake; print(cmake.CMAKE_BIN_DIR)" 2>/dev/null)"
  [ -n "$d" ] && export PATH="$PATH:$d"
  command -v cmake >/dev/null
}

step_deps() {
  local missing="" pkg mod
  have_mod torch || missing="$missing torch(preinstalled-with-CUDA-expected)"
  for pkg in pybind11 pytest numpy; do
    if ! have_mod "$pkg"; then
      if [ -d .whl ] && "$PYTHON" -m pip install -q --no-index --find-links .whl "$pkg"; then echo "installed $pkg from .whl/"
      else missing="$missing $pkg"; fi
    fi
  done
  if ! cmake_on_path; then
    [ -d .whl ] && "$PYTHON" -m pip install -q --no-index --find-links .whl cmake && echo "installed cmake from .whl/"
    cmake_on_path || missing="$missing cmake"
  fi
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || missing="$missing nvcc"
  [ -n "$(find_nccl)" ] || missing="$missing NCCL(nccl.h+libnccl.so)"
  echo "cmake: $(cmake --version 2>/dev/null | head -1)"; echo "nvcc: $(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  echo "NCCL: $(find_nccl)"; "$PYTHON" -c "import pybind11; print('pybind11', pybind11.__version__)" 2>/dev/null
  if [ -n "$missing" ]; then
    echo "MISSING:$missing -- no network here: carry wheels in .whl/ (bash benchmarks/device_check.sh --fetch-wheels on a machine with network)"
    return 1
  fi
}

# pip's console scripts (cmake from its wheel) may land in ~/.local/bin.
export PATH="$PATH:$HOME/.local/bin:/usr/local/cuda/bin"

step_build() {
  local arch nccl
  arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')"
  nccl="$(find_nccl)"
  cmake_on_path || { echo "cmake not found"; return 1; }
  echo "CUDA architecture ${arch:-90}, NCCL_ROOT=$nccl, -j $JOBS"
  NCCL_ROOT="$nccl" cmake -S . -B "$BUILD_DIR" -DPython_EXECUTABLE="$(command -v "$PYTHON")" -DCMAKE_BUILD_TYPE=Release \
      -DPYHOROVOD_WITH_NCCL=ON -DCMAKE_CUDA_ARCHITECTURES="${arch:-90}" -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$ROOT/$BUILD_DIR/lib" \
    && cmake --build "$BUILD_DIR" -j "$JOBS" --target _core gpu_path_test staged_backend_test gpu_router_test || return 1
  local so; so=$(ls "$BUILD_DIR"/lib/_core*.so) || return 1
  cp "$so" pyhorovod/.core.tmp.so && mv pyhorovod/.core.tmp.so "pyhorovod/$(basename "$so")"
  "$PYTHON" -m pyhorovod.runner.cli run --check-build
  "$PYTHON" -c "import pyhorovod, sys; sys.exit(0 if pyhorovod.build_info()['nccl'] else 1)" || { echo "built without NCCL"; return 1; }
}

# C++ tests of the shared-GPU logic that need no GPU: the path decision with fake device ids, the staged
# backend and the router against a fake CUDA runtime (built by the build step, or by `make build`).
step_unit() {
  local t bin
  for t in gpu_path_test staged_backend_test gpu_router_test; do
    bin=$(ls "$BUILD_DIR/$t" "build/cmake/$t" 2>/dev/null | head -1)
    [ -n "$bin" ] || { echo "$t is not built"; return 1; }
    "$bin" | tail -1; [ "${PIPESTATUS[0]}" = 0 ] || return 1
  done
}

# Without a visible GPU or without the GPU backend the GPU tests would all skip, and pass: a failure here.
require_gpu() {
  "$PYTHON" -c "
import sys, torch, pyhorovod
why = [w for w, bad in (('torch sees no CUDA device', not torch.cuda.is_available()),
                        ('pyhorovod was built without the GPU backend', not pyhorovod.build_info()['nccl'])) if bad]
sys.exit('cannot check the GPU path: ' + '; '.join(why) if why else 0)"
}
# -v: each test's outcome is printed as it ends, so a step killed at its limit still shows how far it got;
# --maxfail: a broken path fails a few tests, not the whole budget.
step_gpu_tests() { require_gpu && "$PYTHON" -m pytest -v -rs --maxfail=3 --durations=5 tests/test_gpu.py; }
step_shared_tests() { require_gpu && "$PYTHON" -m pytest -v -rs --maxfail=3 --durations=5 tests/test_gpu_shared.py; }

step_gpu_overhead() {
  require_gpu || return 1
  if [ "$QUICK" = 1 ]; then
    "$PYTHON" benchmarks/gpu_overhead.py --width 512 --layers 2 --rounds 3 --steps 5 --fusion-mib 16 --json "$WORK/gpu_overhead.json"
  else
    "$PYTHON" benchmarks/gpu_overhead.py --rounds 7 --json "$WORK/gpu_overhead.json"
  fi
}

# NCCL at one rank, then 2 and 4 ranks sharing the first GPU (the host-staged path).
step_busbw() {
  local mib=256 rc=0; [ "$QUICK" = 1 ] && mib=4
  require_gpu || return 1
  local first="${CUDA_VISIBLE_DEVICES:-0}"; first="${first%%,*}"
  timeout 60 "$PYTHON" -m pyhorovod.run -np 1 "$PYTHON" benchmarks/gpu_busbw.py --max-mib $mib --iters 10 \
    --json "$WORK/busbw_nccl_np1.json" || rc=1
  for np in 2 4; do
    CUDA_VISIBLE_DEVICES="$first" timeout 90 "$PYTHON" -m pyhorovod.run -np $np "$PYTHON" benchmarks/gpu_busbw.py \
      --max-mib $mib --iters 10 --json "$WORK/busbw_staged_np$np.json" || rc=1
  done
  return $rc
}

# The 4.2M MLP of shared/anchors.md, one thread per rank, interleaved rounds (synthetic.py).
step_cpu_scaling() {
  local args="--np 2,4 --rounds 2 --steps 30 --warmup 5"
  [ "$QUICK" = 1 ] && args="--np 2 --rounds 1 --steps 4 --warmup 1 --windows 2 --hidden 256 --input 256 --classes 100"
  CUDA_VISIBLE_DEVICES="" "$PYTHON" benchmarks/synthetic.py $args --candidates single,independent,pyhvd,ddp \
    --timeout 150 --json "$WORK/synthetic.json"
}

# Inside one launch of 4 ranks, step by step: no communication, DistributedOptimizer, allreduce after
# backward (step_cost.py): where the time goes, paired against the no-communication step.
step_cpu_step_cost() {
  local args="--np 4 --steps 150 --warmup 10"
  [ "$QUICK" = 1 ] && args="--np 2 --steps 10 --warmup 2 --hidden 256 --input 256 --classes 100"
  CUDA_VISIBLE_DEVICES="" "$PYTHON" benchmarks/step_cost.py $args --timeout 100 --json "$WORK/step_cost.json"
}

echo "device_check.sh: steps [$STEPS], budget $BUDGET_S s, work dir $WORK${OUT:+, summary to \$OUT=$OUT}"
[ "$DRY" = 1 ] && { echo "-- dry run: dependency check only"; step_deps; echo "deps rc $?"; }
export -f find_nccl have_mod cmake_on_path require_gpu step_machine step_deps step_build step_unit step_gpu_tests step_shared_tests \
  step_gpu_overhead step_busbw step_cpu_scaling step_cpu_step_cost
export PYTHON JOBS BUILD_DIR ROOT WORK QUICK
#        name         min  limit (seconds; expected on the H200 host: 5, 5, 60-90, 1, 40, 100, 40, 30, 100, 25)
run_step machine      10   30  bash -c step_machine
run_step deps         10   60  bash -c step_deps
[ "$NO_BUILD" = 1 ] || run_step build 120 "${BUILD_LIMIT_S:-240}" bash -c step_build
run_step unit         5    30  bash -c step_unit
run_step gpu_tests    60   150 bash -c step_gpu_tests
run_step shared_tests 90   220 bash -c step_shared_tests
run_step gpu_overhead 40   90  bash -c step_gpu_overhead
run_step busbw        40   120 bash -c step_busbw
run_step cpu_scaling  80   180 bash -c step_cpu_scaling
run_step cpu_step_cost 30  60  bash -c step_cpu_step_cost
[ "$DRY" = 1 ] && exit 0

echo; echo "== summary ($((SECONDS - T0)) s)"
SUMMARY_JSON=""
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && cp "$WORK"/*.json "$OUT"/ 2>/dev/null; SUMMARY_JSON="$OUT/device_check.json"; fi
"$PYTHON" benchmarks/device_summary.py --steps "$STEP_LOG" --dir "$WORK" ${SUMMARY_JSON:+--json "$SUMMARY_JSON"}
status=$?
echo "device_check.sh: exit $status after $((SECONDS - T0)) s"; date -u
exit $status
