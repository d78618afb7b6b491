"""Elastic training without a framework (numpy users); pyhorovod.torch.elastic adds the torch states.

    import pyhorovod as hvd

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, 10):
            ...                       # collectives of one epoch
            state.commit()

    hvd.init()
    train(hvd.elastic.ObjectState(epoch=0))

Names and semantics of horovod.torch.elastic: run, State, ObjectState, ElasticSampler, and the exceptions
HorovodInternalError / HostsUpdatedInterrupt. The names load on first use: pyhorovod.basics imports this
package (for _membership) before the rest of pyhorovod exists.
"""
import importlib

_EXPORTS = {
    "run": "pyhorovod.elastic.reset",
    "State": "pyhorovod.elastic.state",
    "ObjectState": "pyhorovod.elastic.state",
    "ElasticSampler": "pyhorovod.elastic.sampler",
    "HorovodInternalError": "pyhorovod.errors",
    "HostsUpdatedInterrupt": "pyhorovod.errors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pyhorovod.elastic' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
