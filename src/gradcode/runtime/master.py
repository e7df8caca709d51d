"""The master loop: real distributed gradient descent with a gradient-coding scheme on Ray.

:func:`train` runs any scheme through the round protocol of :mod:`gradcode.schemes.base`, the same
one the simulator drives::

    tasks = scheme.plan(t)                          # ship to idle workers, params once per job
    scheme.on_result(t, w, i, payload, time)        # each message as it streams back
    ... until scheme.ready(t) ...
    for job, g in scheme.close(t, arrived):         # decoded g = sum_j g_j (a sum over rows)
        model = job mod M
        params[model] = optimizer.step(params[model], g / N + lambda grad R, ...)

Rules the loop follows (DESIGN.md "The runtime"):

* **params once per job**: each job's parameters go to the object store once (``ray.put``) and
  every worker task of the job gets the same reference.
* **skip busy**: a worker still running an earlier round is not given new work (Ray cannot
  cancel a task running on a synchronous actor, and queued work would delay the new round); it is a
  straggler of the new round. If the round cannot decode without it, it receives the round's
  task as soon as it is free.
* **failure-tolerant waiting**: a worker that dies is a straggler, never a crash. Ray restarts it
  (``max_restarts``); it reloads its partitions from the data spec and takes part again from the
  next round. When the round does not decode without it, its task is sent again (with back-off)
  once the actor is back; if the round still does not decode within ``round_timeout`` seconds the
  run stops with :class:`RoundTimeoutError`, which names the workers that held the round up and
  why. A task that raises is a bug: the run stops with its message.
* **no silently wrong gradient**: a message holding NaN or infinity is never handed to the scheme:
  its worker becomes a straggler of the round (its finite leading messages are kept) and the round
  waits for the others, as for any straggler. Finite messages whose decoding overflows are the
  scheme's to judge: StaticScheme drops their senders and, when what is left does not decode,
  ``close`` raises :class:`~gradcode.errors.NotDecodableError` with the round still open, and the
  loop waits for more workers and closes again. A gradient, parameters or training objective that
  is still non-finite stops the run (a diverging step: ``lr`` too large) before it is applied. A
  round closes only when the scheme decodes.
* **faults**: each worker death, non-finite or dropped result is one record in ``failures`` (see
  :class:`TrainResult`): a death counts once however many tasks fail before Ray has restarted the
  worker, with the round it happened in and how that round got over it.
* **cancellation**: once a round closes, the workers still busy with it are aborted (their
  injected sleeps end at once; they send nothing more).
* **injected stragglers**: the delay model is drawn once for the run with the simulator's
  convention (``model.draw(rounds, n, default_rng(seed))``), so :func:`gradcode.simulate` with the
  same model and seed sees the same straggler realisation. Worker ``w``'s message ``i`` of round
  ``t`` is held back until ``a_i = max(0, intercept[t, w] + slope[t, w] * prefix_i)`` seconds
  (accumulated, plus the model's message time), ``prefix_i`` the data fraction message ``i`` needs
  (:func:`gradcode.schemes.task_schedule`): the simulator's timing, slept by the worker on top of
  its real compute. ``train(stragglers=S, delay=D)`` uses ``fixed`` with ``base=0``: only the delay
  is injected, the compute time is real.
* **multi-model training** (SGC App. I): with ``models=M`` job ``j`` computes the gradient of model
  ``j mod M`` at its parameters when the job starts. Schemes whose jobs take up to ``T`` rounds
  (``scheme.delay = T``) need ``M > T`` so that a model's previous job is finished when its next
  starts (checked).
* **records**: per round its wall time (plan to close), the ``(rounds, n)`` arrival table
  (seconds after the round started at which the last message a worker delivered before the round
  closed arrived, ``-1`` for a straggler: the table the simulator's ``arrivals`` holds; stragglers
  are judged from the messages delivered by the close with the simulator's rule,
  :meth:`~gradcode.schemes.Scheme.round_stragglers`: the code's ``straggling``, e.g. AGC's workers
  count as arrived with the ``r_s`` messages the master needed, not all ``L``; whole results for
  other schemes), the number of messages received, the
  injected times, the training objective of each model and held-out metrics; written under
  ``run_dir`` as ``result.json`` and ``.npy`` arrays, plus ``trace.npy``: the arrivals with each
  straggler's entry replaced by a lower bound of its time (the round's duration, or its injected
  time if larger), a valid trace for :func:`gradcode.load_trace`. ``rounds.jsonl`` gets each
  round's records as soon as the round completes, so a driver that is killed leaves them on disk;
  a run that stops with an exception writes ``result.json`` and the arrays of its completed rounds
  with ``error`` set, and the exception carries that :class:`TrainResult` as ``exc.result``. JSON
  records are strict: non-finite numbers are written as ``null``.
* **checkpoints**: every ``checkpoint_every`` rounds the models, optimizer states, records, the
  scheme itself (pickled: codes pickle, DESIGN.md) and the parameters of jobs still in flight go to
  ``run_dir/checkpoint.pkl`` (atomically); ``resume=True`` continues from it with the same
  configuration (checked). Pickling the scheme keeps any history-dependent state (e.g. GC-DC's
  straggler history) and, for schemes whose jobs span rounds (``delay > 0``), the messages of jobs
  in flight; a scheme that does not pickle is refused up front when ``checkpoint_every > 0``. A
  resumed run reaches the same parameters to rounding (~1e-12 relative), bit for bit only when the
  same workers arrived in every round (the decoding coefficients depend on who arrived), so
  ``final_params_checksum`` may differ.

Exactness: with an exact code the decoded ``g`` equals ``sum_j g_j`` up to floating-point rounding
in the decoding coefficients, so training follows single-process full-gradient descent to ~1e-12
relative whichever tolerated set of workers straggled or failed (tests/test_runtime.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from gradcode._validation import check_choice, check_int, check_real
from gradcode.errors import GradcodeError, NotDecodableError
from gradcode.runtime.worker import ProblemSpec, WireTask
from gradcode.schemes.timing import message_arrivals

__all__ = ["CheckpointError", "RoundTimeoutError", "RunDirInUseError", "TrainResult", "build_scheme", "parse_failures",
           "train"]


class RoundTimeoutError(GradcodeError):
    """A round could not be decoded within ``round_timeout`` seconds. The message names the round,
    the workers that held it up and why (died and not back, non-finite result, still computing or
    still busy with an earlier round)."""


class CheckpointError(GradcodeError):
    """``resume`` found a checkpoint it cannot read (truncated, overwritten, not a checkpoint)."""


# ----------------------------------------------------------------------------------------- helpers


def parse_failures(specs: Iterable[str | tuple[int, int]], *, n: int, rounds: int) -> frozenset[tuple[int, int]]:
    """``["W@R", ...]`` (or ``(W, R)`` pairs): worker ``W``'s process exits during round ``R``."""
    out = set()
    for spec in specs:
        if isinstance(spec, str):
            try:
                w_s, r_s = spec.split("@")
                w, r = int(w_s), int(r_s)
            except ValueError:
                raise ValueError(f"fail must look like W@R (worker W dies in round R), got {spec!r}") from None
        else:
            w, r = spec
        w = check_int("fail worker", w, minimum=0, maximum=n - 1)
        r = check_int("fail round", r, minimum=0, maximum=max(rounds - 1, 0))
        out.add((w, r))
    return frozenset(out)


