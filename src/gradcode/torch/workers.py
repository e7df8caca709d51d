""":class:`Workers`: gradient-coded workers under your own PyTorch training loop.

:func:`~gradcode.torch.fit` owns the loop. ``Workers`` leaves it to you, as DDP does: each
:meth:`Workers.backward` runs one coded round on the model's *current* parameters and buffers and
writes the decoded batch-mean gradient into the parameters' ``.grad``; clipping, the optimizer,
schedulers, AMP's ``GradScaler``, logging and stopping are the loop's::

    with Workers(net, (X, y), TrainSpec("crc", workers=4, stragglers=1)) as workers:  # batches of 64
        for step in range(workers.rounds):
            optimizer.zero_grad()
            loss = workers.backward()              # the exact gradient of the batch's mean loss
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            optimizer.step()
            scheduler.step()

One round is what a round of :func:`fit` is (the same :class:`~gradcode.runtime.session.RunSession`
and :func:`~gradcode.torch.problem.apply_decoded`): the workers holding each partition compute on
the same ``b_j`` samples of job ``t`` (:meth:`~gradcode.torch.problem.TorchSpec.batch_rows`), the
master decodes ``sum_j g_j`` from whichever workers suffice, and the batch is the one asked for.
So a loop that does what ``fit``'s :class:`~gradcode.torch.TorchConfig` says (the same optimizer,
scheduler, clipping) reaches ``fit``'s weights (``tests/test_torch_workers.py``).
"""

from __future__ import annotations

import math
import weakref

import numpy as np
from torch import nn

from gradcode._validation import check_int
from gradcode.errors import GradcodeError
from gradcode.torch.problem import ModelLayout, apply_decoded

__all__ = ["Workers"]

#: TorchConfig fields that belong to the user's loop under Workers
_LOOP_FIELDS = ("optimizer", "optimizer_params", "scheduler", "clip_grad_norm", "eval_data", "metrics", "probe",
                "load_slope", "families", "progress")


