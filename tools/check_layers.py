#!/usr/bin/env python3
"""Checks that the C++ core's layers point down only: no file under csrc/ includes a header of a layer
above its own.

The layers, lowest first, are the folders of csrc/:

    common -> rendezvous -> transport -> algorithms -> backends -> engine -> bindings

A file may include headers of its own layer and of every layer below it. csrc/tests may include anything,
and nothing outside it may include a test header. A file in a folder that is not a layer is reported too,
so that a new folder has to be given its place here before it can hold code.

Where the shared plumbing lives: the rendezvous store and the transport both open sockets and both run
the connection handshake, so those two (rendezvous/socket.h, rendezvous/handshake.h) sit in the lowest
layer that uses them, rendezvous, and not in common. The store is the first of the two to connect (ranks
meet there before any mesh exists), and common stays what every layer may take without thinking: values,
reductions, logging and interrupts, with no networking in it.

Usage: tools/check_layers.py [CSRC_DIR]   (default: the csrc/ next to this script's folder)
Exit status 0 when every include points down, 1 (after printing each offence as
"file:line: <layer> includes <layer> (<header>)") otherwise.
"""
import os
import re
import sys

LAYERS = ("common", "rendezvous", "transport", "algorithms", "backends", "engine", "bindings")
# May include every layer; no layer may include it.
TESTS = "tests"
SOURCE_SUFFIXES = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def rank_of(folder):
    """The height of a top-level folder of csrc/: its index in LAYERS, above them all for the tests, None
    for a folder that is no layer."""
    if folder == TESTS:
        return len(LAYERS)
    return LAYERS.index(folder) if folder in LAYERS else None


def included_folder(header, including_folder, known_folders):
    """The top-level folder an include names: "transport/socket.h" -> "transport". A bare "x.h" is the
    including file's neighbour. Anything else (a system or third-party header written with quotes, such
    as the fake CUDA runtime of the tests) belongs to no layer and is not checked."""
    parts = header.split("/")
    if len(parts) == 1:
        return including_folder
    return parts[0] if parts[0] in known_folders else None


def offences(csrc_dir):
    """Every include that points up, and every file outside the layers, as (path, line number, message)."""
    known = set(LAYERS) | {TESTS}
    found = []
    for dirpath, dirnames, filenames in os.walk(csrc_dir):
        dirnames.sort()
        for name in sorted(filenames):
            if not name.endswith(SOURCE_SUFFIXES):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, csrc_dir).replace(os.sep, "/")
            folder = rel.split("/")[0] if "/" in rel else ""
            own = rank_of(folder)
            if own is None:
                found.append((path, 1, f"{folder or 'csrc/'} is not a layer (add it to LAYERS)"))
                continue
            with open(path, encoding="utf-8", errors="replace") as source:
                for number, line in enumerate(source, 1):
                    match = INCLUDE.match(line)
                    if not match:
                        continue
                    target = included_folder(match.group(1), folder, known)
                    if target is not None and rank_of(target) > own:
                        found.append((path, number, f"{folder} includes {target} ({match.group(1)})"))
    return found


def main(argv):
    default = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "csrc")
    csrc_dir = argv[1] if len(argv) > 1 else default
    if not os.path.isdir(csrc_dir):
        print(f"check_layers: no such folder: {csrc_dir}", file=sys.stderr)
        return 2
    found = offences(csrc_dir)
    shown_from = os.path.dirname(os.path.abspath(csrc_dir))
    for path, number, message in found:
        print(f"{os.path.relpath(path, shown_from)}:{number}: {message}")
    if found:
        print(f"check_layers: {len(found)} include(s) point up; order, lowest first: {' -> '.join(LAYERS)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
