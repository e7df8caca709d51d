"""A user's ``nn.Module`` as a gradient-coding problem: what the workers compute and what the master
steps (the machinery behind :func:`gradcode.torch.fit`).

The vector that travels. A model with parameters ``theta`` (``d_p`` numbers, ``module.parameters()``
order) and floating-point buffers ``beta`` (``d_b``: BatchNorm running statistics) is the float32
vector ``x = [theta | beta | loss | 0]`` of length ``d = d_p + d_b + 2``; the loss slot holds the
batch loss of the step that produced ``x`` (what :meth:`TorchMaster.objective` reports; workers
ignore both slots). Worker ``w``'s partial for partition ``j`` of job ``t`` is, over the ``b_j``
samples :meth:`TorchSpec.batch_rows` picks for ``(t, j)``,

    g_j = [ grad_theta sum_i l_i  |  b_j (beta_j' - beta)  |  sum_i l_i  |  b_j ]

a *sum* over samples like every partial gradient in gradcode, so the code decodes ``sum_j g_j``
exactly: the batch's summed gradient, the sample-weighted sum of the partitions' buffer updates,
the batch's summed loss and its size ``B = sum_j b_j``, all through the same code (stragglers bias
none of them). The master divides by the decoded ``B``, which stays right when a run switches to
a scheme with other partitions (:class:`~gradcode.schemes.switch.ProbeThenSwitch`).

Reductions: ``loss(output, target)`` must return a scalar. With ``loss_reduction="mean"`` (the
default, as torch's losses) it is the mean over the samples it is given and is multiplied by
``b_j``; with ``"sum"`` it is used as is. Either way the decoded gradient divided by ``B`` is the
gradient of the batch's mean loss.

Buffers (BatchNorm). Each partition's forward pass runs in train mode on its own ``b_j`` samples,
so BatchNorm normalises over each partition's samples: ghost batch normalisation (Hoffer et al.
2017), which is what data-parallel training without synchronised BatchNorm computes (DDP, each
worker over its local batch). The exact reference is therefore the sum over partitions of each
partition's gradient (``tests/test_torch.py`` computes it in one process). Running statistics: the
master applies ``beta += (1/B) sum_j b_j (beta_j' - beta)``, the sample-weighted average of the
partitions' own momentum updates, and counts ``num_batches_tracked`` once per step. Integer
buffers other than that counter are not trained.

Randomness: each partition's forward and backward run under ``torch.manual_seed`` of
``(seed, job, j)``, so every worker holding partition ``j`` draws the same dropout masks and the
copies agree exactly.
"""

from __future__ import annotations

import contextlib
import copy
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from gradcode.codes.precision import wire_dtype
from gradcode.errors import GradcodeError, UserCodeError

__all__ = ["Batch", "DeviceError", "ModelLayout", "TorchMaster", "TorchOptimizer", "TorchSpec", "TorchWorkerProblem",
           "apply_decoded", "as_samples", "check_device", "read_source"]


@dataclass(frozen=True)
class Batch:
    """The rows of partition ``j`` a worker computes on for ``job`` (local indices)."""

    rows: np.ndarray
    job: int
    partition: int
    #: the model's epoch over the partition that the rows belong to (random augmentation's draw)
    epoch: int = 0


class ModelLayout:
    """Where a module's parameters and floating buffers sit in the flat vector (module docstring)."""

    def __init__(self, module: nn.Module):
        self.params = [p for p in module.parameters()]
        self.buffers = [(name, b) for name, b in module.named_buffers() if b.is_floating_point()]
        self.counters = self.counters_of(module)
        self.d_params = int(sum(p.numel() for p in self.params))
        self.d_buffers = int(sum(b.numel() for _, b in self.buffers))
        self.dim = self.d_params + self.d_buffers + 2
        #: the CPU buffer whose views :func:`apply_decoded` last made the parameters' ``.grad``
        self.grads: torch.Tensor | None = None

    def __getstate__(self):  # a copy (a replica's, a checkpoint's) has no .grad for the buffer to back
        return {**self.__dict__, "grads": None}

    def grad_buffer(self, module: nn.Module) -> torch.Tensor | None:
        """:attr:`grads`, when every parameter's ``.grad`` of ``module`` is still its view (no
        one replaced or dropped them since): the buffer the next :func:`apply_decoded` may write."""
        flat = self.grads
        if flat is None:
            return None
        off = 0
        for p in module.parameters():
            g, k = p.grad, p.numel()
            if g is None or g.data_ptr() != flat[off:].data_ptr() or g.shape != p.shape or g._base is not flat:
                self.grads = None
                return None
            off += k
        return flat

    def flatten(self, module: nn.Module, loss: float = math.nan) -> np.ndarray:
        """``[theta | beta | loss | 0]`` as a new float32 array of its own (one copy: the runtime
        freezes it and sends it as it is)."""
        out = np.empty(self.dim, dtype=np.float32)
        out[-2:] = (loss, 0.0)
        with torch.no_grad():
            parts = [p.detach().reshape(-1) for p in module.parameters()]
            parts += [b.detach().reshape(-1) for _, b in self._buffers_of(module)]
            flat = torch.from_numpy(out[:-2])
            if parts and parts[0].device.type != "cpu":
                flat.copy_(torch.cat([t.float() for t in parts]))  # gathered on the GPU, read back in one copy
            elif parts:
                torch.cat([t.float() for t in parts], out=flat)
        return out

    @staticmethod
    def counters_of(module: nn.Module):
        """BatchNorm's batch counters (``num_batches_tracked``) of ``module``."""
        return [(name, b) for name, b in module.named_buffers() if name.endswith("num_batches_tracked")]

    @staticmethod
    def _buffers_of(module: nn.Module):
        return [(name, b) for name, b in module.named_buffers() if b.is_floating_point()]

    def load(self, module: nn.Module, x: np.ndarray, *, params: bool = True) -> None:
        """Copy ``x`` into ``module``'s parameters (unless ``params=False``) and floating buffers."""
        with warnings.catch_warnings():  # x may be read-only (Ray's object store): it is only read here
            warnings.simplefilter("ignore", UserWarning)
            vec = torch.from_numpy(np.asarray(x, dtype=np.float32))
        vec = _to_device_of(vec, module)
        with torch.no_grad():
            off = 0
            for p in module.parameters():
                k = p.numel()
                if params:
                    p.copy_(vec[off: off + k].view_as(p))
                off += k
            for _, b in self._buffers_of(module):
                k = b.numel()
                b.copy_(vec[off: off + k].view_as(b))
                off += k


