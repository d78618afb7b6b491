"""ElasticSampler: a data sampler whose epoch survives a change of the number of ranks.

Terms. The epoch's *order* is a permutation of range(len(dataset)) (seeded by seed + epoch when shuffle,
else the identity), the same on every rank. *Committed* indices are the samples of this epoch that the
job has finished as of the last commit, known alike to every rank. *Pending* indices are the ones this
rank recorded (record_batch / record_indices) since then. The *partition* is what this rank iterates:
the order without the committed indices, padded by repeating its first samples up to a multiple of the
number of ranks, then every size-th sample starting at the rank (as torch's DistributedSampler), so that
every rank has the same number of batches.

A commit (the elastic state's save()) gathers every rank's pending indices into the committed set; a
restore() goes back to the last commit, dropping pending indices (a rank that died took its uncommitted
batches with it, and the survivors redo theirs after their model went back too). The partition is
recomputed only at a reset, a restore, set_epoch and load_state_dict -- never at a commit, so an
iteration in progress is not disturbed. So every sample of an epoch is committed once, apart from the
at most size - 1 padding repeats of each partition.

The sampler is an iterable with __len__, which is what torch's DataLoader asks of a sampler, so it needs
no torch; pyhorovod.torch.elastic exports it too.
"""
import random
from typing import Iterator, List, Sequence

from pyhorovod import basics


class ElasticSampler:
    """Samples the not yet committed part of the epoch, split over the ranks of the current generation.

    Args:
        dataset: anything with ``len()``; the sampler yields indices into it.
        shuffle: a new order every epoch (seeded by ``seed + epoch``, the same on every rank).
        seed: the shuffle's seed.

    ``set_epoch(e)`` for the epoch's loop; with the epoch already current (``train`` called again after a
    reset) it keeps the epoch's committed progress. ``record_batch(batch_idx, batch_size)`` after each
    batch of this rank, ``state.commit()`` at the usual points.
    """

    def __init__(self, dataset, shuffle: bool = True, seed: int = 0):
        self.dataset = dataset
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0
        self.committed = set()
        self.pending = set()
        self.rank, self.num_replicas = 0, 1
        self.indices: List[int] = []
        self.reset()

    # ------------------------------------------------------------ the epoch and the partition

    def set_epoch(self, epoch: int) -> None:
        """Starts `epoch` with nothing processed, unless it is the current epoch (then nothing changes
        but the partition, recomputed for the current ranks)."""
        if epoch != self.epoch:
            self.epoch = int(epoch)
            self.committed, self.pending = set(), set()
        self.reset()

    def reset(self) -> None:
        """Recomputes this rank's partition for the current rank and size (after a reset)."""
        if basics.is_initialized():
            self._partition(basics.rank(), basics.size())
        else:
            self._partition(0, 1)

    def _order(self) -> List[int]:
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        return order

    def _partition(self, rank: int, size: int) -> None:
        remaining = [i for i in self._order() if i not in self.committed]
        per_rank = -(-len(remaining) // size)
        padded = remaining + remaining[:per_rank * size - len(remaining)]
        self.rank, self.num_replicas = rank, size
        self.indices = padded[rank::size]

    def __iter__(self) -> Iterator[int]:
        return iter(list(self.indices))

    def __len__(self) -> int:
        return len(self.indices)

    # ------------------------------------------------------------ progress

    def get_indices(self, batch_idx: int, batch_size: int) -> List[int]:
        """The indices of this rank's batch number `batch_idx` (counted from the start of its partition)."""
        if batch_idx < 0 or batch_size <= 0:
            raise ValueError(f"get_indices(batch_idx={batch_idx!r}, batch_size={batch_size!r}): expected "
                             f"batch_idx >= 0 and batch_size > 0")
        start = batch_idx * batch_size
        return self.indices[start:start + batch_size]

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Marks this rank's batch `batch_idx` as processed (committed at the next commit)."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices: Sequence[int]) -> None:
        """Marks dataset indices as processed by this rank (committed at the next commit)."""
        self.pending.update(int(i) for i in indices)

    def _commit(self, gathered: Sequence[int]) -> None:
        """Adds every rank's pending indices (gathered at a commit) to the committed set."""
        self.committed.update(gathered)
        self.pending = set()

    # ------------------------------------------------------------ state

    def state_dict(self) -> dict:
        """The epoch and the indices this rank knows to be processed (committed and its own pending)."""
        return {"epoch": self.epoch, "processed_indices": sorted(self.committed | self.pending)}

    def load_state_dict(self, state_dict: dict) -> None:
        """Takes the epoch and processed indices as committed, and recomputes the partition."""
        self.epoch = int(state_dict["epoch"])
        self.committed = set(int(i) for i in state_dict["processed_indices"])
        self.pending = set()
        self.reset()
