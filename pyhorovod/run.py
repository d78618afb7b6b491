"""``pyhorovod.run`` is two things, as in Horovod.

The launcher module: ``python -m pyhorovod.run -np 2 python train.py`` (as ``pyhorovod run`` and
``horovodrun``). And a function: ``pyhorovod.run(func, args=(), kwargs=None, np=1, ...)`` starts a job,
runs ``func(*args, **kwargs)`` on every rank after ``init()`` and returns the list of the ranks' results,
in rank order (pyhorovod/runner/function.py: the keywords of ``horovod.run``; the elastic ones are
refused with ValueError). A rank that raises makes it raise RuntimeError with that rank's traceback.
Both hold because, once imported, this module's class is a ModuleType whose call is that function.
"""
import inspect
import sys
import types

from pyhorovod.runner.function import run as _run_function


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return _run_function(*args, **kwargs)


if __name__ == "__main__":
    from pyhorovod.runner.cli import run_command

    sys.exit(run_command(sys.argv[1:], prog="python -m pyhorovod.run"))
else:
    __signature__ = inspect.signature(_run_function)
    sys.modules[__name__].__class__ = _CallableModule
