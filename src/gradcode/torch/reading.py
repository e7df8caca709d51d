"""A ``DataLoader``'s ``num_workers`` honoured by every gradcode worker: the items of each batch
of a map-style ``Dataset`` read in parallel processes (heavy augmentation, decoding files).

A gradcode worker cannot hand a sampler to a DataLoader and take the batches it yields: it must
compute on exactly the samples the code assigns it, job by job, in the order
:meth:`~gradcode.torch.problem.TorchSpec.batch_rows` draws them, as every other worker holding the
partition does. So each worker keeps a DataLoader of its own over the ``Dataset`` whose batches
are the chunks of the batch in hand (:class:`ParallelReader`): the loader's processes read one
contiguous chunk each, item ``i`` by the function the worker's own process reads it with, under
the same seed (:func:`~gradcode.torch.problem.read_item`), the loader hands the chunks back in
order, and the batch is collated in the worker from the items, as with ``num_workers=0``. The samples, their
order, their random transforms (drawn from torch's generator) and the collated batch are
therefore bit for bit those of ``num_workers=0``; only where ``__getitem__`` runs changes. The
processes live as long as the worker (as ``persistent_workers=True`` keeps them), so a batch
costs no process start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from torch.utils.data import DataLoader, Dataset, Sampler

__all__ = ["LoaderOptions", "ParallelReader"]


@dataclass(frozen=True)
class LoaderOptions:
    """The options of a user's ``DataLoader`` that each gradcode worker honours when it reads a
    ``Dataset`` (picklable: they travel in the :class:`~gradcode.torch.problem.TorchSpec`).

    ``num_workers``: processes reading each batch's items (0: the worker's own process);
    ``timeout``, ``worker_init_fn`` and ``multiprocessing_context`` (held by its start method's
    name: a context object does not travel to Ray workers) are those processes', as in the
    DataLoader; ``pin_memory``: each batch is pinned before its copy to a CUDA device."""

    num_workers: int = 0
    pin_memory: bool = False
    timeout: float = 0.0
    worker_init_fn: Callable | None = None
    multiprocessing_context: str | None = None

    @classmethod
    def of(cls, loader: DataLoader) -> LoaderOptions | None:
        """``loader``'s options, or None when all are the defaults (nothing to honour)."""
        context = loader.multiprocessing_context
        options = cls(num_workers=int(loader.num_workers), pin_memory=bool(loader.pin_memory),
                      timeout=float(loader.timeout), worker_init_fn=loader.worker_init_fn,
                      multiprocessing_context=None if context is None else context.get_start_method())
        return None if options == cls() else options


class _Items(Dataset):
    """``samples``' items keyed ``(i, epoch)``, each read by ``read(samples, i, seed, epoch)``, the
    function the worker's own process reads them with."""

    def __init__(self, read: Callable, samples, seed: int):
        self.read, self.samples, self.seed = read, samples, int(seed)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key):
        i, epoch = key
        return self.read(self.samples, i, self.seed, epoch)


class _Chunks(Sampler):
    """The loader's batch sampler: the chunks of the batch being read, set before each pass over
    the loader (as a ``DistributedSampler``'s ``set_epoch`` is set before each epoch)."""

    def __init__(self):
        self.chunks: list[list] = []

    def __iter__(self):
        return iter(self.chunks)

    def __len__(self) -> int:
        return len(self.chunks)


def _items_as_read(items: list) -> list:
    """The loader's ``collate_fn``: the chunk's items as they are; the worker collates the batch
    whole, so a ``collate_fn`` of one's own sees the batch it sees with ``num_workers=0``."""
    return items


class ParallelReader:
    """One gradcode worker's DataLoader processes over ``samples`` (module docstring): :meth:`items`
    reads a batch's items with ``read(samples, i, seed, epoch)``
    (:func:`~gradcode.torch.problem.read_item`, given by the caller so that this module needs
    nothing of :mod:`gradcode.torch.problem`), the items :func:`~gradcode.torch.problem.fetch`
    reads in process. The processes start at the first batch and end with the reader (the
    DataLoader's own clean-up)."""

    def __init__(self, read: Callable, samples, seed: int, options: LoaderOptions):
        self.workers = int(options.num_workers)
        self._chunks = _Chunks()
        self.loader = DataLoader(_Items(read, samples, seed), batch_sampler=self._chunks, num_workers=self.workers,
                                 collate_fn=_items_as_read, persistent_workers=True, timeout=options.timeout,
                                 worker_init_fn=options.worker_init_fn,
                                 multiprocessing_context=options.multiprocessing_context)

    def items(self, index: np.ndarray, epoch: int | None) -> list:
        """The items ``index`` of the data set, in that order, read by up to ``num_workers``
        processes at once: one contiguous chunk each."""
        keys = [(i, epoch) for i in np.asarray(index, dtype=np.int64).tolist()]
        parts = min(self.workers, len(keys))
        bounds = np.linspace(0, len(keys), parts + 1).round().astype(int).tolist() if parts else [0]
        self._chunks.chunks = [keys[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        return [item for chunk in self.loader for item in chunk]
