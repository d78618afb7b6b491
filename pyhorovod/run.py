"""Runs a function on every rank of a new job and returns their results (Horovod's ``horovod.run``).

``pyhorovod.run(func, args=(), kwargs=None, np=1, hosts=None, ...)`` starts ``np`` ranks (on this
host, or on ``hosts``/``hostfile`` over ssh), calls ``func(*args, **kwargs)`` on each after ``init()``
(so ``func`` need not call it), and returns the results. The function and the results travel pickled
(cloudpickle when installed, so lambdas and functions of ``__main__`` work), at most 64 MiB each. The
keywords are ``horovod.run``'s, e.g.::

    results = pyhorovod.run(train, args=(config,), np=4)            # [rank 0's result, rank 1's, ...]

Args:
    func: the function to run on every rank.
    args: its positional arguments.
    kwargs: its keyword arguments.
    np: the number of ranks.
    hosts: ``"host1:2,host2:2"``, as the launcher's ``-H``; hostfile: a file of ``host slots=N`` lines.
    start_timeout: seconds for every rank to reach the rendezvous.
    min_np, max_np, slots, reset_limit: any of them makes the job elastic (``pyhorovod run --min-np ...``);
        func should then be an ``hvd.elastic.run`` function, and the result holds the last generation's ranks.
    executable: the Python that runs the ranks (default: this one).

Returns:
    The list of every rank's return value, in rank order.

Raises:
    ValueError: a func that is not callable, or an np that is not a positive int.
    RuntimeError: a rank raised; the message carries that rank's traceback.

``python -m pyhorovod.run -np 2 python train.py`` runs the launcher instead (as ``pyhorovod run``).
"""
# This module is both the launcher's entry point and the function: once imported, its class is a
# ModuleType whose call is pyhorovod/runner/function.py's run().
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