@dataclass(kw_only=True, eq=False, repr=False)
class TorchSpec:
    """What the master and every worker build their side of a torch run from (picklable: Ray
    ships it to each worker; cloudpickle carries the model's class by value where needed).

    ``model``: a zero-argument factory returning the module (the user's instance is wrapped in one
    that returns a copy, keeping its initialisation). ``samples``: ``(X, y)`` tensors or a
    map-style ``Dataset``; ``order``: the training order (a seeded permutation of the samples) whose
    contiguous ranges the code's partitions are. ``batch_size``: samples per job (None: every
    sample of every partition, full-batch); ``models``: models trained at once (job ``t`` is model
    ``t mod models``'s step ``t // models``, each model with its own epochs). ``eval_samples``:
    held-out ``(X, y)`` tensors or a ``Dataset``, for metrics. ``wire_dtype``: the type messages
    are sent in (a name of :data:`~gradcode.codes.precision.WIRE_DTYPES` or its dtype; held as the
    numpy dtype, :func:`~gradcode.codes.precision.wire_dtype`). ``device``: where every worker computes and the master steps
    (``"cpu"``, ``"cuda"``, ``"cuda:1"``...): the models and each worker's partitions live there,
    and a message comes back to the host in float32 before its cast to the wire type.

    ``source``: a zero-argument picklable factory of the samples (``(X, y)`` or a ``Dataset``; a
    path's reader: :func:`gradcode.torch.data.from_path`); each worker calls it and keeps only its
    partitions' samples, and ``samples`` (the master's copy) is not shipped. ``collate``: how a
    ``Dataset``'s items become a batch (a DataLoader's ``collate_fn``; default: stacked).
    ``loader``: a DataLoader's options each worker honours in reading a ``Dataset``
    (:class:`~gradcode.torch.reading.LoaderOptions`: ``num_workers`` processes reading each batch's
    items, the same items bit for bit; ``pin_memory``); None: read in the worker's own process.

    A ``Dataset``'s items are read when a batch needs them, as a DataLoader reads them: item ``i``
    of epoch ``e`` under ``torch.manual_seed`` of ``(seed, 3, i, e)``, so random augmentation is
    drawn anew every epoch and is the same on every worker holding the sample; each worker keeps the
    ``Dataset`` object itself (cheap for one that reads files in ``__getitem__``; data held in
    memory is better given as ``(X, y)`` or a source). ``(X, y)`` tensors are indexed, each worker
    keeping only its partitions' rows.
    """

    problem = "torch"

    #: checkpoints do not copy the data set into their resume record (continue a torch run with
    #: ``fit(..., resume=True)`` and the same arguments)
    checkpoint_record = False

    model: Callable[[], nn.Module]
    samples: Any
    order: np.ndarray
    loss: Callable
    loss_reduction: str
    batch_size: int | None
    sizes: np.ndarray
    seed: int
    wire_dtype: np.dtype
    eval_samples: Any = None
    eval_batch: int = 1024
    metrics: Mapping[str, Callable] | None = None
    models: int = 1
    device: str = "cpu"
    source: Callable | None = None
    collate: Callable | None = None
    loader: Any = None
    autocast: str | None = None

    def __post_init__(self):
        self.order = np.asarray(self.order, dtype=np.int64)
        self.seed, self.eval_batch, self.models = int(self.seed), int(self.eval_batch), int(self.models)
        self.metrics = dict(self.metrics or {})
        self.sizes = np.asarray(self.sizes, dtype=np.float64)
        self.wire_dtype = wire_dtype(self.wire_dtype)
        #: every worker keeps every sample (set for a scheme that changes its partitions mid-run)
        self.hold_all = False
        self.shards = _shard_lengths(len(self.order), self.sizes)
        self.per_job = _per_job(self.shards, self.sizes, self.batch_size)

    @property
    def n_train(self) -> int:
        return len(self.order)

    @property
    def samples_per_job(self) -> int:
        """``B = sum_j b_j``: the samples one job's decoded sums are over."""
        return int(self.per_job.sum())

    def to_dict(self) -> dict:
        return {"kind": "torch", "samples": self.n_train, "batch_size": self.batch_size,
                "samples_per_job": self.samples_per_job, "loss": _name(self.loss),
                "loss_reduction": self.loss_reduction, "wire_dtype": self.wire_dtype.name,
                "eval_samples": None if self.eval_samples is None else length(self.eval_samples),
                "device": self.device, **({"autocast": self.autocast} if self.autocast else {})}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if self.source is not None:  # each worker reads its own samples from the source
            state["samples"] = None
        return state

    def build(self):
        """``(master problem, None)``, as :class:`~gradcode.runtime.ProblemSpec` builds."""
        return TorchMaster(self), None

    def build_partitions(self, partitions: Mapping[int, np.ndarray]):
        """``(worker problem, {j: local rows})``: the worker keeps only its partitions' samples
        (``(X, y)`` rows fetched once and stacked; a ``Dataset``, the indices of its items, read
        per batch), the rest dropped once this returns; with ``hold_all`` (a scheme that changes its
        partitions) every sample, in training order. The samples come from ``source`` when set."""
        rows = {int(j): np.asarray(r, dtype=np.int64) for j, r in partitions.items()}
        if self.hold_all:
            keep = np.arange(self.n_train)
        else:
            keep = np.unique(np.concatenate(list(rows.values()))) if rows else np.zeros(0, dtype=np.int64)
        samples = self.samples if self.samples is not None else read_source(self.source)
        local = {j: np.searchsorted(keep, r) for j, r in rows.items()}
        if isinstance(samples, tuple):
            return TorchWorkerProblem(self, fetch(samples, self.order[keep])), local
        return TorchWorkerProblem(self, samples, index=self.order[keep]), local

    def partition_samples(self, j: int) -> np.ndarray:
        """Indices into the data set of partition ``j``'s samples (its shard of the training order)."""
        from gradcode.problems import partition_rows

        return self.order[partition_rows(self.n_train, self.sizes)[j]]

    def batch_indices(self, job: int, j: int) -> np.ndarray:
        """Indices into the data set of the samples partition ``j`` contributes to ``job``: what
        every worker holding ``j`` computes on (for checking a run against one process)."""
        shard = self.partition_samples(j)
        return shard[self.batch_rows(job, j, np.arange(shard.size)).rows]

    def batch_rows(self, job: int, j: int, rows: np.ndarray, sizes=None) -> Batch:
        """Partition ``j``'s samples for ``job`` (model ``m = job mod models``, its step ``job //
        models``): the model's epochs over the partition, each a permutation drawn from ``(seed, m,
        epoch, j)``, cut into consecutive runs of ``b_j`` samples (so a job's batch is the same on
        every worker, and each model's epoch sees each sample once). ``sizes``: the partitions'
        data fractions when they are not the spec's (a run that switched schemes)."""
        if sizes is None:
            b = int(self.per_job[j])
        else:
            b = int(min(max(round(self.batch_size * sizes[j]), 1), rows.size)) if self.batch_size else rows.size
        model, own = divmod(int(job), self.models)[::-1]
        if self.batch_size is None or b >= rows.size:
            return Batch(rows, job, j, own)  # every job an epoch
        steps = rows.size // b
        epoch, step = divmod(own, steps)
        perm = np.random.default_rng([self.seed, 1, model, epoch, j]).permutation(rows.size)
        return Batch(rows[perm[step * b: (step + 1) * b]], int(job), j, epoch)


