"""The C++ core's layers point down only (tools/check_layers.py): the tree passes the check, and a tree
with one upward include fails it, naming the file, the line and both layers."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKER = os.path.join(ROOT, "tools", "check_layers.py")


def run_checker(*args):
    return subprocess.run([sys.executable, CHECKER, *args], capture_output=True, text=True, timeout=60)


def write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_tree_points_down_only():
    proc = run_checker()
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_upward_include_fails_naming_it(tmp_path):
    csrc = tmp_path / "csrc"
    write(csrc, "common/types.h", "#pragma once\n")
    write(csrc, "transport/transport.h", '#pragma once\n#include "common/types.h"\n')
    write(csrc, "transport/tcp.cc", '#include "transport/transport.h"\n#include <vector>\n')
    write(csrc, "engine/engine.h", '#pragma once\n#include "transport/transport.h"\n')
    # The one offence: a lower layer reaching up into the engine.
    write(csrc, "rendezvous/store.cc", '#include "common/types.h"\n\n#include "engine/engine.h"\n')
    # The tests may include anything.
    write(csrc, "tests/engine_test.cc", '#include "engine/engine.h"\n#include "tests/check.h"\n')
    proc = run_checker(str(csrc))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    offences = [line for line in proc.stdout.splitlines() if not line.startswith("check_layers:")]
    assert offences == [os.path.join("csrc", "rendezvous", "store.cc") + ":3: rendezvous includes engine "
                        "(engine/engine.h)"], proc.stdout


def test_test_headers_and_unknown_folders_are_offences(tmp_path):
    csrc = tmp_path / "csrc"
    write(csrc, "tests/check.h", "#pragma once\n")
    write(csrc, "engine/engine.cc", '#include "tests/check.h"\n')
    write(csrc, "scratch/new.cc", "int x;\n")
    proc = run_checker(str(csrc))
    assert proc.returncode == 1
    assert "engine/engine.cc:1: engine includes tests (tests/check.h)" in proc.stdout
    assert "scratch/new.cc:1: scratch is not a layer" in proc.stdout