def build_scheme(code="crc", *, workers: int | None = None, stragglers: int = 0, seed: int = 0, code_params=None,
                 dim: int | None = None, verify: bool = False):
    """A scheme from a code name (``make_code(name, n=workers, s=stragglers, seed=seed, ...)``,
    passing ``s`` and ``seed`` only to codes that take them), a scheme family's name (``gc-dc``),
    a :class:`LinearCode` or a :class:`Scheme` (returned as is). ``dim``: the gradient dimension
    the static scheme decodes to (codes with ``chunks > 1`` zero-pad the last chunk). ``verify``:
    a code's rounds wait for two results more than decoding needs and decode with
    :meth:`LinearCode.decode_verified`, which names and leaves out a corrupted worker."""
    from gradcode.codes import LinearCode, code_info, make_code
    from gradcode.schemes import SCHEMES, StaticScheme, as_scheme, make_scheme

    if verify and (code in SCHEMES if isinstance(code, str) else not isinstance(code, LinearCode)):
        raise ValueError(f"verify applies to codes (run as static schemes), not to the scheme {code!r}")
    if not isinstance(code, str):
        if isinstance(code, LinearCode):
            return StaticScheme(code, dim=dim, verify=verify)
        return as_scheme(code, dim=dim, what="code")  # a Scheme as is
    if code in SCHEMES:  # a scheme family (gc-dc, ...): n from the workers, seed shared
        params = dict(code_params or {})
        takes = SCHEMES.parameters(code)
        params.setdefault("n", check_int("workers", workers, minimum=1))
        if "seed" in takes:
            params.setdefault("seed", seed)
        return make_scheme(code, dim=dim, **params)
    if code not in _available_codes():
        make_scheme(code)  # raises, listing the scheme families and the codes
    info = code_info(code)
    params = dict(code_params or {})
    takes = info["params"]
    if "n" in takes:
        params.setdefault("n", check_int("workers", workers, minimum=1))
    if "s" in takes:
        params.setdefault("s", check_int("stragglers", stragglers, minimum=0))
    if "seed" in takes:
        params.setdefault("seed", seed)
    return StaticScheme(make_code(code, **params), dim=dim, verify=verify)


def _available_codes():
    from gradcode.codes import available_codes

    return available_codes()


def _placement(scheme) -> list[tuple[int, ...]]:
    """Partitions each worker stores: the scheme's ``stored_partitions``."""
    return [tuple(int(j) for j in scheme.stored_partitions(w)) for w in range(scheme.n)]


def _checksum(arrays: Sequence[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype="<f8").tobytes())
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------------------- result


@dataclass
class TrainResult:
    """What :func:`train` returns (and writes under ``run_dir``), also for a run that stopped.

    ``params[m]`` are model ``m``'s final parameters (``params[0]`` for one model, also
    ``final_params``; two runs of an exact code agree to ~1e-12 relative, their
    ``final_params_checksum`` bit for bit only when the same workers arrived in every round);
    ``round_times[t]`` seconds from planning to closing round ``t``;
    ``arrivals[t, w]`` seconds into round ``t`` at which the last message worker ``w`` delivered
    before the close arrived, ``-1`` for a straggler (stragglers as the simulator judges them, plus
    workers whose result was discarded: non-finite, or dropped by the scheme); ``messages[t, w]``
    messages received before the round closed;
    ``injected[t, w]`` the injected time (0 without a delay model); ``losses[t, m]`` training
    objective of model ``m`` after round ``t`` (carried over from the last update of that model);
    ``metrics``: one dict per evaluation (round, elapsed, model and held-out metrics).

    ``failures``: one record per *fault* (not per failed task), in the order they happened::

        {"round", "worker", "kind", "error", "injected", "recovery", "resends", "failed_tasks",
         "back_in_round"}   (+ "planned_round", "fired" for injected failures)

    ``kind`` is ``"died"`` (the worker's process exited: Ray restarts it), ``"non-finite"`` (a
    message held NaN or infinity: the worker's result for the round was discarded, the round
    waited for others), ``"dropped"`` (the scheme dropped the worker's finite result because
    decoding with it overflowed) or ``"raised"`` (the task raised: the run stops). A death counts
    once however many tasks fail before Ray has restarted the worker (``failed_tasks`` of them;
    ``resends``: tasks sent to it again meanwhile; ``back_in_round``: the round in which it next
    delivered a message, None if it never did). ``recovery`` says how ``round`` ended:
    ``"tolerated"`` (decoded without the worker), ``"resent"`` (its task was sent again once Ray
    had restarted it and its result was used) or ``"none"`` (the run stopped in that round). An
    injected failure (``fail``) is recorded when sent, with ``planned_round`` (it fires in the
    worker's first task of that round or later, ``round``) and ``fired`` (False: the run ended
    first; such records are not faults); Ray's report of the dead actor, when it comes, replaces
    ``error``.

    A run that stops (round timeout, divergence, a worker exception, an interrupt) keeps its
    completed rounds: the arrays hold those rounds only, ``params`` are those after the last of
    them, and ``error``/``error_type`` say why it stopped (None for a run that finished).
    """

    config: dict
    params: list[np.ndarray]
    round_times: np.ndarray
    arrivals: np.ndarray
    messages: np.ndarray
    injected: np.ndarray
    losses: np.ndarray
    metrics: list[dict] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)
    run_dir: str | None = None
    resumed_from: int | None = None
    error: str | None = None
    error_type: str | None = None

    @property
    def final_params(self) -> np.ndarray:
        return self.params[0]

    @property
    def final_loss(self) -> float:
        return float(self.losses[-1, 0]) if self.losses.size else float("nan")

    @property
    def elapsed(self) -> np.ndarray:
        """Cumulative training time at the end of each round (evaluation excluded)."""
        return np.cumsum(self.round_times)

    @property
    def stragglers(self) -> np.ndarray:
        return self.arrivals < 0

    @property
    def faults(self) -> list[dict]:
        """The fault records of ``failures`` (planned failures that never fired left out)."""
        return [f for f in self.failures if f.get("fired", True)]

    def to_json(self, *, include_params: bool | None = None) -> dict:
        """A JSON-able summary; parameters are included when ``include_params`` (default: when
        the models have at most 10000 parameters). Strict JSON: non-finite numbers (the loss of a
        run that stopped before its first round, a NaN metric) are ``None`` (``null``), never the
        ``NaN``/``Infinity`` that ``json.dumps`` would write and JSON parsers reject."""
        d = self.params[0].size
        include = d <= 10000 if include_params is None else include_params
        doc = {
            "config": self.config,
            "rounds": int(self.round_times.size),
            "error": self.error,
            "error_type": self.error_type,
            "round_times": self.round_times.tolist(),
            "total_time": float(self.round_times.sum()),
            "final_loss": self.final_loss,
            "final_losses": self.losses[-1].tolist() if self.losses.size else [],
            "losses": self.losses.tolist(),
            "final_params_checksum": _checksum(self.params),
            "final_params_norm": [float(np.linalg.norm(p)) for p in self.params],
            "arrivals": self.arrivals.tolist(),
            "messages": self.messages.tolist(),
            "injected": self.injected.tolist(),
            "metrics": self.metrics,
            "failures": self.failures,
            "faults": len(self.faults),
            "run_dir": self.run_dir,
            "resumed_from": self.resumed_from,
        }
        if include:
            doc["final_params"] = [p.tolist() for p in self.params] if len(self.params) > 1 else self.params[0].tolist()
        return json_safe(doc)

    def save(self, run_dir: str | os.PathLike) -> Path:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        np.save(run_dir / "arrivals.npy", self.arrivals)
        np.save(run_dir / "messages.npy", self.messages)
        np.save(run_dir / "injected.npy", self.injected)
        np.save(run_dir / "round_times.npy", self.round_times)
        np.save(run_dir / "losses.npy", self.losses)
        np.save(run_dir / "params.npy", np.stack(self.params))
        np.save(run_dir / "trace.npy", self.trace())
        text = json.dumps(self.to_json(include_params=False), indent=1, allow_nan=False)
        _atomic_write(run_dir / "result.json", text.encode())
        return run_dir

    def trace(self) -> np.ndarray:
        """The arrivals as a replayable trace: stragglers get the round's duration (or their
        injected time, if larger), a lower bound of the time they would have taken."""
        lower = np.maximum(self.round_times[:, None], self.injected)
        return np.where(self.arrivals >= 0, self.arrivals, lower)


