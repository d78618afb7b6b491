"""`horovod` as an alias of pyhorovod, for unchanged Horovod scripts (opt-in, see pyhorovod/_compat).

Importing it makes `horovod` the pyhorovod package itself and installs a meta-path finder that answers
every `horovod.X.Y` with the already imported or freshly imported `pyhorovod.X.Y` module object, so each
pyhorovod module exists once (one engine state, one class per exception) whichever name imported it.
A horovod module path pyhorovod does not have raises ModuleNotFoundError naming the horovod path.
"""
import importlib
import importlib.abc
import importlib.util
import sys

_PREFIX = "horovod."


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        pass  # the pyhorovod module ran when it was imported


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(_PREFIX):
            return None
        real = "py" + fullname
        try:
            found = importlib.util.find_spec(real)
        except ModuleNotFoundError:  # a parent of `real` does not exist
            found = None
        if found is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real),
                                               is_package=found.submodule_search_locations is not None)


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())

import pyhorovod  # noqa: E402 -- after the finder, so that pyhorovod's own imports are unaffected

sys.modules[__name__] = pyhorovod