class Workers:
    """A context manager holding a run's workers for a training loop of your own.

    ``model``: the ``nn.Module`` your loop trains (on its device; ``TorchConfig.device`` moves the
    workers' copies elsewhere); its current parameters and floating buffers travel to the workers
    at every :meth:`backward`. ``data``, ``spec`` (scheme, workers, injected stragglers, seed,
    closing rule), ``engine``, ``cluster``, ``faults``: as :func:`~gradcode.torch.fit`.
    ``torch_config``: the loss, batch size, wire type and device
    (:class:`~gradcode.torch.TorchConfig`; its optimizer, scheduler, clipping and evaluation fields
    are the loop's and are refused here). ``run``: the run dir of the records and the rounds:
    without ``RunConfig.rounds`` (the default) :meth:`backward` runs as many rounds as the loop
    calls it, for a scheme whose jobs each finish in their round (static codes, ``ignore``,
    ``gc-dc``); SR-SGC and M-SGC plan their jobs rounds ahead and need ``RunConfig.rounds``, which
    is then a limit (:class:`~gradcode.runtime.TrainingStopped` past it) for any scheme.
    :attr:`rounds` is a length for the loop to use (``range(workers.rounds)``, a scheduler's
    ``T_max``): ``RunConfig.rounds``, else ``TorchConfig.epochs``' worth (one epoch by default:
    ``N / batch_size`` rounds); :attr:`limit` is ``RunConfig.rounds`` (None: no limit).
    Checkpoints are the loop's (``torch.save`` of the model and the optimizer).

    After the block: :attr:`history` (one record per round, as ``fit``'s: ``loss``,
    ``batch_size``, ``time``, ``stragglers``, ``overflows``...), :attr:`result` (the runtime's
    :class:`~gradcode.runtime.TrainResult`, also saved under :attr:`run_dir`).
    """

    def __init__(self, model: nn.Module, data, spec=None, *, torch_config=None, run=None, faults=None, cluster=None,
                 engine: str = "ray"):
        from gradcode.torch.config import TorchConfig
        from gradcode.torch.training import _fit_configs

        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be the nn.Module your loop trains, got {type(model).__name__}")
        spec, tconf, run, faults, cluster = _fit_configs(spec, torch_config, run, faults, cluster)
        owned = [f for f in _LOOP_FIELDS if getattr(tconf, f) != getattr(TorchConfig(), f)]
        if owned:
            raise ValueError(f"TorchConfig.{', '.join(owned)} belong to your loop under Workers (step your optimizer,"
                             " scheduler and clipping yourself, or use fit)")
        if isinstance(spec.scheme, str) and spec.scheme == "auto":
            raise ValueError("scheme='auto' plans its run ahead (it probes uncoded, then switches to the code"
                             " predicted fastest for the rounds left), which a loop of your own does not declare:"
                             " use fit for it, or name a code or scheme")
        if spec.models != 1:
            raise ValueError("Workers trains one model with a named code or scheme (models=1); use fit for several"
                             " models")
        if run.checkpoint_every:
            raise ValueError("Workers writes no checkpoints: the loop owns the optimizer; save the model and the"
                             " optimizer with torch.save in your loop (RunConfig.checkpoint_every=0)")
        if cluster is not None and cluster.transport == "collective":
            raise ValueError("transport='collective' steps a replica of the model on every worker; under Workers your"
                             " loop steps the model here, so the decoded gradient must come to this process: use"
                             " transport='channels' (or fit, whose optimizer the workers can run)")
        self.model, self.engine = model, engine
        self.layout = ModelLayout(model)
        self._build(spec, tconf, run, faults, cluster, data)
        self.history: list[dict] = []
        self.result = None
        self._session = None

    def _build(self, spec, tconf, run, faults, cluster, data) -> None:
        """The run's TorchSpec, scheme and runtime configs, as :func:`~gradcode.torch.fit` builds them."""
        from gradcode.torch.training import _engine, _rounds, _run_spec, _samples, _scheme, _torch_spec

        scheme = _scheme(spec, tconf, False)
        if run.rounds is None and scheme.delay > 0:  # before the data are read
            name = spec.scheme if isinstance(spec.scheme, str) else type(scheme).__name__
            raise ValueError(f"{name} plans its jobs ahead (a job spans up to {scheme.delay + 1} rounds and the last"
                             " rounds finish the jobs in flight), so Workers needs the run's length: give"
                             " run=RunConfig(rounds=...); static codes, ignore and gc-dc run as many rounds as your"
                             " loop makes")
        tspec, _ = _torch_spec(self.model, _samples(data, tconf, spec.seed), spec, tconf, scheme)
        self._capture = _Capture()
        self.spec = tspec
        #: RunConfig.rounds: backward() stops past it (None: as many rounds as the loop makes)
        self.limit = run.rounds
        self.rounds = run.rounds if run.rounds is not None else _rounds(tspec, None, tconf.epochs, 1)
        self._run = run  # rounds None: an open-ended session, its tables grown as the loop goes on
        self._engine, self._shipping = _engine(self.engine, tspec)
        self._train_spec = _run_spec(spec, scheme, tspec, [self._capture])
        self._faults, self._cluster = faults, cluster

    # ----------------------------------------------------------------- the context
    def __enter__(self) -> Workers:
        from gradcode.runtime.session import open_session

        _guard_grad_scalers()
        _OPEN.add(self)
        self._shipping.__enter__()
        try:
            self._session = open_session(self._train_spec, cluster=self._cluster, faults=self._faults,
                                         run=self._run, engine=self._engine,
                                         initial_params=[self.layout.flatten(self.model)])
            self._session.__enter__()
        except BaseException:
            self._shipping.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        _OPEN.discard(self)
        session, self._session = self._session, None
        try:
            suppressed = session.__exit__(kind, exc, tb) if session is not None else False
        finally:
            self._shipping.__exit__(None, None, None)
        if session is not None:
            self.result = session.result if session.result is not None else getattr(exc, "result", None)
        return suppressed

    @property
    def run_dir(self) -> str | None:
        session = self._session
        if session is not None:
            return str(session.run_dir)
        return None if self.result is None else self.result.run_dir

    @property
    def round(self) -> int:
        """Rounds done so far."""
        return len(self.history)

    # ----------------------------------------------------------------- one round
    def backward(self) -> float:
        """One coded round at the model's current parameters and buffers: every parameter's
        ``.grad`` gains the exact decoded gradient of the batch's mean loss (added to what is there,
        as ``loss.backward()`` adds: call ``optimizer.zero_grad()`` first), floating buffers take
        the batch's update (BatchNorm's running statistics, as a forward pass would) and BatchNorm
        counts the batch. Returns the batch's mean loss. Raises
        :class:`~gradcode.runtime.TrainingStopped` past ``RunConfig.rounds`` when it was given
        (:attr:`limit`), or when a round cannot be decoded in time (the records so far are kept)."""
        session = self._session
        if session is None:
            raise GradcodeError("Workers.backward() runs inside `with Workers(...) as workers:`")
        x = self.layout.flatten(self.model)
        if x.size != session.state.params[0].size:
            raise GradcodeError(f"the model's parameters and buffers changed size ({x.size - 2} numbers, the workers"
                                f" hold {session.state.params[0].size - 2}): the loop must train the model given")
        session.state.params[0] = x
        record = session.step()
        loss = apply_decoded(self.model, self.layout, self._capture.g, accumulate=True)
        record["batch_size"] = self.spec.samples_per_job
        self.history.append(record)
        return loss

    def __repr__(self) -> str:
        state = "open" if self._session is not None else "closed"
        of = f"of {self.limit}" if self.limit is not None else "(no limit)"
        return f"Workers({self.spec.model!r}, {state}, round {self.round} {of})"