class TorchWorkerProblem:
    """A worker's side: the module, its partitions' samples, :meth:`gradient` (module docstring).
    Its decoded vector carries the batch loss (``objective_in_vector``), so a worker can step a
    replica of the model itself (the collective path, :mod:`gradcode.runtime.replica`)."""

    objective_in_vector = True

    def __init__(self, spec: TorchSpec, samples, *, index: np.ndarray | None = None):
        spec = copy.copy(spec)  # the worker's own, without the whole data set that travelled with it
        spec.samples = spec.eval_samples = None
        self.spec = spec
        self.device = check_device(spec.device)
        self.module = spec.model().to(self.device)
        self.module.train()
        self.layout = ModelLayout(self.module)
        self.dim = self.layout.dim
        if index is None:  # (X, y) rows, stacked: indexed on the device
            self.X, self.y = (t.to(self.device) for t in samples)
            self.dataset, self.index = None, None
        else:  # a Dataset: its items read per batch (local row r is item index[r])
            self.X = self.y = None
            self.dataset, self.index = samples, np.asarray(index, dtype=np.int64)
        self.wire_dtype = spec.wire_dtype
        self._loaded = None
        self._layout_key, self._layout = None, None
        #: float16 autocast's loss scale, clean backward passes since it last changed, overflows
        self._scale, self._clean, self.overflows = self.INITIAL_SCALE, 0, 0
        self._reader = None  # the DataLoader processes reading a Dataset's items, started at the first batch

    def batch_rows(self, job: int, j: int, rows: np.ndarray, sizes=None) -> Batch:
        return self.spec.batch_rows(job, j, rows, sizes)

    def full_gradient(self, x, g):
        return g  # the sums over the batch, as TorchMaster's; TorchOptimizer divides by the batch size

    def objective(self, x) -> float:
        """The batch loss of the step that produced ``x`` (:meth:`TorchMaster.objective`)."""
        return float(np.asarray(x)[-2])

    def rows_of(self, sizes, j: int) -> np.ndarray:
        """Partition ``j``'s rows under the partition sizes ``sizes`` (a scheme that changed its
        partitions; the worker holds every sample, in training order)."""
        if not self.spec.hold_all:
            raise GradcodeError("this worker keeps only its partitions' samples; a scheme that changes its"
                                " partitions needs TorchSpec.hold_all")
        from gradcode.problems import partition_rows

        key = tuple(sizes)
        if key != self._layout_key:
            self._layout_key, self._layout = key, partition_rows(self.spec.n_train, np.asarray(key))
        return self._layout[j]

    def read(self, batch: Batch):
        """``(X, y)`` of ``batch`` on the device: rows of the stacked tensors, or the Dataset's items
        read now (the epoch's augmentation), in the DataLoader's ``num_workers`` processes when
        ``TorchSpec.loader`` asks for them (the same items; :mod:`gradcode.torch.reading`), pinned
        before the copy to a GPU with its ``pin_memory``."""
        if self.dataset is None:
            idx = torch.from_numpy(np.asarray(batch.rows, dtype=np.int64)).to(self.device)
            return self.X[idx], self.y[idx]
        options = self.spec.loader
        if options is None or not options.num_workers:
            X, y = fetch(self.dataset, self.index[batch.rows], seed=self.spec.seed, epoch=batch.epoch,
                         collate=self.spec.collate)
        else:
            if self._reader is None:
                from gradcode.torch.reading import ParallelReader

                self._reader = ParallelReader(read_item, self.dataset, self.spec.seed, options)
            X, y = collate_items(self._reader.items(self.index[batch.rows], batch.epoch), self.spec.collate)
        if options is not None and options.pin_memory and self.device.type == "cuda":
            return X.pin_memory().to(self.device, non_blocking=True), y.pin_memory().to(self.device, non_blocking=True)
        return X.to(self.device), y.to(self.device)

    #: float16 autocast's loss scaling on the worker, as torch.amp.GradScaler's defaults: the first
    #: scale, the clean backward passes after which it doubles, and the fewest before it gives up
    INITIAL_SCALE, GROWTH_INTERVAL, MIN_SCALE = 2.0**16, 2000, 1.0

    def gradient(self, x: np.ndarray, batch: Batch) -> np.ndarray:
        """``g_j`` of the module docstring, float32, for the samples of ``batch`` at ``x``; under
        the spec's ``autocast`` the forward pass runs in that type, with float16's loss scaling
        (:class:`~gradcode.torch.TorchConfig`): a backward pass whose scaled gradients overflow is
        run again at half the scale, from the same buffers and seed."""
        module, layout = self.module, self.layout
        layout.load(module, x, params=self._loaded is not x)  # buffers always: a forward moved them
        self._loaded = x
        before = [b.detach().clone() for _, b in layout.buffers]
        X, y = self.read(batch)
        count = int(y.shape[0])
        while True:
            scale = self._loss_scale()
            total, grads = self._backward(module, layout, X, y, count, batch, scale)
            parts = [(g if g is not None else torch.zeros_like(p)).reshape(-1).float() for g, p in
                     zip(grads, layout.params)]
            if scale == 1.0:
                break
            parts = [p / scale for p in parts]  # a power of two: exact
            if all(bool(torch.isfinite(p).all()) for p in parts) or scale <= self.MIN_SCALE:
                self._scaled(clean=True)
                break
            self._scaled(clean=False)  # overflowed: the buffers the forward moved are put back, then again
            with torch.no_grad():
                for (_, b), b0 in zip(layout.buffers, before):
                    b.copy_(b0)
        with torch.no_grad():
            parts += [((b - b0) * count).reshape(-1).float() for (_, b), b0 in zip(layout.buffers, before)]
            parts.append(total.detach().float().reshape(1))
            parts.append(torch.tensor([float(count)], device=self.device))
        return torch.cat(parts).cpu().numpy()  # one copy to the host (none on a CPU)


    def _backward(self, module, layout, X, y, count: int, batch: Batch, scale: float):
        """``(total loss, gradients of scale x total)`` of one forward and backward pass, under the
        partition's seed and the spec's autocast."""
        cast = self.spec.autocast
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_seed(self.spec.seed, 2, batch.job, batch.partition))
            with (torch.autocast(torch.device(self.device).type, dtype=getattr(torch, cast)) if cast
                  else contextlib.nullcontext()):
                out = module(X)
                loss = self.spec.loss(out, y)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise TypeError(f"loss must return a scalar tensor, got {type(loss).__name__}"
                                f"{'' if not isinstance(loss, torch.Tensor) else f' of shape {tuple(loss.shape)}'}")
            total = loss.reshape(()).float() * count if self.spec.loss_reduction == "mean" else loss.reshape(()).float()
            grads = torch.autograd.grad(total * scale if scale != 1.0 else total, layout.params, allow_unused=True)
        return total, grads

    @property
    def loss_scaling(self) -> tuple[float, int, int]:
        """float16 loss scaling's state: the scale, clean passes since it changed, overflows. The
        runtime's timed gradients (a clock's calibration) put it back after them: they do not train."""
        return self._scale, self._clean, self.overflows

    @loss_scaling.setter
    def loss_scaling(self, state: tuple[float, int, int]) -> None:
        self._scale, self._clean, self.overflows = state

    def _loss_scale(self) -> float:
        """The worker's current loss scale: 1 but under float16 autocast (GradScaler's rule)."""
        return self._scale if self.spec.autocast == "float16" else 1.0

    def _scaled(self, *, clean: bool) -> None:
        """After a backward pass at the current scale: grow it after GROWTH_INTERVAL clean ones,
        halve it after an overflow (counted in ``overflows``)."""
        if clean:
            self._clean += 1
            if self._clean >= self.GROWTH_INTERVAL:
                self._scale, self._clean = self._scale * 2, 0
        else:
            self._scale, self._clean, self.overflows = self._scale / 2, 0, self.overflows + 1


