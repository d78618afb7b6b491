"""Hard time limits for single-process tests: SIGALRM fails a test that runs past its budget.

    from time_budget import budget, hard_timeout   # noqa: F401 -- the autouse fixture applies once imported

    @budget(90)            # this test's limit in seconds; others get the module's DEFAULT_BUDGET_S, else 30
    def test_slow(): ...
"""
import contextlib
import signal

import pytest


def budget(seconds):
    """Gives one test its own hard time limit."""
    def mark(fn):
        fn.budget_s = seconds
        return fn
    return mark


@contextlib.contextmanager
def alarm_after(seconds, what):
    """TimeoutError in this (main) thread when the block runs past `seconds`."""
    def expire(signum, frame):
        raise TimeoutError(f"{what} exceeded its {seconds} s budget")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(autouse=True)
def hard_timeout(request):
    """No test may hang."""
    seconds = getattr(request.function, "budget_s", getattr(request.module, "DEFAULT_BUDGET_S", 30))
    with alarm_after(seconds, request.node.name):
        yield
