"""The rank side of `pyhorovod.run(func, ...)` (pyhorovod/runner/function.py): fetch the function,
join the job, call it, hand back its result or its traceback. Run as `python -m pyhorovod.runner.task`."""
import os
import sys
import traceback

from .function import FUNC_KEY, RESULT_KEY, SECRET_ENV, STORE_ENV, pickler

FETCH_TIMEOUT_S = 60.0


def main() -> int:
    from pyhorovod import _core

    import pyhorovod
    host, port = os.environ[STORE_ENV].rsplit(":", 1)
    secret = os.environ.pop(SECRET_ENV).encode()   # not inherited by what func starts
    store = _core.TcpStore(host, int(port), secret, FETCH_TIMEOUT_S)
    func, args, kwargs = pickler().loads(store.get(FUNC_KEY, FETCH_TIMEOUT_S))
    from pyhorovod.elastic._membership import WorkerStopped
    pyhorovod.init()
    try:
        value = func(*args, **kwargs)
    except WorkerStopped:
        raise   # an elastic worker the driver let go: it has no result
    except BaseException:
        store.set(RESULT_KEY.format(rank=pyhorovod.rank()), pickler().dumps(("error", traceback.format_exc())))
        raise
    # The rank at the end: in an elastic job it may differ from the first one.
    store.set(RESULT_KEY.format(rank=pyhorovod.rank()), pickler().dumps(("ok", value)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