class TorchMaster:
    """The master's side of a torch run: the vector's size, the initial model, the batch loss it
    carries (:meth:`objective`) and held-out metrics."""

    objective_in_vector = True

    def __init__(self, spec: TorchSpec):
        self.spec = spec
        self.module = spec.model().to(spec.device)
        self.layout = ModelLayout(self.module)
        self.dim = self.layout.dim
        self.n_train = spec.n_train

    def init_params(self, rng=None) -> np.ndarray:
        """The module's own initial weights (the factory's; ``rng`` is not used)."""
        return self.layout.flatten(self.module)

    def full_gradient(self, x, g):
        return g  # the sums over the batch; TorchOptimizer divides by the batch size

    def parameters_finite(self, x) -> bool:
        """Whether the parameters and buffers in ``x`` are finite (its loss slot is NaN before the
        first step)."""
        return bool(np.isfinite(np.asarray(x)[:-2]).all())

    def objective(self, x) -> float:
        """The batch loss of the step that produced ``x`` (NaN before the first step)."""
        return float(np.asarray(x)[-2])

    def metrics(self, x) -> dict:
        """Loss (``loss``) and ``accuracy`` (integer targets) on the held-out samples, the module in eval mode;
        plus each of ``metrics(output, target) -> float``; ``{}`` without held-out data."""
        if self.spec.eval_samples is None:
            return {}
        return evaluate(self.module, self.layout, x, self.spec)


