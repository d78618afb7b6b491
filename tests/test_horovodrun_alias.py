"""The opt-in `horovodrun` command: written on request, runs our launcher, never replaces another
package's horovodrun without --force, and --remove deletes only our own."""
import os
import subprocess
import sys

from mp import ROOT, clean_env


def alias(*args):
    return subprocess.run([sys.executable, "-m", "pyhorovod.runner.cli", "horovodrun-alias", *args],
                          capture_output=True, text=True, cwd=ROOT, env=clean_env({}), timeout=60)


def test_alias_runs_the_launcher_and_is_removed(tmp_path):
    made = alias("--bin-dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    script = tmp_path / "horovodrun"
    assert os.access(script, os.X_OK)
    out = subprocess.run([str(script), "-np", "2", sys.executable, "-c",
                          "import pyhorovod as hvd, numpy as np; hvd.init(); "
                          "print('sum', hvd.allreduce(np.ones(1), op=hvd.Sum)[0])"],
                         capture_output=True, text=True, cwd=ROOT, env=clean_env({}), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("sum 2.0") == 2, out.stdout
    gone = alias("--bin-dir", str(tmp_path), "--remove")
    assert gone.returncode == 0 and not script.exists(), gone.stderr


def test_a_foreign_horovodrun_is_left_alone_unless_forced(tmp_path):
    foreign = tmp_path / "horovodrun"
    foreign.write_text("#!/usr/bin/env python\nfrom horovod.runner.launch import run_commandline\n")
    for args in ((), ("--remove",)):
        refused = alias("--bin-dir", str(tmp_path), *args)
        assert refused.returncode == 1 and "not pyhorovod's" in refused.stderr, refused
        assert "horovod.runner" in foreign.read_text()
    forced = alias("--bin-dir", str(tmp_path), "--force")
    assert forced.returncode == 0 and "pyhorovod.run" in foreign.read_text(), forced.stderr
