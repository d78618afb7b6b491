"""`pyhorovod horovodrun-alias [--remove] [--force] [--bin-dir DIR]`: the opt-in `horovodrun` command.

Horovod installs a console script called `horovodrun` too. Whichever package installs last would own it,
and uninstalling either would remove it for both, so pyhorovod does not install one: this subcommand
writes a small `horovodrun` script (next to the running Python, or into --bin-dir) that runs
`python -m pyhorovod.run`. It refuses to replace a `horovodrun` that is not its own (Horovod's, say)
unless --force is given, and --remove deletes only its own.
"""
import argparse
import os
import stat
import sys
from typing import List, Optional

MARKER = "# written by `pyhorovod horovodrun-alias`"


def script_text(python: str) -> str:
    return f"#!/bin/sh\n{MARKER}: horovodrun is pyhorovod's launcher here\nexec {python} -m pyhorovod.run \"$@\"\n"


def is_ours(path: str) -> bool:
    try:
        with open(path, errors="replace") as f:
            return MARKER in f.read(4096)
    except OSError:
        return False


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="pyhorovod horovodrun-alias", description=__doc__.split("\n\n")[1],
                                allow_abbrev=False)
    p.add_argument("--bin-dir", default=os.path.dirname(sys.executable),
                   help="folder to write horovodrun into (default: the running Python's, %(default)s)")
    p.add_argument("--remove", action="store_true", help="delete the alias (only pyhorovod's own)")
    p.add_argument("--force", action="store_true", help="replace a horovodrun that is not pyhorovod's")
    args = p.parse_args(argv)
    path = os.path.join(args.bin_dir, "horovodrun")
    exists = os.path.lexists(path)
    if args.remove:
        if not exists:
            print(f"no horovodrun at {path}")
            return 0
        if not is_ours(path):
            print(f"error: {path} is not pyhorovod's alias (Horovod's?); left as it is", file=sys.stderr)
            return 1
        os.remove(path)
        print(f"removed {path}")
        return 0
    if exists and not is_ours(path) and not args.force:
        print(f"error: {path} exists and is not pyhorovod's (Horovod's horovodrun?); left as it is. Use "
              f"`pyhorovod run`, or --force to replace it", file=sys.stderr)
        return 1
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(script_text(sys.executable))
    os.chmod(tmp, os.stat(tmp).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.replace(tmp, path)
    print(f"wrote {path}: horovodrun now runs pyhorovod's launcher (`pyhorovod horovodrun-alias --remove` undoes it)")
    return 0
