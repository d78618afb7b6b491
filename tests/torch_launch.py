"""One launch per world size for the pyhorovod.torch tests (test_torch_ops.py, test_torch_functions.py,
test_torch_optimizer.py): each rank imports torch once and runs the three files' `body_all` one after
another (each does its own init() and shutdown()), instead of three launches that each pay for the
interpreters, the torch import and the rendezvous. Each file's module-scoped `launched` fixture gets its
own part of the result, in the shape its tests have always read: (size, [RankResult with that part as
value]). A rank's stdout/stderr is shared by the parts (a test reading stderr must allow for that)."""
import dataclasses
import importlib

from launch_cache import launch_once
from mp import run_ranks

PARTS = {  # part -> (test module, world sizes)
    "ops": ("test_torch_ops", [1, 2, 3, 4]),
    "functions": ("test_torch_functions", [1, 2, 3]),
    "optimizer": ("test_torch_optimizer", [1, 2, 3]),
}


def body(parts):
    return {part: importlib.import_module(PARTS[part][0]).body_all() for part in parts}


def launched(size, part):
    assert size in PARTS[part][1], (size, part)
    parts = [p for p, (_, sizes) in PARTS.items() if size in sizes]
    results = launch_once(("torch", size), lambda: run_ranks(body, size, args=(parts,), timeout=600,
                                                             collective_timeout=180))
    return size, [dataclasses.replace(res, value=res.value[part]) for res in results]
