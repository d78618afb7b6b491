#!/usr/bin/env bash
# The style check: the C++ under csrc/ must be as clang-format (.clang-format) writes it, and the Python
# must pass ruff's lint (pyproject.toml). Exit status 1 when either fails; both always run, so one run
# shows everything. Usage: tools/check_style.sh (from anywhere in the checkout).
set -u
cd "$(dirname "$0")/.."
status=0

echo "== clang-format --dry-run -Werror (csrc/)"
if ! command -v clang-format >/dev/null 2>&1; then
  echo "clang-format is not installed" >&2
  status=1
else
  git ls-files -z 'csrc/*.h' 'csrc/*.cc' 'csrc/*.cu' | xargs -0 clang-format --dry-run -Werror || status=1
fi

echo "== ruff check"
if ! command -v ruff >/dev/null 2>&1; then
  echo "ruff is not installed" >&2
  status=1
else
  ruff check pyhorovod tests benchmarks examples || status=1
fi

exit $status
