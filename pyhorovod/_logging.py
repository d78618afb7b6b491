"""How pyhorovod's Python log records become visible: one level, one format, the application in charge.

Every Python line of pyhorovod is a record of a logger under "pyhorovod": "pyhorovod" itself (init,
rendezvous), "pyhorovod.torch.lr" (the LR scaling of DistributedOptimizer(lr_scaling=...)),
"pyhorovod.scaling.noise_scale" and "pyhorovod.scaling.adascale" (rank 0's advisor lines). Importing
pyhorovod adds only a NullHandler to "pyhorovod", so an application routes or silences these records like
any library's, e.g. logging.getLogger("pyhorovod").setLevel(logging.WARNING).

For a script that configures no logging, init() attaches the stderr handler below, so warnings show as
they would without the NullHandler (Python's logging.lastResort), and two things lower the level:
  - HOROVOD_LOG_LEVEL, which also sets the C++ core's level, sets the "pyhorovod" logger's level
    (unless the application set one first) and attaches the handler already at import;
  - a report the user turned on (lr_scaling=..., measure_noise_scale=True on rank 0) calls show_reports(),
    which sets level INFO if no level was set by anyone and the application configured no logging.
The handler writes the core's format, "[pyhorovod rank N LEVEL] text", and writes nothing as soon as the
application has handlers of its own (on the root logger or on "pyhorovod"), so configuring logging after
the import does not print each line twice.

The core's lines are not forwarded into Python logging: the core logs from its engine thread, which holds
no GIL and is often inside engine locks, and on shutdown and abort paths while the interpreter may be
finalizing; taking the GIL there can deadlock against a Python thread waiting for the engine, or crash at
exit, and a stall or abort line must appear even when Python is stuck. So the core writes to stderr itself,
in the same format, under the same level.
"""
import logging
import os
import sys

from pyhorovod._knobs import LOG_LEVELS

ROOT = "pyhorovod"
TRACE = 5  # HOROVOD_LOG_LEVEL=trace: below DEBUG; not registered globally (a library leaves logging's names alone)
_PYTHON_LEVEL = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
                 "error": logging.ERROR, "fatal": logging.CRITICAL}
assert set(_PYTHON_LEVEL) == set(LOG_LEVELS)
_CORE_NAME = {TRACE: "TRACE", logging.CRITICAL: "FATAL"}  # the core's names where Python's differ


# This process's rank, as pyhorovod.basics knows it (ValueError before init()). basics sets it at import:
# the lines name the rank without this module importing the layer that uses it.
rank_source = None


class CoreFormatter(logging.Formatter):
    """"[pyhorovod rank N LEVEL] text", the core's format (csrc/common/logging.cc); no rank before init."""

    def format(self, record):
        try:
            where = f"rank {rank_source()} " if rank_source is not None else ""
        except ValueError:  # not initialized
            where = ""
        level = _CORE_NAME.get(record.levelno, record.levelname)
        return f"[pyhorovod {where}{level}] {super().format(record)}"


class StderrUntilConfigured(logging.StreamHandler):
    """Writes to the current sys.stderr while the application has configured no handler of its own."""

    def __init__(self):
        super().__init__()
        self.setFormatter(CoreFormatter())

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ sets it; the handler always follows sys.stderr
        pass

    def emit(self, record):
        if not application_configured():
            super().emit(record)


def _own(handler):
    return isinstance(handler, (logging.NullHandler, StderrUntilConfigured))


def application_configured():
    """Whether the application attached handlers: to the root logger or to "pyhorovod"."""
    return bool(logging.getLogger().handlers) or any(not _own(h) for h in logging.getLogger(ROOT).handlers)


def attach_stderr():
    """The stderr handler, once; at init() so that warnings (an insecure secret, inert variables) reach a
    script that configured no logging, as they would through logging.lastResort without the NullHandler."""
    logger = logging.getLogger(ROOT)
    if not any(isinstance(h, StderrUntilConfigured) for h in logger.handlers):
        logger.addHandler(StderrUntilConfigured())


def _show(level):
    logger = logging.getLogger(ROOT)
    if logger.level == logging.NOTSET:
        logger.setLevel(level)
    attach_stderr()


def set_up(env=os.environ):
    """At import: the NullHandler, and HOROVOD_LOG_LEVEL's level and handler when it is set. An unknown
    value is left to init(), which refuses it with a ValueError (pyhorovod/_config.py)."""
    logger = logging.getLogger(ROOT)
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    level = _PYTHON_LEVEL.get((env.get("HOROVOD_LOG_LEVEL") or "").strip().lower())
    if level is not None:
        _show(level)


def show_reports():
    """Makes INFO reports the user asked for (LR scaling, noise scale) visible when nothing else decided:
    no level on "pyhorovod" and no logging configured by the application (whose levels then apply)."""
    if not application_configured():
        _show(logging.INFO)
