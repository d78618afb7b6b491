#!/usr/bin/env bash
# One-shot GPU check (issue 9), for a machine with an NVIDIA GPU, nvcc and Python with torch (CUDA):
# installs NCCL's wheel if missing, builds pyhorovod with PYHOROVOD_WITH_NCCL=ON (fails loudly when nvcc
# or NCCL is missing) in build-gpu, runs tests/test_gpu.py and a short busbw benchmark on 1 rank and on
# every GPU. Everything is printed; meant to finish within 10 minutes.
#   bash benchmarks/gpu_check.sh            (JOBS=<n> for the build, default nproc)
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 PYTHONUNBUFFERED=1
status=0

echo "== machine"; date -u; nvidia-smi -L || echo "nvidia-smi: not available"; command -v nvcc && nvcc --version | tail -1
"$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'GPUs', torch.cuda.device_count())"

echo "== dependencies"
for mod_pkg in "nvidia.nccl:nvidia-nccl-cu13" "pybind11:pybind11" "pytest:pytest" "numpy:numpy"; do
  mod="${mod_pkg%%:*}"; pkg="${mod_pkg#*:}"
  "$PYTHON" -c "import $mod" 2>/dev/null || { echo "installing $pkg"; "$PYTHON" -m pip install -q "$pkg"; }
done

echo "== build ($BUILD_DIR, PYHOROVOD_WITH_NCCL=ON)"
cmake -S . -B "$BUILD_DIR" -DPython_EXECUTABLE="$(command -v "$PYTHON")" -DCMAKE_BUILD_TYPE=Release \
      -DPYHOROVOD_WITH_NCCL=ON -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$PWD/$BUILD_DIR/lib" \
  && cmake --build "$BUILD_DIR" -j "$JOBS" || { echo "BUILD FAILED"; exit 1; }
so=$(ls "$BUILD_DIR"/lib/_core*.so 2>/dev/null) || { echo "BUILD FAILED"; exit 1; }
cp "$so" pyhorovod/.core.tmp.so && mv pyhorovod/.core.tmp.so "pyhorovod/$(basename "$so")"
"$PYTHON" -m pyhorovod.runner.cli run --check-build || status=1

echo "== tests/test_gpu.py"
timeout 300 "$PYTHON" -m pytest -q -rs tests/test_gpu.py || status=1

echo "== busbw"
ngpu=$("$PYTHON" -c "import torch; print(torch.cuda.device_count())")
for np in 1 $([ "$ngpu" -gt 1 ] && echo "$ngpu"); do
  timeout 150 "$PYTHON" -m pyhorovod.run -np "$np" "$PYTHON" benchmarks/gpu_busbw.py --max-mib 256 || status=1
done
echo "== gpu_check.sh done, status $status"; date -u
exit $status
