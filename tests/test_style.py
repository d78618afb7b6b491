"""The style check runs with the tests: C++ under csrc/ as clang-format writes it (.clang-format), Python
passing ruff's lint and layout rules (pyproject.toml). .ci/run installs both tools; where one is missing
the test is skipped, saying which."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("tool", ["clang-format", "ruff"])
def test_the_tree_passes_the_style_check(tool):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (pip install clang-format ruff)")
    if not os.path.exists(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout (an unpacked sdist): the check lists the tracked files")
    if tool == "clang-format":
        files = subprocess.run(["git", "ls-files", "csrc/*.h", "csrc/*.cc", "csrc/*.cu"], cwd=ROOT, text=True,
                               capture_output=True, check=True).stdout.split()
        assert files, "no C++ files found"
        cmd = ["clang-format", "--dry-run", "-Werror", *files]
    else:
        cmd = ["ruff", "check", "pyhorovod", "tests", "benchmarks", "examples"]
    done = subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(cmd[:3])} ... failed:\n{done.stdout[-6000:]}{done.stderr[-6000:]}"