#: the Workers blocks open in this process (a GradScaler refuses their models' gradients)
_OPEN: weakref.WeakSet = weakref.WeakSet()


def _guard_grad_scalers() -> None:
    """Make ``torch.amp.GradScaler.unscale_`` (which ``scaler.step`` calls) refuse an optimizer of
    an open :class:`Workers` block's model: the gradients :meth:`Workers.backward` sets are the
    decoded, unscaled gradients (float16's loss scaling runs on the workers,
    ``TorchConfig(autocast="float16")``), so a scaler's unscaling would divide them by its scale
    without a word. Installed once; every other use of GradScaler is untouched."""
    from torch.amp import grad_scaler

    scaler = grad_scaler.GradScaler
    if getattr(scaler.unscale_, "_gradcode_guard", False):
        return
    unscale = scaler.unscale_

    def guarded(self, optimizer):
        params = {id(p) for group in optimizer.param_groups for p in group["params"]}
        for block in list(_OPEN):
            if any(id(p) in params for p in block.model.parameters()):
                raise GradcodeError(
                    "a GradScaler would unscale the gradients Workers.backward() set, which are unscaled already"
                    " (the workers scale and unscale their own loss: TorchConfig(autocast='float16')); leave the"
                    " scaler out of the loop and call optimizer.step() (README: mixed precision in your own loop)")
        return unscale(self, optimizer)

    guarded._gradcode_guard = True
    scaler.unscale_ = guarded


class _Capture:
    """The driver's optimizer of a :class:`Workers` run: keeps the decoded sums for the loop and
    returns the parameters as they were (the loop steps them), with the batch loss in their loss slot."""

    hyperparameters = {"class": "your loop (gradcode.torch.Workers)"}

    def __init__(self):
        self.g = None

    def init(self, x):
        return None

    def step(self, x, g, state, k):
        self.g = np.asarray(g, dtype=np.float64)
        out = np.array(x, copy=True)
        B = float(self.g[-1])
        out[-2] = self.g[-2] / B if B > 0.5 else math.nan
        return out, None

    def __repr__(self) -> str:
        return "own loop"