class TorchOptimizer:
    """A ``torch.optim`` optimizer on the master as gradcode's optimizer interface (``init``,
    ``step``): ``step`` divides the decoded sums by the batch size, sets the parameters' ``.grad``,
    steps the torch optimizer (and the LR scheduler), applies the buffer update and counts BatchNorm's
    batches. The state it returns is the torch optimizer's and scheduler's ``state_dict`` and the
    batch counters (references, pickled only when a checkpoint is written); a step handed a state
    other than the one it returned last (a resumed run) loads it first."""

    def __init__(self, spec: TorchSpec, factory: Callable, scheduler: Callable | None = None,
                 clip_grad_norm: float | None = None):
        self.spec, self.factory, self.scheduler_factory = spec, factory, scheduler
        self.clip_grad_norm = clip_grad_norm
        self.module = spec.model().to(spec.device)
        self.layout = ModelLayout(self.module)
        self.optimizer = factory(self.module.parameters())
        if not isinstance(self.optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim class or a factory params -> Optimizer; it made"
                            f" {type(self.optimizer).__name__}")
        self.scheduler = scheduler(self.optimizer) if scheduler is not None else None
        # the name as configured (a scheduler changes the live lr; a resumed run must match this)
        self._name = f"{type(self.optimizer).__name__}(lr={self.optimizer.param_groups[0].get('lr')})"
        #: the torch optimizer's settings as configured (the first parameter group's, less the
        #: tensors): what the run's ``config.json`` records as its optimizer parameters
        self.hyperparameters = {"class": type(self.optimizer).__name__, **{
            k: v for k, v in self.optimizer.param_groups[0].items()
            if k != "params" and isinstance(v, (bool, int, float, str, tuple, type(None)))}}
        self._current = None
        self._state = None

    def __repr__(self) -> str:
        return self._name

    def _snapshot(self) -> dict:
        self._state = {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "counters": [int(c) for _, c in self.layout.counters],
        }
        return self._state

    def init(self, x):
        self.layout.load(self.module, x)
        self._current = None
        return self._snapshot()

    def _restore(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        with torch.no_grad():
            for (_, c), v in zip(self.layout.counters, state.get("counters", ())):
                c.fill_(int(v))

    def save_files(self, x, state, run_dir, *, models: int = 1, m: int = 0) -> dict[str, str]:
        """Write model ``m``'s ``model.pt`` (the module's ``state_dict`` at ``x``, with the batch
        counters of ``state``), ``optimizer.pt`` (the torch optimizer's ``state_dict`` in ``state``)
        and, with a scheduler, ``scheduler.pt`` into ``run_dir`` (``model-<m>.pt``... when the run
        trains ``models`` > 1: :mod:`gradcode.torch.saved`); returns the paths by kind. What the
        session calls when a run ends, with the run's last parameters and optimizer state (on the
        collective path those a worker's replica reached)."""
        from gradcode.torch.saved import model_files, save_plain

        if state is not None and state is not self._state:
            self._restore(state)
            self._state = state
        self.layout.load(self.module, x)
        self._current = None  # the next step (none, after a run) loads its x again
        paths = model_files(run_dir, models, m)
        save_plain(self.module.state_dict(), paths["model"])
        save_plain(self.optimizer.state_dict(), paths["optimizer"])
        written = {"model": str(paths["model"]), "optimizer": str(paths["optimizer"])}
        if self.scheduler is not None:
            save_plain(self.scheduler.state_dict(), paths["scheduler"])
            written["scheduler"] = str(paths["scheduler"])
        return written

    def step(self, x, g, state, t):
        layout, module = self.layout, self.module
        if state is not None and state is not self._state:  # a resumed run's checkpointed state
            self._restore(state)
        if self._current is not x:  # x is what the last step returned unless a run restarted
            layout.load(module, x)
        loss = apply_decoded(module, layout, g)
        if self.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(layout.params, self.clip_grad_norm)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        out = layout.flatten(module, loss=loss)
        self._current = out
        return out, self._snapshot()


def apply_decoded(module: nn.Module, layout: ModelLayout, g, *, accumulate: bool = False) -> float:
    """Write a decoded round into ``module``: each parameter's ``.grad`` := its part of ``g / B``
    (the batch-mean gradient, on the parameter's device; ``accumulate``: added to a ``.grad``
    already there, as ``loss.backward()`` adds), the floating buffers += their sample-
    weighted mean update, BatchNorm's batch counters += 1; returns the batch's mean loss. ``g`` is
    the decoded sum ``[sum grad | sum b_j (beta_j' - beta) | sum loss | B]`` (module docstring).
    What :class:`TorchOptimizer` does before its step, and :class:`~gradcode.torch.Workers` before
    the user's.

    Without ``accumulate``, on a CPU, the ``.grad`` tensors are views of one buffer, which the next
    call overwrites when they are still the parameters' (as ``zero_grad(set_to_none=False)``
    reuses them; torch's optimizers keep no ``.grad`` from one step to the next): a fresh
    gradient-sized tensor a step costs more than the step's pass over it where its memory is
    faulted in anew (BENCHMARKS.md, "2026-11-28: one malloc arena for the worker's threads")."""
    g = np.asarray(g)
    if g.dtype != np.float32:  # the star path's float64 decode (the collective path's float64 reductions too)
        g = g.astype(np.float64, copy=False)
    B = float(g[-1])  # the decoded batch size (module docstring)
    if not B > 0.5:
        raise GradcodeError(f"the decoded batch size is {B:g}: no samples were summed (a scheme bug)")
    mean = None if accumulate else layout.grad_buffer(module)
    if mean is None:
        mean = torch.empty(layout.d_params + layout.d_buffers, dtype=torch.float32)
    with warnings.catch_warnings():  # g may be read-only (a decode's result): it is only read here
        warnings.simplefilter("ignore", UserWarning)
        part = torch.from_numpy(g[: mean.numel()])
    torch.mul(part, 1.0 / B, out=mean)  # one pass to float32, threaded
    mean = _to_device_of(mean, module)  # one copy to a GPU, not one per parameter
    if not accumulate and mean.device.type == "cpu":
        layout.grads = mean
    with torch.no_grad():
        off = 0
        for p in module.parameters():
            k = p.numel()
            part = mean[off: off + k].view_as(p)  # views of one fresh tensor: no copy per parameter
            if accumulate and p.grad is not None:
                p.grad.add_(part)
            else:
                p.grad = part
            off += k
        for _, b in layout._buffers_of(module):
            k = b.numel()
            b.add_(mean[off: off + k].view_as(b))
            off += k
        for _, c in layout.counters_of(module):
            c.add_(1)
    return float(g[-2]) / B


# ----------------------------------------------------------------------------------- helpers


def evaluate(module: nn.Module, layout: ModelLayout, x, spec: TorchSpec) -> dict:
    """Held-out loss (mean), accuracy for integer targets and the user's metrics at ``x``."""
    layout.load(module, x)
    module.eval()
    total, correct, count, outs, targets, classify = 0.0, 0, 0, [], [], True
    n = length(spec.eval_samples)
    with torch.no_grad():
        for start in range(0, n, spec.eval_batch):
            X, y = fetch(spec.eval_samples, np.arange(start, min(start + spec.eval_batch, n)))
            X, y = X.to(spec.device), y.to(spec.device)
            out = module(X)
            loss = spec.loss(out, y)
            b = int(y.shape[0])
            total += float(loss) * (b if spec.loss_reduction == "mean" else 1)
            count += b
            classify = classify and not y.is_floating_point() and out.ndim == 2
            if classify:
                correct += int((out.argmax(dim=1) == y).sum())
            if spec.metrics:
                outs.append(out)
                targets.append(y)
    module.train()
    res = {"loss": total / max(count, 1)}
    if classify:
        res["accuracy"] = correct / max(count, 1)
    if spec.metrics:
        out, y = torch.cat(outs), torch.cat(targets)
        for name, fn in spec.metrics.items():
            res[name] = float(fn(out, y))
    return res


def fetch(samples, index: np.ndarray, seed: int = 0, *, epoch: int | None = None, collate: Callable | None = None):
    """``(X, y)`` tensors of ``samples[index]``: tensors are indexed; a ``Dataset`` is read item by
    item, item ``i`` under ``torch.manual_seed`` of ``(seed, 3, i)`` (``(seed, 3, i, epoch)`` in
    training: a random transform, such as torchvision's crops and flips, is drawn anew every epoch
    and gives every worker holding the sample the same input), then stacked, or ``collate``'d (a
    DataLoader's ``collate_fn``, which must return an ``(inputs, targets)`` pair)."""
    if isinstance(samples, tuple):
        idx = torch.from_numpy(np.asarray(index, dtype=np.int64))
        return samples[0][idx], samples[1][idx]
    with torch.random.fork_rng(devices=[]):
        items = [read_item(samples, i, seed, epoch) for i in np.asarray(index).tolist()]
    return collate_items(items, collate)


def read_item(samples, i: int, seed: int, epoch: int | None):
    """Item ``i`` of a ``Dataset`` under the seed :func:`fetch` gives it, checked to be an
    ``(input, target)`` pair: one place, so that items read in a DataLoader's processes
    (:mod:`gradcode.torch.reading`) are those read here. It seeds torch's generator and leaves it
    so; :func:`fetch` restores it around its reads."""
    torch.manual_seed(_seed(seed, 3, i) if epoch is None else _seed(seed, 3, i, epoch))
    item = samples[i]
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        raise GradcodeError(f"data[{i}] must be an (input, target) pair, got {type(item).__name__}")
    return item


def collate_items(items: list, collate: Callable | None = None):
    """``(X, y)`` tensors of a batch's ``(input, target)`` items: ``collate``'d (a DataLoader's
    ``collate_fn``, which must return an ``(inputs, targets)`` pair), or stacked."""
    if not items:
        raise GradcodeError("no samples to fetch")
    if collate is not None:
        out = collate(items)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise GradcodeError(f"collate_fn must return an (inputs, targets) pair, got {type(out).__name__}")
        return torch.as_tensor(out[0]), torch.as_tensor(out[1])
    return torch.stack([torch.as_tensor(x) for x, _ in items]), torch.stack([torch.as_tensor(t) for _, t in items])


def read_source(source: Callable):
    """The samples a ``source`` factory returns, as :func:`as_samples` reads data. An exception
    the user's own factory raises is a :class:`~gradcode.errors.UserCodeError` naming where it
    raised; gradcode's readers (:class:`~gradcode.torch.data.from_path`) say themselves what is wrong."""
    try:
        data = source()
    except Exception as exc:
        if type(source).__module__.startswith("gradcode."):
            raise
        raise UserCodeError.of(exc, f"data: reading the samples of {source!r}") from exc
    try:
        return as_samples(data, "the data source")[0]
    except TypeError as exc:
        raise GradcodeError(f"{source!r}: {exc}") from None


def check_finite_samples(X, y, name: str) -> None:
    """Refuse ``(X, y)`` tensors holding NaN or infinity, naming the first rows (found before the
    first round, not at the round whose batch reads them)."""
    bad = torch.zeros(X.shape[0], dtype=torch.bool)
    for t in (X, y):
        if t.is_floating_point() or t.is_complex():
            bad |= ~torch.isfinite(t.reshape(t.shape[0], -1)).all(dim=1).cpu()
    rows = torch.nonzero(bad).flatten().tolist()
    if rows:
        shown = ", ".join(str(r) for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
        raise ValueError(f"{name} holds NaN or infinity in {len(rows)} sample(s) (rows {shown}, counted from 0)")


def as_samples(data, name: str):
    """``(samples, batch size of a DataLoader or None)``: ``(X, y)`` tensors, or a map-style
    ``Dataset`` kept as is (read item by item where needed)."""
    from torch.utils.data import DataLoader, Dataset, IterableDataset

    if isinstance(data, DataLoader):
        return as_samples(data.dataset, name)[0], data.batch_size
    if isinstance(data, IterableDataset):
        raise TypeError(f"{name} must be a map-style Dataset (indexable) or (X, y); an IterableDataset cannot"
                        " give every worker holding a partition the same samples")
    if isinstance(data, (tuple, list)) and len(data) == 2 and not isinstance(data, Dataset):
        try:
            X, y = (a if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a)) for a in data)
        except (ValueError, TypeError) as exc:
            raise TypeError(f"{name} must be (X, y) tensors or arrays (or a Dataset); {exc}") from None
        if X.ndim == 0 or y.ndim == 0 or X.shape[0] != y.shape[0]:
            raise ValueError(f"{name} must be (X, y) with as many targets as inputs; got shapes"
                             f" {tuple(X.shape)} and {tuple(y.shape)}")
        if X.shape[0] == 0:
            raise ValueError(f"{name} holds no samples")
        if X.is_floating_point():
            X = X.float()
        if y.is_floating_point():
            y = y.float()
        elif y.dtype in (torch.int32, torch.int16, torch.int8, torch.uint8):
            y = y.long()
        check_finite_samples(X, y, name)
        return (X, y), None
    if hasattr(data, "__getitem__") and hasattr(data, "__len__"):
        if len(data) == 0:
            raise ValueError(f"{name} holds no samples")
        return data, None
    raise TypeError(f"{name} must be a map-style torch Dataset, a DataLoader or (X, y) tensors/arrays;"
                    f" got {type(data).__name__}")


