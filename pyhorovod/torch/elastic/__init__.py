"""Elastic training for PyTorch, as horovod.torch.elastic: ``hvd.elastic`` after
``import pyhorovod.torch as hvd``.

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            state.sampler.set_epoch(state.epoch)
            for state.batch, (x, y) in enumerate(loader):
                ...
                state.sampler.record_batch(state.batch, batch_size)
                if state.batch % 10 == 0:
                    state.commit()

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    train(state)

run, State, ObjectState and ElasticSampler are the framework-free ones (pyhorovod.elastic); TorchState
adds the model and the optimizer.
"""
from pyhorovod.elastic.reset import run
from pyhorovod.elastic.sampler import ElasticSampler
from pyhorovod.elastic.state import ObjectState, State
from pyhorovod.errors import HorovodInternalError, HostsUpdatedInterrupt
from pyhorovod.torch.elastic.state import TorchState

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler", "HorovodInternalError",
           "HostsUpdatedInterrupt"]
