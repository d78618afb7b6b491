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
    pyhorovod.init()
    key = RESULT_KEY.format(rank=pyhorovod.rank())
    try:
        value = func(*args, **kwargs)
    except BaseException:
        store.set(key, pickler().dumps(("error", traceback.format_exc())))
        raise
    store.set(key, pickler().dumps(("ok", value)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
