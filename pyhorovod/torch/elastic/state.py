"""TorchState: an elastic state holding a model and an optimizer, besides plain attributes.

Every save (commit) keeps deep in-memory copies of model.state_dict() and optimizer.state_dict()
(nothing goes to disk), written into the previous save's tensors where shapes and dtypes match (a copy
without allocating, several times faster than a fresh deep copy of a large model); restore() loads them
back into the same objects; sync() broadcasts rank 0's parameters and buffers (broadcast_parameters) and
optimizer state (broadcast_optimizer_state, which also carries DistributedOptimizer's warmup step count),
then saves. The other keywords are attributes as in ObjectState (ElasticSampler ones included), sent with
pyhorovod.torch.broadcast_object.
"""
import copy
from typing import Optional

import torch

from pyhorovod.elastic.state import ObjectState
from pyhorovod.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters


class TorchState(ObjectState):
    """Model, optimizer and attributes of an elastic PyTorch job.

    Args:
        model: a ``torch.nn.Module`` (or None).
        optimizer: a ``torch.optim.Optimizer``, usually the DistributedOptimizer (or None).
        **kwargs: further attributes (epoch, batch, samplers, ...), as :class:`ObjectState`.

    ``state.model`` and ``state.optimizer`` may be replaced later; the next save copies the new ones.
    """

    def __init__(self, model: Optional[torch.nn.Module] = None,
                 optimizer: Optional[torch.optim.Optimizer] = None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._saved_model = self._saved_optimizer = None
        super().__init__(bcast_object=broadcast_object, **kwargs)
        self._save_torch()

    def _save_torch(self) -> None:
        model = None if self.model is None else _copy_into(self._saved_model, self.model.state_dict())
        optimizer = None if self.optimizer is None else _copy_into(self._saved_optimizer, self.optimizer.state_dict())
        self._saved_model, self._saved_optimizer = model, optimizer

    def save(self) -> None:
        """Gathers the samplers' progress (collective), then copies model, optimizer and attributes."""
        self._gather_samplers()
        self._save_torch()
        self._saved = self._snapshot()

    def restore(self) -> None:
        """Loads the last saved model and optimizer state back, and the attributes."""
        if self.model is not None and self._saved_model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None and self._saved_optimizer is not None:
            # load_state_dict keeps references to the tensors it is given: hand it a copy, so that a
            # second restore from the same save still finds the saved values.
            self.optimizer.load_state_dict(copy.deepcopy(self._saved_optimizer))
        super().restore()

    def sync(self) -> None:
        """Every rank takes rank 0's model, optimizer state and attributes, then saves them."""
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        super().sync()
        self._save_torch()


def _copy_into(old, new):
    """A deep copy of `new` (nested dicts, lists and tuples of tensors and plain values) that reuses the
    tensors of `old`, a previous copy, where they fit. The copy shares no storage with `new`."""
    if torch.is_tensor(new):
        if (torch.is_tensor(old) and old.shape == new.shape and old.dtype == new.dtype
                and old.device == new.device):
            return old.copy_(new)
        return new.detach().clone()
    if isinstance(new, dict):
        old = old if isinstance(old, dict) else {}
        return type(new)((k, _copy_into(old.get(k), v)) for k, v in new.items())
    if isinstance(new, (list, tuple)) and type(new) in (list, tuple):
        old = old if isinstance(old, (list, tuple)) and len(old) == len(new) else [None] * len(new)
        return type(new)(_copy_into(o, v) for o, v in zip(old, new))
    return copy.deepcopy(new)
