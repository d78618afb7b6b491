"""One launch of the ranks serves several tests.

Starting ranks is the slow part of a multi-process test (a fresh interpreter per rank, imports, the
rendezvous), so a test file runs all its rank bodies for one world size (and configuration) in a single
launch: the rank side runs named *sections* one after another (run_sections), each recording its value or
its traceback, and the test side launches once per key (launch_once) and lets each test check its own
section (section). A section that fails is reported by its own test; the ones after it still run.
"""
import time
import traceback
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple

_launches: Dict[Hashable, Tuple[bool, Any]] = {}


def launch_once(key: Hashable, launch: Callable[[], Any]) -> Any:
    """launch() the first time a key is asked for; afterwards its result again, or its exception again
    (a launch that failed as a whole, say a rank crashed, fails every test that needs it, with the same
    message, without being retried)."""
    if key not in _launches:
        try:
            _launches[key] = (True, launch())
        except Exception as e:  # noqa: BLE001 -- re-raised below and for every later test of this key
            _launches[key] = (False, e)
    ok, value = _launches[key]
    if not ok:
        raise value
    return value


def run_sections(sections: Sequence[Tuple[str, Callable[[], Any]]],
                 after_failure: Optional[Callable[[], None]] = None) -> Dict[str, Dict[str, Any]]:
    """Rank side: runs each (name, fn) in order; {name: {"value": fn(), "error": None, "seconds": t}} or,
    when fn raised, {"value": None, "error": its traceback, "seconds": t} (t: how long the section took,
    for finding the slow ones). after_failure() runs after a section that raised, so that the next one
    starts clean (say, pyhorovod.shutdown() of an engine the failed section left running)."""
    out: Dict[str, Dict[str, Any]] = {}
    for name, fn in sections:
        t0 = time.monotonic()
        try:
            out[name] = {"value": fn(), "error": None}
        except Exception:  # noqa: BLE001 -- reported by the test that checks this section
            out[name] = {"value": None, "error": traceback.format_exc()}
            if after_failure is not None:
                try:
                    after_failure()
                except Exception:  # noqa: BLE001 -- the section's own error is the one to report
                    out[name]["error"] += "\n(and then, cleaning up:)\n" + traceback.format_exc()
        out[name]["seconds"] = round(time.monotonic() - t0, 3)
    return out


def shutdown_pyhorovod() -> None:
    """An after_failure for sections that init() and shutdown() pyhorovod themselves."""
    import pyhorovod
    pyhorovod.shutdown()


def section(results: List[Any], name: str) -> List[Any]:
    """Test side: every rank's value of one section, in rank order; fails with each failing rank's
    traceback if the section raised anywhere (or did not run)."""
    errors = []
    for res in results:
        got = (res.value or {}).get(name)
        if got is None:
            errors.append(f"----- rank {res.rank}: section {name!r} did not run\n{res.stderr[-3000:]}")
        elif got["error"] is not None:
            errors.append(f"----- rank {res.rank}:\n{got['error']}")
    assert not errors, f"section {name!r} failed:\n" + "\n".join(errors)
    return [res.value[name]["value"] for res in results]