def json_safe(value):
    """``value`` with every non-finite float (also inside lists, tuples, dicts and numpy values)
    replaced by None, so that ``json.dumps(..., allow_nan=False)`` accepts it: run records are
    strict JSON, with ``null`` for NaN and infinities."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, np.generic):
        return json_safe(value.item())
    return value


def _finite(a) -> bool:
    """Whether an array (or number) holds no NaN or infinity; two reductions, no temporary."""
    a = np.asarray(a)
    if a.size == 0:
        return True
    if not np.issubdtype(a.dtype, np.inexact):
        return True
    return bool(np.isfinite(a.min()) and np.isfinite(a.max()))


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------- train


def train(
    code="crc",
    *,
    workers: int = 4,
    stragglers: int = 0,
    delay: float = 0.0,
    delay_model=None,
    code_params: Mapping | None = None,
    data="tandon-synthetic",
    data_params: Mapping | None = None,
    test_fraction: float = 0.2,
    problem: str | None = None,
    problem_params: Mapping | None = None,
    optimizer: str = "gd",
    optimizer_params: Mapping | Sequence[Mapping] | None = None,
    rounds: int = 100,
    models: int = 1,
    seed: int = 0,
    fail: Iterable = (),
    checkpoint_every: int = 0,
    resume: bool = False,
    run_dir: str | os.PathLike | None = None,
    address: str | None = None,
    num_cpus: int | None = None,
    round_timeout: float = 120.0,
    max_restarts: int = -1,
    start_timeout: float = 120.0,
    eval_every: int = 1,
    callback: Callable[[dict], None] | None = None,
    verify: bool = False,
    overwrite: bool = False,
    inject: str = "excess",
) -> TrainResult:
    """Train ``models`` models with gradient coding on Ray workers; see the module docstring.

    ``code``: a code name (built with ``n=workers``, ``s=stragglers`` and ``seed`` where the code
    takes them, plus ``code_params``), a :class:`~gradcode.LinearCode` or any
    :class:`~gradcode.schemes.Scheme`. ``stragglers``/``delay``: ``stragglers`` random workers per
    round sleep ``delay`` extra seconds (Tandon Sec. 5; the ``fixed`` model with ``base=0``), unless
    ``delay_model`` (a delay model, or ``(name, params)``) is given; also the tolerance ``s`` of codes
    that take one. ``data``: a dataset name or a :class:`~gradcode.problems.DataSpec`; ``problem``
    defaults to ``logistic``/``linear``/``softmax`` by the data's task. ``data`` may also be a
    :class:`~gradcode.runtime.ProblemSpec` or any picklable object whose ``build()`` returns
    ``(problem, dataset)``: workers and master call it to get the same problem. ``optimizer_params`` may be a
    list of ``models`` dicts (one per model: e.g. a learning-rate sweep); without a step size GD and
    Nesterov take ``1/L`` from ``problem.smoothness()``. ``fail``: ``"W@R"``
    strings: worker ``W``'s process exits in round ``R``. ``run_dir``: where records, checkpoints
    and Ray's temp dir go (default ``./gradcode-runs/<code>-<time>``). ``address``: join an existing
    Ray cluster (default: the current Ray session, or an embedded local one with ``num_cpus``).
    ``start_timeout``: seconds the cluster at ``address`` may take to answer and the workers to
    start (build their data) before the run stops with a :class:`~gradcode.errors.GradcodeError`. ``eval_every``: held-out metrics every
    ``K`` rounds and after the last one (0: after the last only), for problems that have
    ``metrics(params)``. ``verify``: each round waits for two results more than decoding needs
    and checks them against each other (:meth:`LinearCode.decode_verified`): a worker whose
    finite result is wrong is named, left out of the round and recorded as a fault; a round
    whose results disagree with no single culprit waits for more. ``callback(record)`` is called after every round with a dict (round, time, loss, ...); an
    exception it raises stops the run (a checkpoint taken before survives for ``resume``).

    ``inject``: what a worker sleeps on top of its real computation, from the delay model's draw
    (``time = intercept + slope * load``). ``"excess"`` (default): only what the model adds beyond
    the fastest worker of the round (``intercept`` and ``slope`` less their minimum over workers),
    since the real computation already takes the fastest worker's time: a model with no
    stragglers (``bernoulli`` with ``p=0``) injects nothing, Tandon's ``fixed`` model exactly its
    delays, a shifted exponential its spread. ``"full"``: the model's whole time (workers whose
    real computation is negligible next to the modelled one).

    A ``run_dir`` that already holds a run (a checkpoint, a result or round records) is refused
    unless ``resume`` (continue it; ``rounds`` may exceed the checkpoint's to extend a finished
    run, the added rounds taking their injected delays from the draw of the longer run) or
    ``overwrite`` (replace it: the old checkpoint and records are removed first).

    An exception that stops a started run (:class:`RoundTimeoutError`, a diverging step, a worker
    that raises, an unreachable cluster, the callback's, ``KeyboardInterrupt``) is raised after the
    completed rounds are saved under ``run_dir`` with the error; it carries them as ``exc.result``.
    A damaged checkpoint raises :class:`CheckpointError`.
    """
    from gradcode.problems import DataSpec, make_dataset, make_optimizer, make_problem, partition_rows
    from gradcode.schemes import task_schedule

    rounds = check_int("rounds", rounds, minimum=1)
    models = check_int("models", models, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    checkpoint_every = check_int("checkpoint_every", checkpoint_every, minimum=0)
    eval_every = check_int("eval_every", eval_every, minimum=0)
    round_timeout = check_real("round_timeout", round_timeout, minimum=0.0, strict_min=True)
    delay = check_real("delay", delay, minimum=0.0)
    max_restarts = check_int("max_restarts", max_restarts, minimum=-1)
    start_timeout = check_real("start_timeout", start_timeout, minimum=0.0, strict_min=True)
    if resume and run_dir is None:  # the default run_dir is a new timestamped folder
        raise ValueError("resume=True needs run_dir: the folder of the run to continue")


    # ---- data and problem
    if hasattr(data, "build") and not isinstance(data, (str, DataSpec)):
        pspec = data  # a ProblemSpec, or any picklable object whose build() -> (problem, dataset)
        master_problem, _ = pspec.build()
        data_record = pspec.to_dict() if hasattr(pspec, "to_dict") else repr(pspec)
    else:
        if isinstance(data, str):
            spec = DataSpec(data, dict(data_params or {}), seed=seed, test_fraction=test_fraction)
        elif isinstance(data, DataSpec):
            spec = data
        else:
            raise TypeError(
                f"data must be a dataset name, a DataSpec or a ProblemSpec, got {type(data).__name__}"
            )
        dataset = make_dataset(spec)
        problem = problem or _default_problem(dataset)
        pspec = ProblemSpec(spec, problem, dict(problem_params or {}))
        master_problem = make_problem(problem, dataset, **pspec.params)
        data_record = spec.to_dict()

    scheme = build_scheme(code, workers=workers, stragglers=stragglers, seed=seed, code_params=code_params,
                          dim=int(master_problem.dim), verify=verify)
    n = scheme.n
    # an object without its own repr is named by its class (the default repr holds an address,
    # which would make every resumption of it look like another configuration)
    scheme_name = code if isinstance(code, str) else (
        repr(code) if type(code).__repr__ is not object.__repr__ else type(code).__qualname__
    )

    # ---- optimizers
    if optimizer_params is None or isinstance(optimizer_params, Mapping):
        opt_params = [dict(optimizer_params or {})] * models
    else:
        opt_params = [dict(p) for p in optimizer_params]
        if len(opt_params) != models:
            raise ValueError(f"optimizer_params lists {len(opt_params)} dicts; give one per model ({models})")
    opt_params = [_default_steps(optimizer, p, master_problem) for p in opt_params]
    optimizers = [make_optimizer(optimizer, **p) for p in opt_params]

    # ---- stragglers and failures
    dmodel = _delay_model(delay_model, stragglers, delay)
    check_choice("inject", inject, ("excess", "full"))
    if dmodel is None:
        draw, comm = None, 0.0
    else:  # the simulator's convention: one draw for the run from default_rng(seed)
        draw = dmodel.draw(rounds, n, np.random.default_rng(seed))
        if inject == "excess":
            draw = _excess_over_fastest(draw)
        comm = float(dmodel.message_time(1.0 / int(scheme.chunks)))
    streams = np.random.SeedSequence(seed).spawn(2)  # [unused, initial parameters]
    failures_planned = parse_failures(fail, n=n, rounds=rounds)

    config = {
        "code": scheme_name,
        "scheme": repr(scheme),
        "code_params": _plain(dict(code_params or {})),
        "verify": bool(verify),
        "workers": n,
        "stragglers": stragglers,
        "delay": delay,
        "delay_model": repr(dmodel) if dmodel is not None else None,
        "inject": inject,
        "data": data_record,
        "problem": getattr(pspec, "problem", None),
        "problem_params": dict(problem_params or {}),
        "optimizer": optimizer,
        "optimizer_params": opt_params,
        "rounds": rounds,
        "models": models,
        "seed": seed,
        "fail": sorted(f"{w}@{r}" for w, r in failures_planned),
        "dim": int(master_problem.dim),
        "n_train": int(master_problem.n_train),
    }

    run_dir = Path(run_dir) if run_dir is not None else Path("gradcode-runs") / (
        f"{scheme_name}-n{n}-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}"
    )
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"run_dir {str(run_dir)!r} is a file, not a folder; pass a folder for the run's records")
    held = [name for name in _RUN_FILES if (run_dir / name).exists()]
    if held and not resume:
        if not overwrite:
            raise RunDirInUseError(
                f"run_dir {str(run_dir)!r} already holds a run ({', '.join(held)}); continue it with"
                " resume=True (--resume) or replace it with overwrite=True (--overwrite)"
            )
        for name in held:
            (run_dir / name).unlink()
    run_dir.mkdir(parents=True, exist_ok=True)

    # ---- state (fresh or from a checkpoint)
    init_rngs = [np.random.default_rng(s) for s in streams[1].spawn(models)]
    state = {
        "next_round": 0,
        "params": [master_problem.init_params(r) for r in init_rngs],
        "opt_states": None,
        "steps": [0] * models,
        "round_times": np.zeros(rounds),
        "arrivals": np.full((rounds, n), -1.0),
        "messages": np.zeros((rounds, n), dtype=np.int64),
        "injected": np.zeros((rounds, n)),
        "losses": np.full((rounds, models), np.nan),
        "metrics": [],
        "failures": [],
    }
    state["opt_states"] = [opt.init(p) for opt, p in zip(optimizers, state["params"])]
    resumed_from = None
    ckpt_path = run_dir / "checkpoint.pkl"
    inflight = None
    if checkpoint_every:
        try:
            pickle.dumps(scheme)
        except Exception as exc:
            raise ValueError(
                f"checkpoint_every needs a scheme that pickles (checkpoints hold it); {scheme!r} does not:"
                f" {type(exc).__name__}: {exc}"
            ) from None
    if resume:
        # a code built from its name is fully described by the config (name, code_params, workers,
        # stragglers, seed) and its repr; a code or scheme object's repr may hold an address
        saved = _load_checkpoint(ckpt_path, config, ignore=("rounds",) if isinstance(code, str) else ("rounds", "scheme"))
        state, scheme, inflight = saved["state"], saved["scheme"], saved["inflight"]
        resumed_from = state["next_round"]
        if rounds < resumed_from:
            raise ValueError(f"resume: the checkpoint has {resumed_from} rounds done; rounds must be at least"
                             f" that, got {rounds}")
        _grow_records(state, rounds)
    _atomic_write(run_dir / "config.json", json.dumps(config, indent=1, default=str).encode())

    # ---- engine and workers
    from gradcode.runtime.engine import RayEngine

    rows = partition_rows(master_problem.n_train, scheme.partition_sizes)
    placement = _placement(scheme)
    chunks = int(scheme.chunks)
    opt_names = [f"{optimizer}(" + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v!r}"
                                             for k, v in p.items()) + ")" for p in opt_params]
    log = _RoundLog(run_dir / "rounds.jsonl", keep_before=state["next_round"] if resume else 0)
    engine = loop = None
    try:
        engine = RayEngine(address=address, num_cpus=num_cpus, run_dir=run_dir, start_timeout=start_timeout)
        engine.spawn([(pspec, {j: rows[j] for j in placement[w]}, chunks) for w in range(n)],
                     max_restarts=max_restarts, start_timeout=start_timeout)
        loop = _Loop(scheme, engine, master_problem, optimizers, state, draw, comm, failures_planned,
                     models, round_timeout, task_schedule, max_restarts=max_restarts, opt_names=opt_names)
        if inflight is not None:
            loop.restore(inflight)
        current_loss = [master_problem.objective(p) for p in state["params"]]
        for t in range(state["next_round"], rounds):
            for m, loss in loop.round(t).items():
                current_loss[m] = loss
            state["losses"][t] = current_loss
            elapsed = float(state["round_times"][: t + 1].sum())
            record = {
                "round": t,
                "time": float(state["round_times"][t]),
                "elapsed": elapsed,
                "loss": current_loss[0] if models == 1 else list(current_loss),
                "stragglers": int((state["arrivals"][t] < 0).sum()),
            }
            evaluate = (eval_every and (t + 1) % eval_every == 0) or t == rounds - 1  # 0: at the end only
            if evaluate and hasattr(master_problem, "metrics"):  # a spec's problem may have none
                for m in range(models):
                    met = master_problem.metrics(state["params"][m])
                    state["metrics"].append({"round": t, "elapsed": elapsed, "model": m,
                                             "train_loss": current_loss[m], **met})
                record["metrics"] = state["metrics"][-models:]
            state["next_round"] = t + 1
            log.write(t, state, record, loop)
            if checkpoint_every and (t + 1) % checkpoint_every == 0:
                _save_checkpoint(ckpt_path, config, state, scheme, loop.inflight())
            if callback is not None:
                callback(record)
        loop.unfired()
    except BaseException as exc:
        # keep what the run did: the completed rounds, every fault, and why it stopped
        if loop is not None:
            loop.stopped()
        partial = _result(config, state, run_dir, resumed_from, error=exc)
        try:
            partial.save(run_dir)
        except OSError:  # a full disk must not hide the error that stopped the run
            pass
        log.close()
        if isinstance(exc, Exception):
            exc.result = partial  # for callers (the CLI prints it with --json)
        raise
    finally:
        if engine is not None:
            engine.shutdown()
    log.close()
    result = _result(config, state, run_dir, resumed_from)
    result.save(run_dir)
    return result


def _result(config, state, run_dir, resumed_from, *, error: BaseException | None = None) -> TrainResult:
    """The :class:`TrainResult` of the rounds completed so far (``state["next_round"]`` of them)."""
    k = int(state["next_round"])
    return TrainResult(
        config=config,
        params=[np.asarray(p) for p in state["params"]],
        round_times=state["round_times"][:k],
        arrivals=state["arrivals"][:k],
        messages=state["messages"][:k],
        injected=state["injected"][:k],
        losses=state["losses"][:k],
        metrics=state["metrics"],
        failures=state["failures"],
        run_dir=str(run_dir),
        resumed_from=resumed_from,
        error=None if error is None else (str(error) or type(error).__name__),
        error_type=None if error is None else type(error).__name__,
    )


class _RoundLog:
    """``run_dir/rounds.jsonl``: one strict-JSON line per completed round, appended and flushed as
    the run goes, so a driver that is killed (SIGKILL, OOM, a lost machine) still leaves every
    round it completed on disk: its time, arrivals, messages, injected times, losses, metrics,
    and the fault records (all of them, on the lines where they changed; the last such line has
    their final state). A resumed run keeps the lines of the rounds before its checkpoint and
    writes the later rounds again."""

    def __init__(self, path: Path, *, keep_before: int):
        kept = []
        if keep_before and path.is_file():
            for line in path.read_text().splitlines():
                try:
                    if json.loads(line)["round"] < keep_before:
                        kept.append(line + "\n")
                except (ValueError, KeyError, TypeError):  # a line cut by a crash
                    continue
        self.fh = open(path, "w")
        self.fh.writelines(kept)
        self.fh.flush()
        self.faults_seen = None

    def write(self, t: int, state: dict, record: dict, loop) -> None:
        doc = {
            "round": t,
            "time": record["time"],
            "elapsed": record["elapsed"],
            "arrivals": state["arrivals"][t],
            "messages": state["messages"][t],
            "injected": state["injected"][t],
            "losses": state["losses"][t],
            "metrics": record.get("metrics", []),
        }
        if loop.fault_version != self.faults_seen:
            doc["faults"] = state["failures"]
            self.faults_seen = loop.fault_version
        self.fh.write(json.dumps(json_safe(doc), allow_nan=False) + "\n")
        self.fh.flush()

    def close(self) -> None:
        if not self.fh.closed:
            self.fh.close()


def _default_steps(optimizer: str, params: dict, problem) -> dict:
    """Step sizes when none are given: ``lr = 1/L`` for GD and Nesterov (``L`` from
    ``problem.smoothness()``), and ``c1 / (t + c2)`` with ``c2 = 10``, ``c1 = 10 / L`` for SGD
    (first step ``1/L``, then decaying as Tandon's ignore-stragglers baseline)."""
    params = dict(params)
    L = problem.smoothness() if hasattr(problem, "smoothness") else None
    if L:
        if optimizer in ("gd", "nesterov"):
            params.setdefault("lr", 1.0 / L)
        elif optimizer == "sgd":
            params.setdefault("c2", 10.0)
            params.setdefault("c1", params["c2"] / L)
    return params


def _default_problem(dataset) -> str:
    return {"binary": "logistic", "regression": "linear", "multiclass": "softmax"}[dataset.task]


def _excess_over_fastest(draw):
    """The draw less, in each round, the smallest intercept and the smallest slope over workers:
    what the model adds beyond the fastest worker (see ``train``'s ``inject``). Straggler states
    and rates are kept (GC-DC's perfect state information reads them)."""
    from gradcode.stragglers.models import Draw

    return Draw(draw.intercept - draw.intercept.min(axis=1, keepdims=True),
                draw.slope - draw.slope.min(axis=1, keepdims=True), draw.straggling, draw.rates)


def _delay_model(delay_model, stragglers, delay):
    from gradcode.stragglers import make_delay_model

    delay = check_real("delay", delay, minimum=0.0)
    if delay_model is None:
        if delay > 0 and not stragglers:
            raise ValueError(f"delay={delay:g} delays stragglers={stragglers} random workers a round, i.e."
                             " none: give stragglers > 0 (--stragglers) or a delay model (--delay-model)")
        if stragglers and delay > 0:
            return make_delay_model("fixed", stragglers=stragglers, delay=delay, base=0.0)
        return None
    if delay > 0:
        raise ValueError(f"delay={delay:g} is the extra time of the default straggler model and is not used"
                         " with delay_model; give the model's own parameters (--delay-param) instead")
    if isinstance(delay_model, str):
        return make_delay_model(delay_model)
    if isinstance(delay_model, tuple) and len(delay_model) == 2 and isinstance(delay_model[0], str):
        return make_delay_model(delay_model[0], **dict(delay_model[1]))
    if hasattr(delay_model, "sample"):
        return delay_model
    raise TypeError(f"delay_model must be a delay model, a name or (name, params); got {delay_model!r}")


# ----------------------------------------------------------------------------------------- checkpoints

_CKPT_VERSION = 2


def _plain(value):
    """``value`` as JSON-able built-ins (arrays as lists), so configs compare with ``==``."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist() if hasattr(v, "tolist") else repr(v)))


#: what a run leaves in its run_dir that a new run there would overwrite
_RUN_FILES = ("checkpoint.pkl", "result.json", "rounds.jsonl")


class RunDirInUseError(GradcodeError, ValueError):
    """``run_dir`` already holds a run and neither ``resume`` nor ``overwrite`` was asked."""


def _grow_records(state: dict, rounds: int) -> None:
    """Extend the per-round tables of a checkpointed ``state`` to ``rounds`` rounds (a resumed
    run asked for more rounds than the checkpointed one); the added rows are as a fresh run's."""
    have = state["round_times"].shape[0]
    if rounds <= have:
        return
    extra = rounds - have
    fills = {"round_times": 0.0, "arrivals": -1.0, "messages": 0, "injected": 0.0, "losses": np.nan}
    for key, fill in fills.items():
        old = state[key]
        state[key] = np.concatenate([old, np.full((extra,) + old.shape[1:], fill, dtype=old.dtype)])


def _save_checkpoint(path: Path, config: dict, state: dict, scheme, inflight: dict) -> None:
    doc = {"version": _CKPT_VERSION, "config": config, "state": state, "scheme": scheme, "inflight": inflight}
    _atomic_write(path, pickle.dumps(doc))


def _load_checkpoint(path: Path, config: dict, *, ignore: Iterable[str] = ()) -> dict:
    """The checkpointed state, after checking that ``config`` (but the ``ignore`` entries) is the
    checkpoint's: a resumed run continues the same training, never another code or problem."""
    if not path.is_file():
        raise FileNotFoundError(f"resume: no checkpoint at {path}; run with checkpoint_every > 0 first")
    try:
        with open(path, "rb") as fh:
            saved = pickle.load(fh)
    except Exception as exc:  # truncated, overwritten, or pickled by code that no longer exists
        raise CheckpointError(
            f"resume: the checkpoint {path} is damaged and cannot be read ({type(exc).__name__}: {exc});"
            " checkpoints are written atomically, so it was truncated or overwritten after it was"
            " written. Restore it from a copy, or start the run again without --resume"
        ) from None
    if not isinstance(saved, dict) or not {"config", "state", "scheme", "inflight"} <= set(saved):
        raise CheckpointError(
            f"resume: {path} is not a gradcode checkpoint (it holds a {type(saved).__name__}"
            f"{'' if not isinstance(saved, dict) else ' without config, state, scheme and inflight'});"
            " start the run again without --resume"
        )
    if saved.get("version") != _CKPT_VERSION:
        raise ValueError(f"resume: {path} has checkpoint version {saved.get('version')}, expected {_CKPT_VERSION}")
    old = saved["config"]
    differ = sorted(k for k in set(old) | set(config) if k not in ignore and old.get(k) != config.get(k))
    if differ:
        detail = "; ".join(f"{k}: checkpoint {old.get(k)!r} vs now {config.get(k)!r}" for k in differ)
        raise ValueError(f"resume: the configuration differs from the checkpoint's ({detail})")
    return saved


# ----------------------------------------------------------------------------------------- the loop


class _Loop:
    """One round at a time; see the module docstring for the rules."""

    POLL = 0.5  # seconds between checks when nothing arrives
    BACKOFF = 0.2  # first wait before re-sending a failed worker's task (doubles per attempt)

    def __init__(self, scheme, engine, problem, optimizers, state, draw, comm, failures, models, timeout, schedule,
                 *, max_restarts: int = -1, opt_names: Sequence[str] | None = None):
        self.scheme, self.engine, self.problem = scheme, engine, problem
        self.optimizers, self.state, self.draw, self.comm = optimizers, state, draw, comm
        # planned failures already fired (also those of a checkpointed run's earlier rounds)
        self.fired: set[tuple[int, int]] = {
            (rec["worker"], rec["planned_round"]) for rec in state["failures"] if rec.get("injected") and rec.get("fired")
        }
        self.failures, self.models, self.timeout = failures, models, timeout
        self.schedule = schedule
        self.max_restarts = max_restarts
        self.opt_names = list(opt_names) if opt_names is not None else [repr(o) for o in optimizers]
        self.sizes = np.asarray(scheme.partition_sizes, dtype=np.float64)
        self.job_params: dict[int, tuple[np.ndarray, Any]] = {}  # job -> (params, object ref)
        self.pending_job: dict[int, int] = {}  # model -> job in flight
        self.counts: dict[tuple[int, int], int] = {}  # (round, worker) -> messages delivered
        self.streamed: dict[tuple[int, int], int] = {}  # (round, worker) -> of the current stream
        self.expected: dict[tuple[int, int], int] = {}
        self.last_times: dict[tuple[int, int], float] = {}  # (round, worker) -> its latest message
        self.discarded: set[tuple[int, int]] = set()  # (round, worker) whose result held NaN/inf
        self.starts: dict[int, float] = {}
        self.current = 0
        self.stale_messages = 0
        # faults: the open "died" record of each worker that has not delivered since it died (a
        # death is one fault however many of its tasks fail before Ray has restarted it)
        self.down: dict[int, dict] = {}
        self.fault_version = 0  # bumped on every change of state["failures"] (rounds.jsonl)
        self.close_error: str | None = None  # why the last close of the current round failed

    # -------------------------------------------------------------- per round
    def round(self, t: int) -> dict[int, float]:
        """Run round ``t`` to its close; returns ``{model: training objective}`` of the models
        updated in it."""
        engine, scheme = self.engine, self.scheme
        start = time.perf_counter()
        self.current = t
        self.starts[t] = start
        self.close_error = None
        if self.draw is not None:  # perfect straggler state information, for schemes that use it
            scheme.observe_states(t, self.draw.straggling[t],
                                  None if self.draw.rates is None else self.draw.rates[t])
        plan = scheme.plan(t)
        wire = {}
        for w, tasks in plan.items():
            wire[w] = self._wire(t, w, tasks)
            self.state["injected"][t, w] = wire[w][2][-1] if len(wire[w][2]) else 0.0
        unsent = set(wire)
        retries: dict[int, tuple[float, int]] = {}  # worker -> (not before, attempts)
        for w in sorted(wire):
            if engine.busy(w):
                continue
            self._send(t, w, wire[w])
            unsent.discard(w)
        deadline = start + self.timeout
        while True:
            self._wait_ready(t, wire, unsent, retries, start, deadline)
            # the scheme can decode: close the round. Stragglers by the simulator's rule
            # (round_stragglers: the code's, e.g. AGC's r_s messages; whole results for other
            # schemes); the arrival table holds the last message each non-straggler delivered
            counts = np.array([self.counts.get((t, w), 0) for w in range(scheme.n)], dtype=np.intp)
            planned = np.array([self.expected.get((t, w), 0) if w in wire else 0 for w in range(scheme.n)],
                               dtype=np.intp)
            late = scheme.round_stragglers(counts, planned)
            arrived = frozenset(w for w in wire if counts[w] > 0 and not late[w] and (t, w) not in self.discarded)
            try:
                finished = scheme.close(t, arrived)
                break
            except NotDecodableError as exc:
                # the scheme dropped results it could not decode with (StaticScheme: non-finite
                # values, or finite ones whose weighted sum overflows) and what is left does not
                # decode: the round stays open (schemes/static.py) and, like any round short of
                # results, waits for the workers still computing, re-sends, or times out
                self.close_error = str(exc)
                if scheme.ready(t):  # nothing the workers send can change that: a scheme bug
                    raise GradcodeError(f"round {t}: the scheme is ready but cannot decode: {exc}") from exc
        dropped = self._dropped_by_scheme(t, arrived)
        for w in wire:
            self.state["arrivals"][t, w] = self.last_times[(t, w)] if w in arrived and w not in dropped else -1.0
        for w in sorted(dropped):
            self._fault(t, w, "dropped", self.close_error or (
                "the scheme dropped its result: decoding with it gave non-finite values, or (verify)"
                " it disagreed with the other workers' results"))
        for rec in self.state["failures"]:
            if rec["round"] == t and rec.get("recovery") is None and rec.get("fired", True):
                rec["recovery"] = "resent" if rec["worker"] in arrived and rec["worker"] not in dropped else "tolerated"
                self.fault_version += 1
        losses = self._apply(t, finished)
        self.state["round_times"][t] = time.perf_counter() - start
        for w in range(scheme.n):
            self.state["messages"][t, w] = self.counts.get((t, w), 0)
        for w in range(scheme.n):
            r = engine.running_round(w)
            if r is not None and r <= t:
                engine.abort(w, t)
        for key in [k for k in self.counts if k[0] <= t]:  # later messages of the round are stale
            self.counts.pop(key, None)
            self.streamed.pop(key, None)
            self.expected.pop(key, None)
            self.last_times.pop(key, None)
        self.discarded = {k for k in self.discarded if k[0] > t}
        return losses

    def _wait_ready(self, t, wire, unsent, retries, start, deadline) -> None:
        """Handle events until the scheme is ready to close round ``t``: send late work to
        workers that became idle, re-send (with back-off) the task of a worker that died, stop
        the run when a task raises, and raise :class:`RoundTimeoutError` at ``deadline``."""
        engine, scheme = self.engine, self.scheme
        while not scheme.ready(t):
            now = time.perf_counter()
            if now >= deadline:
                raise RoundTimeoutError(self._timeout_message(t, wire, unsent, retries, now - start))
            # late work: idle workers whose task this round still lacks
            for w in sorted(unsent):
                if engine.busy(w):
                    continue
                not_before, attempts = retries.get(w, (0.0, 0))
                if now >= not_before:
                    if w in retries and w in self.down:
                        self.down[w]["resends"] += 1
                        self.fault_version += 1
                    self._send(t, w, wire[w], elapsed=now - start)
                    unsent.discard(w)
            waits = [nb for w, (nb, _) in retries.items() if w in unsent]
            timeout = min([self.POLL, deadline - now] + [max(nb - now, 0.0) for nb in waits])
            ev = engine.poll(max(timeout, 0.0))
            if ev is None:
                continue
            self._handle(ev)
            if ev.kind == "failed" and not ev.lost:
                cause = getattr(ev.payload, "cause", None) or ev.payload
                raise GradcodeError(
                    f"worker {ev.worker} raised in round {ev.round}: {type(cause).__name__}: {cause}"
                ) from None
            if ev.kind == "failed" and ev.round == t and (t, ev.worker) not in self.discarded:
                _, attempts = retries.get(ev.worker, (0.0, 0))
                retries[ev.worker] = (time.perf_counter() + self.BACKOFF * 2**attempts, attempts + 1)
                unsent.add(ev.worker)

    def _dropped_by_scheme(self, t: int, arrived: frozenset) -> set[int]:
        """Workers the driver counted as arrived but the scheme's straggler history marks as
        stragglers of round ``t``: StaticScheme drops the results it cannot decode with. Schemes
        without a ``straggler_history`` drop nothing the driver can see."""
        history = self.scheme.stragglers
        if not arrived or t >= history.shape[0]:
            return set()
        return {w for w in arrived if history[t, w]}

    def inflight(self) -> dict:
        """What a checkpoint needs beyond ``state`` and the scheme: the parameters each job still in
        flight was started at (schemes with ``delay > 0``), and which job each model waits for."""
        return {"jobs": {job: x for job, (x, _) in self.job_params.items()}, "pending_job": dict(self.pending_job)}

    def restore(self, inflight: dict) -> None:
        """Undo :meth:`inflight` on a resumed run (parameters go to the object store again)."""
        for job, x in inflight["jobs"].items():
            x = np.array(x, dtype=np.float64)
            x.flags.writeable = False
            self.job_params[job] = (x, self.engine.put(x))
        self.pending_job.update(inflight["pending_job"])

    def _wire(self, t: int, w: int, tasks) -> tuple[list[WireTask], list, np.ndarray, int]:
        """Wire tasks, parameter refs, the injected schedule and the number of messages.

        The schedule is the simulator's: message ``i`` is ready ``a_i`` seconds into the round,
        ``a_i = max(0, intercept + slope * prefix_i)`` accumulated (``prefix_i`` from
        :func:`task_schedule`), plus the model's message time per message."""
        slots: dict[int, int] = {}
        out = []
        for task in tasks:
            job = int(task.job)
            if job not in slots:
                slots[job] = len(slots)
                self._ensure_job(job)
            out.append(WireTask(job, tuple(task.partitions), np.asarray(task.coefficients, dtype=np.float64), slots[job]))
        refs = [self.job_params[job][1] for job in slots]
        total = sum(task.messages for task in tasks)
        if self.draw is None:
            return out, refs, np.zeros(total), total
        prefix, _ = self.schedule(tasks, self.sizes)
        return out, refs, message_arrivals(self.draw.intercept[t, w], self.draw.slope[t, w], prefix, self.comm), total

    def _ensure_job(self, job: int) -> None:
        if job in self.job_params:
            return
        m = job % self.models
        prev = self.pending_job.get(m)
        if prev is not None and prev != job:
            raise GradcodeError(
                f"job {job} of model {m} starts before job {prev} of the same model finished: train"
                f" more models than the scheme's delay ({self.scheme.delay})"
            )
        x = np.array(self.state["params"][m], dtype=np.float64)
        x.flags.writeable = False
        self.job_params[job] = (x, self.engine.put(x))
        self.pending_job[m] = job

    def _send(self, t: int, w: int, wire, *, elapsed: float = 0.0) -> None:
        """Submit round ``t`` to worker ``w``; a late submission sleeps only what is left of the
        worker's injected schedule.

        A planned failure ``(w, r)`` fires on worker ``w``'s first submission in a round ``>= r``:
        a worker that is busy during all of round ``r`` (skip-busy), or that round ``r``'s plan
        leaves out, fails on its next task instead of never. It is recorded when it is sent
        (``injected: True``, ``planned_round: r``), not when Ray reports the dead actor (~2 s
        later, possibly after the run ended), and it is the worker's open fault: Ray's reports of
        the failed tasks that follow, until the worker delivers again, belong to it."""
        tasks, refs, ready_at, total = wire
        left = np.maximum(np.asarray(ready_at) - elapsed, 0.0)
        sleeps = np.diff(np.concatenate([[0.0], left])) if left.size else left
        due = sorted(r for (fw, r) in self.failures if fw == w and r <= t and (fw, r) not in self.fired)
        fail = bool(due)
        if fail:
            self.fired.add((w, due[0]))
            self.down[w] = self._fault(t, w, "died", "injected: the worker's process exits (fail W@R)",
                                       injected=True, planned_round=due[0], fired=True)
        self.counts.setdefault((t, w), 0)  # messages delivered to the scheme, across re-sends
        self.streamed[(t, w)] = 0  # messages of this submission's stream seen so far
        self.expected[(t, w)] = total
        self.engine.submit(w, t, tasks, refs, sleeps.tolist(), fail)

    def _fault(self, t: int, w: int, kind: str, error: str, *, injected: bool = False, **extra) -> dict:
        """Append a fault record (see :class:`TrainResult`) and return it."""
        rec = {"round": t, "worker": w, "kind": kind, "error": error, "injected": injected, **extra,
               "recovery": "tolerated" if t < self.current else None,  # its round closed already
               "resends": 0, "failed_tasks": 0, "back_in_round": None}
        self.state["failures"].append(rec)
        self.fault_version += 1
        return rec

    def _handle(self, ev) -> None:
        t, w = ev.round, ev.worker
        if ev.kind == "message":
            back = self.down.pop(w, None)  # a message: the worker is alive (restarted, if it died)
            if back is not None:
                back["back_in_round"] = t
                self.fault_version += 1
            if t < self.current:  # the round is closed: a late message (aborted work)
                self.stale_messages += 1
                return
            # a task re-sent after its worker died mid-stream recomputes the same messages: the
            # first `counts` of the new stream were delivered by the dead one, so the scheme gets
            # each message index once (the protocol does not ask schemes to drop duplicates)
            i = self.streamed.get((t, w), 0)
            self.streamed[(t, w)] = i + 1
            if i < self.counts.get((t, w), 0) or (t, w) in self.discarded:
                return
            if not _finite(ev.payload):
                # a worker that computes NaN or infinity is a straggler of the round, never part of
                # a gradient: its messages of the round are withheld from the scheme (which holds
                # the finite prefix before them) and the round waits for the others
                self.discarded.add((t, w))
                self._fault(t, w, "non-finite", f"message {i} of round {t} held NaN or infinity; the"
                            " worker's result for the round was discarded")
                self.engine.abort(w, t)
                return
            self.counts[(t, w)] = i + 1
            now = time.perf_counter() - self.starts.get(t, 0.0)
            self.scheme.on_result(t, w, i, ev.payload, now)
            self.last_times[(t, w)] = now
            if i + 1 == self.expected.get((t, w)):
                self.state["arrivals"][t, w] = now
                self.engine.release(w)  # all its messages are in: free for the next round
        elif ev.kind == "failed":
            error = _short_error(ev.payload)
            if not ev.lost:  # the task raised: a bug, the run stops (_wait_ready raises)
                self._fault(t, w, "raised", error)
                return
            rec = self.down.get(w)
            if rec is None:  # a new death
                self.down[w] = rec = self._fault(t, w, "died", error)
            elif rec["injected"] and not rec["failed_tasks"]:  # Ray reporting an injected failure
                rec["error"] = error
            rec["failed_tasks"] += 1
            self.fault_version += 1

    def unfired(self) -> None:
        """Record the planned failures that never fired (the run ended before the worker was sent
        a task of their round or later)."""
        for w, r in sorted(self.failures - self.fired):
            self.state["failures"].append({
                "round": r, "worker": w, "kind": "died",
                "error": "not fired: the worker got no task from this round on",
                "injected": True, "fired": False, "planned_round": r,
                "recovery": None, "resends": 0, "failed_tasks": 0, "back_in_round": None,
            })
            self.fault_version += 1

    def stopped(self) -> None:
        """The run stopped in the current round: its faults were not recovered."""
        for rec in self.state["failures"]:
            if rec.get("recovery") is None and rec.get("fired", True):
                rec["recovery"] = "none"
                self.fault_version += 1

    def _apply(self, t: int, finished) -> dict[int, float]:
        """Optimizer steps for the jobs finished in round ``t``; returns ``{model: objective}``.

        Nothing is committed unless every gradient, every new parameter vector and every
        objective is finite: a diverging step (``lr`` far too large) stops the run with a
        :class:`GradcodeError` that says so, and the kept parameters are the last finite ones."""
        updates = []
        for job, g in finished:
            x, _ = self.job_params[job]
            m = job % self.models
            g = np.asarray(g)[: x.size]  # drop the zero padding of a chunked code's last chunk
            if not _finite(g):  # every message used was finite: the scheme's sum overflowed
                raise GradcodeError(
                    f"round {t}: the decoded gradient of job {job} (model {m}) holds NaN or infinity"
                    " although every message used was finite; it was not applied"
                )
            grad = self.problem.full_gradient(x, g)
            k = self.state["steps"][m]
            with np.errstate(over="ignore", invalid="ignore"):
                params, opt_state = self.optimizers[m].step(self.state["params"][m], grad, self.state["opt_states"][m], k)
                bad = "parameters" if not _finite(params) else None
                loss = float(self.problem.objective(params)) if bad is None else math.nan
            if bad is None and not math.isfinite(loss):
                bad = "training objective"
            if bad is not None:
                raise GradcodeError(
                    f"round {t}: training diverged: model {m}'s {bad} became non-finite (NaN or"
                    f" infinity) at optimizer step {k} ({self.opt_names[m]}), from a finite decoded"
                    f" gradient (norm {float(np.linalg.norm(grad)):.3g}): the step size is too large for"
                    " this problem. Lower the learning rate (--lr; by default GD and Nesterov take 1/L"
                    " from the problem's smoothness). The parameters after the last completed round"
                    " are kept"
                )
            updates.append((job, m, params, opt_state, k, loss))
        losses = {}
        for job, m, params, opt_state, k, loss in updates:
            self.job_params.pop(job)
            self.pending_job.pop(m, None)
            self.state["params"][m], self.state["opt_states"][m] = params, opt_state
            self.state["steps"][m] = k + 1
            losses[m] = loss
        return losses

    def _timeout_message(self, t, wire, unsent, retries, elapsed: float) -> str:
        """Which workers held round ``t`` up, and why; says "died" only of workers that died."""
        held = []
        for w in sorted(wire):
            have, need = self.counts.get((t, w), 0), self.expected.get((t, w), 0)
            if have >= need and (t, w) not in self.discarded:
                continue
            inj = float(self.state["injected"][t, w])
            running = self.engine.running_round(w)
            if (t, w) in self.discarded:
                why = "its result held NaN or infinity and was discarded"
            elif w in self.down:
                rec = self.down[w]
                restarts = (" Ray does not restart it (max_restarts=0)" if self.max_restarts == 0 else
                            f" it had not come back (task re-sent {rec['resends']} times; Ray restarts a dead"
                            f" worker {'without limit' if self.max_restarts < 0 else f'up to {self.max_restarts} times'})")
                why = f"its process died in round {rec['round']} ({rec['error']});{restarts}"
            elif w in unsent and running is not None:
                why = f"still busy with round {running}, so it never got this round's task"
            else:
                why = f"still computing: {have} of {need} messages delivered after {elapsed:.3g} s"
                if inj > 0:
                    why += f" (injected delay {inj:.3g} s)"
            held.append((w, why))
        complete = sorted(w for w in wire if self.counts.get((t, w), 0) >= self.expected.get((t, w), 1)
                          and (t, w) not in self.discarded)
        text = f"round {t} could not be decoded within round_timeout={self.timeout:g} s"
        if held:
            text += f"; it was held up by workers {[w for w, _ in held]}: " + "; ".join(
                f"worker {w}: {why}" for w, why in held)
        else:
            text += "; every planned worker delivered its result"
        if self.close_error:
            text += f"; the scheme could not decode what it held: {self.close_error}"
        return text + (f". Complete results came from workers {complete} of {self.scheme.n}. No gradient was"
                       " used for this round; the completed rounds are kept")


def _short_error(exc) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text.splitlines()[0][:200]