def _to_device_of(vec: torch.Tensor, module: nn.Module) -> torch.Tensor:
    """``vec`` on the device of ``module``'s first parameter: one host-to-device copy of the whole
    vector instead of one per parameter."""
    for p in module.parameters():
        return vec if p.device == vec.device else vec.to(p.device)
    return vec


class DeviceError(GradcodeError, ValueError):
    """A device this process cannot compute on (a bad argument: the CLI exits 2)."""


def check_device(device) -> torch.device:
    """``device`` as a ``torch.device`` this process can compute on, or a one-line
    :class:`DeviceError` saying why not (a CUDA device on a machine or torch build without CUDA,
    an index past the GPUs there are)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise DeviceError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r} ({exc})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise DeviceError(f"device={device!r}: torch sees no CUDA GPU here (torch {torch.__version__},"
                                f" {build}); use device='cpu' or run where a GPU is")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise DeviceError(f"device={device!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    elif dev.type not in ("cpu", "mps"):
        raise DeviceError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise DeviceError(f"device={device!r}: torch sees no MPS device here")
    return dev


def length(samples) -> int:
    """Samples in ``(X, y)`` tensors or a ``Dataset``."""
    return int(samples[0].shape[0]) if isinstance(samples, tuple) else len(samples)


def _shard_lengths(N: int, sizes: np.ndarray) -> np.ndarray:
    from gradcode.problems import partition_rows

    return np.array([len(r) for r in partition_rows(N, sizes)], dtype=np.int64)


def _per_job(shards: np.ndarray, sizes: np.ndarray, batch_size: int | None) -> np.ndarray:
    """``b_j``: a partition's share of the batch, proportional to its data fraction, or the whole
    shard (full batch). The shares add up to ``batch_size`` exactly: the decoded batch is the one
    asked for (largest-remainder rounding, as the partitions' shards; a share past its shard
    passes the excess to the partitions with room). A batch smaller than the code's partitions
    is refused: each partition contributes at least one sample."""
    if batch_size is None:
        return shards.copy()
    if batch_size < sizes.size:
        raise ValueError(f"batch_size={batch_size} is smaller than the code's {sizes.size} partitions: each"
                         f" partition contributes at least one sample to a batch; use batch_size >= {sizes.size}")
    b = _shard_lengths(batch_size, sizes)
    excess = int(np.maximum(b - shards, 0).sum())
    b = np.minimum(b, shards)
    while excess:  # rare: a share past its shard (a partition of a few samples)
        room = np.flatnonzero(b < shards)
        if room.size == 0:
            raise ValueError(f"batch_size={batch_size} exceeds the {int(shards.sum())} samples of the partitions")
        take = room[np.argsort(-(shards[room] - b[room]), kind="stable")][:excess]
        b[take] += 1
        excess -= take.size
    return b


def _seed(seed: int, *key: int) -> int:
    """A torch seed from ``(seed, *key)``; keys start with a tag: ``(2, job, j)`` partition ``j``'s
    forward pass of ``job``, ``(3, i)`` reading sample ``i``."""
    return int(np.random.SeedSequence([seed, *map(int, key)]).generate_state(1, dtype=np.uint64)[0] >> 1)


def _name(fn) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def copy_factory(module: nn.Module) -> Callable[[], nn.Module]:
    """A zero-argument factory returning copies of ``module`` (its weights included), on the CPU
    (each copy is moved to the run's device where it is used)."""
    return _Copier(copy.deepcopy(module).cpu())


def model_device(model) -> str:
    """The device of a module's first parameter (``"cpu"`` for a factory or a module without any)."""
    if isinstance(model, nn.Module):
        for p in model.parameters():
            return str(p.device)
    return "cpu"


class _Copier:
    def __init__(self, module: nn.Module):
        self.module = module

    def __call__(self) -> nn.Module:
        return copy.deepcopy(self.module)

    def __repr__(self) -> str:
        return type(self.module).__name__


def _callable_name(obj) -> str:
    return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__


def seeded_factory(factory: Callable[[], Any], seed: int) -> Callable[[], nn.Module]:
    """``factory`` called once under ``torch.manual_seed(seed)`` (so its initialisation is seeded),
    its module then copied wherever it is needed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            module = factory()
        except Exception as exc:  # the user's class or factory: where it raised, in one line
            raise UserCodeError.of(exc, f"model: building {_callable_name(factory)}()") from exc
    if not isinstance(module, nn.Module):
        raise TypeError(f"model factory must return an nn.Module, got {type(module).__name__}")
    return copy_factory(module)
