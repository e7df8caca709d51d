"""What a run keeps: its state between rounds (:class:`TrainState`), its records
(:class:`TrainResult`, ``rounds.jsonl``) and its checkpoints.

The on-disk documents: ``result.json`` and the ``.npy`` arrays, ``rounds.jsonl`` (one strict-JSON
line per completed round, flushed as the run goes), and the checkpoint, ``checkpoint.json`` with
its arrays in ``checkpoint-<digest>.npz`` (:mod:`gradcode.runtime.safe_state`: no pickle, a
SHA-256 over everything resume reads, the previous checkpoint kept until the new one is
complete). The document is ``{"version": 3, "config", "state", "scheme", "inflight"}`` whose
``state`` is the string-keyed dict :meth:`TrainState.to_dict` writes. It also holds the run's
:class:`~gradcode.runtime.config.TrainSpec`, :class:`~gradcode.runtime.config.RunConfig` and
:class:`~gradcode.runtime.config.FaultConfig` (``"spec"``, ``"run"``, ``"faults"``) when a
checkpoint can hold them (gradcode's own classes and plain values), which is what
:func:`gradcode.runtime.resume` needs to continue a run from its folder alone. Checkpoints of
versions before 3 were pickles (``checkpoint.pkl``): they are refused, since loading one can run
any code it names.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gradcode._validation import check_memory, read_regular
from gradcode.codes.messages import Message, Note, sum_squares
from gradcode.errors import GradcodeError
from gradcode.runtime.safe_state import CheckpointError, atomic_write, read_document, write_document

__all__ = ["CheckpointError", "RunDirInUseError", "TrainResult", "TrainState", "json_safe"]


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
    ``waitouts[t]``: round ``t`` could not close at the mu-rule's deadline and was waited out
    (always False under ``close="decodable"``); ``loose[t]``: the largest relative error bound of
    a decode round ``t`` accepted beyond its tolerance, as no worse than a plain sum of the partial
    gradients (:func:`~gradcode.codes.precision.accept_bound`), NaN when every decode was within it
    (``loose_rounds`` counts them; a run with ``decode_strict`` refuses such decodes instead);
    ``overflows[t]``: backward passes behind the messages received for round ``t`` that overflowed
    float16's loss scale and were run again at half the scale on their worker (``autocast="float16"``:
    no step is skipped, the gradient is the unscaled one; ``total_overflows`` sums them);
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

    ``files``: the files under ``run_dir`` that hold the trained model, by kind: ``"params"``
    (``params.npy``, the ``(models, d)`` parameter vectors, once saved) and, for a torch model,
    ``"model"``, ``"optimizer"`` and ``"scheduler"`` (``model.pt``...: :mod:`gradcode.torch.saved`;
    a list of paths, one per model, when several models train at once). ``result.json`` and
    :meth:`to_json` name them instead of embedding the parameters.
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
    waitouts: np.ndarray | None = None
    clock: dict | None = None
    files: dict = field(default_factory=dict)
    loose: np.ndarray | None = None
    overflows: np.ndarray | None = None

    def __post_init__(self):
        if self.waitouts is None:
            self.waitouts = np.zeros(self.round_times.shape[0], dtype=bool)
        if self.loose is None:
            self.loose = np.full(self.round_times.shape[0], np.nan)
        if self.overflows is None:
            self.overflows = np.zeros(self.round_times.shape[0], dtype=np.int64)

    @property
    def rounds(self) -> int:
        """Rounds completed (``result.json``'s ``rounds``)."""
        return int(self.round_times.size)

    @property
    def total_time(self) -> float:
        """Seconds the completed rounds took (``result.json``'s ``total_time``)."""
        return float(self.round_times.sum())

    @property
    def waitout_rounds(self) -> int:
        """Rounds waited out under the mu-rule (``result.json``'s ``waitout_rounds``)."""
        return int(self.waitouts.sum())

    @property
    def loose_rounds(self) -> int:
        """Rounds whose gradient was accepted beyond its tolerance as no worse than a plain sum
        (``result.json``'s ``loose_rounds``)."""
        return int(np.count_nonzero(~np.isnan(self.loose)))

    @property
    def total_overflows(self) -> int:
        """float16 loss scaling's overflowed backward passes, run again on their workers
        (``result.json``'s ``total_overflows``)."""
        return int(self.overflows.sum())

    @property
    def final_params(self) -> np.ndarray:
        return self.params[0]

    @property
    def final_loss(self) -> float:
        return float(self.losses[-1, 0]) if self.losses.size else float("nan")

    @property
    def final_losses(self) -> list[float]:
        """Each model's training objective after the last round (``result.json``'s ``final_losses``)."""
        return self.losses[-1].tolist() if self.losses.size else []

    @property
    def final_params_checksum(self) -> str:
        """A digest of the final parameters (``result.json``'s): equal runs agree bit for bit."""
        return _checksum(self.params)

    @property
    def final_params_norm(self) -> list[float]:
        """Each model's final parameter norm (``result.json``'s ``final_params_norm``)."""
        return [float(np.linalg.norm(p)) for p in self.params]

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

    def to_json(self, *, params: bool = False) -> dict:
        """A JSON-able summary. The parameters are named by the files holding them (``files``:
        ``params.npy``, and a torch model's ``model.pt`` and ``optimizer.pt``), not embedded: a
        5,000-parameter model's vector is 117 KB of JSON, a ResNet-18's 45 MB. ``params=True``
        adds the raw vector as ``final_params`` (a list of vectors with several models). Strict
        JSON: non-finite numbers (the loss of a run that stopped before its first round, a NaN
        metric) are ``None`` (``null``), never the ``NaN``/``Infinity`` that ``json.dumps`` would
        write and JSON parsers reject."""
        doc = {
            "config": self.config,
            "rounds": self.rounds,
            "error": self.error,
            "error_type": self.error_type,
            "round_times": self.round_times.tolist(),
            "total_time": self.total_time,
            "final_loss": self.final_loss,
            "final_losses": self.final_losses,
            "losses": self.losses.tolist(),
            "final_params_checksum": self.final_params_checksum,
            "final_params_norm": self.final_params_norm,
            "arrivals": self.arrivals.tolist(),
            "messages": self.messages.tolist(),
            "injected": self.injected.tolist(),
            "waitouts": self.waitouts.tolist(),
            "waitout_rounds": self.waitout_rounds,
            "loose": self.loose.tolist(),
            "loose_rounds": self.loose_rounds,
            "overflows": self.overflows.tolist(),
            "total_overflows": self.total_overflows,
            "metrics": self.metrics,
            "failures": self.failures,
            "faults": len(self.faults),
            "run_dir": self.run_dir,
            "resumed_from": self.resumed_from,
            "clock": self.clock,
            "files": dict(self.files),
        }
        if params:
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
        self.files["params"] = str(run_dir / "params.npy")
        np.save(run_dir / "trace.npy", self.trace())
        text = json.dumps(self.to_json(), indent=1, allow_nan=False)
        atomic_write(run_dir / "result.json", text.encode())
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


def finite(a) -> bool:
    """Whether an array (or number) holds no NaN or infinity. One pass in the common case: a sum
    is finite only if every term is (NaN and infinities propagate); a non-finite sum (also finite
    values whose sum overflows) is settled by the exact test, two reductions, no temporary. A
    contiguous float32 or float64 array is summed as its squares in float64 by the compiled
    :func:`~gradcode.codes.messages.sum_squares` (half the time of numpy's float32 sum; a float32
    value's square never overflows float64, so for float32 a finite sum settles it outright)."""
    if isinstance(a, (Message, Note)):  # the worker's sum (its scale) is finite iff its terms are
        return a.finite
    a = np.asarray(a)
    if a.size == 0:
        return True
    if not np.issubdtype(a.dtype, np.inexact) and a.dtype.name != "bfloat16":  # ml_dtypes' bfloat16 too
        return True
    if a.dtype in (np.float32, np.float64) and a.flags.c_contiguous:
        if math.isfinite(sum_squares(a.reshape(-1))):
            return True
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            if np.isfinite(np.add.reduce(a, axis=None)):
                return True
    return bool(np.isfinite(a.min()) and np.isfinite(a.max()))


def _checksum(arrays: Sequence[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype="<f8").tobytes())
    return h.hexdigest()[:16]

# ----------------------------------------------------------------------------------------- state


@dataclass
class TrainState:
    """Everything a run carries from one round to the next, and what a checkpoint restores.

    ``next_round``: rounds completed. ``params[m]``, ``opt_states[m]``, ``steps[m]``: model
    ``m``'s parameters, optimizer state and optimizer steps taken. The per-round tables have one
    row per round of the run (``rounds`` rows, filled up to ``next_round``): ``round_times``,
    ``arrivals`` and ``injected`` (``(rounds, n)`` seconds, ``-1`` for a straggler),
    ``messages`` (``(rounds, n)`` counts), ``losses`` (``(rounds, models)``) and ``waitouts``
    (``rounds`` booleans), ``loose`` (``rounds`` relative bounds, NaN: within tolerance), ``overflows``
    (``rounds`` counts of float16 backward passes run again). ``metrics`` and
    ``failures`` are the records :class:`TrainResult` documents.
    """

    next_round: int
    params: list
    opt_states: list
    steps: list
    round_times: np.ndarray
    arrivals: np.ndarray
    messages: np.ndarray
    injected: np.ndarray
    losses: np.ndarray
    waitouts: np.ndarray
    loose: np.ndarray
    overflows: np.ndarray
    metrics: list = field(default_factory=list)
    failures: list = field(default_factory=list)

    #: the per-round tables and the value of a row not yet run
    TABLES = {"round_times": 0.0, "arrivals": -1.0, "messages": 0, "injected": 0.0, "losses": np.nan,
              "waitouts": False, "loose": np.nan, "overflows": 0}

    @classmethod
    def fresh(cls, params: list, optimizers: Sequence, *, rounds: int, n: int) -> TrainState:
        """The state before round 0: models at ``params``, optimizers initialised at them. The
        per-round tables are allocated for every round now: a run whose tables exceed this
        machine's memory is refused here, saying how many rounds fit."""
        models = len(params)
        per_round = 8 + n * (8 + 8 + 8) + models * 8 + 1 + 8 + 8  # ..., losses, waitouts, loose, overflows
        check_memory(f"rounds={rounds} (the per-round records of {n} workers, {per_round} bytes a round)",
                     float(rounds) * per_round)
        return cls(
            next_round=0,
            params=list(params),
            opt_states=[opt.init(p) for opt, p in zip(optimizers, params)],
            steps=[0] * models,
            round_times=np.zeros(rounds),
            arrivals=np.full((rounds, n), -1.0),
            messages=np.zeros((rounds, n), dtype=np.int64),
            injected=np.zeros((rounds, n)),
            losses=np.full((rounds, models), np.nan),
            waitouts=np.zeros(rounds, dtype=bool),
            loose=np.full(rounds, np.nan),
            overflows=np.zeros(rounds, dtype=np.int64),
        )

    @property
    def rounds(self) -> int:
        """Rounds the tables have room for."""
        return int(self.round_times.shape[0])

    def grow(self, rounds: int) -> None:
        """Extend the per-round tables to ``rounds`` rounds (a resumed run asked for more rounds
        than the checkpointed one); the added rows are as a fresh run's."""
        extra = rounds - self.rounds
        if extra <= 0:
            return
        for key, fill in self.TABLES.items():
            old = getattr(self, key)
            setattr(self, key, np.concatenate([old, np.full((extra,) + old.shape[1:], fill, dtype=old.dtype)]))

    def to_dict(self) -> dict:
        """The checkpoint's ``state``: a string-keyed dict (the format of every earlier version)."""
        return {
            "next_round": self.next_round, "params": self.params, "opt_states": self.opt_states,
            "steps": self.steps, "round_times": self.round_times, "arrivals": self.arrivals,
            "messages": self.messages, "injected": self.injected, "losses": self.losses,
            "waitouts": self.waitouts, "loose": self.loose, "overflows": self.overflows, "metrics": self.metrics,
            "failures": self.failures,
        }

    @classmethod
    def from_dict(cls, state: dict) -> TrainState:
        """Undo :meth:`to_dict` (also for checkpoints written before this class existed, before
        ``waitouts``: their rounds closed when decodable, so none was waited out, or before
        ``loose``: no round was recorded as accepted beyond its tolerance, or before ``overflows``:
        none was counted)."""
        rounds = np.shape(state["round_times"])[0]
        later = {key: state.get(key) for key in ("waitouts", "loose", "overflows")}
        for key, value in later.items():
            if value is None:
                later[key] = np.full(rounds, cls.TABLES[key], dtype=np.int64 if key == "overflows" else None)
        out = cls(**later, **{key: state[key] for key in (
            "next_round", "params", "opt_states", "steps", "round_times", "arrivals", "messages", "injected",
            "losses", "metrics", "failures")})
        out._check()
        return out

    def _check(self) -> None:
        """A restored state's tables agree with one another (rounds, workers, models), as
        :meth:`fresh` makes them; a :class:`CheckpointError` naming the first that does not."""
        def shape(key):
            value = getattr(self, key)
            if not isinstance(value, np.ndarray):
                raise CheckpointError(f"resume: the checkpoint's {key} is not an array")
            return value.shape

        models = len(self.params) if isinstance(self.params, list) else -1
        R = shape("round_times")[0] if len(shape("round_times")) == 1 else -1
        n = shape("arrivals")[1] if len(shape("arrivals")) == 2 else -1
        expected = {"round_times": (R,), "arrivals": (R, n), "messages": (R, n), "injected": (R, n),
                    "losses": (R, models), "waitouts": (R,), "loose": (R,), "overflows": (R,)}
        bad = [f"{k} {shape(k)}" for k, want in expected.items() if shape(k) != want or -1 in want]
        if models < 1 or not isinstance(self.opt_states, list) or len(self.opt_states) != models or \
                not isinstance(self.steps, list) or len(self.steps) != models:
            bad.append(f"{models} models' parameters, {len(self.opt_states)} optimizer states,"
                       f" {len(self.steps)} step counts")
        if not isinstance(self.next_round, (int, np.integer)) or not 0 <= self.next_round <= max(R, 0):
            bad.append(f"next_round {self.next_round!r} of {R} rounds")
        if bad:
            raise CheckpointError("resume: the checkpoint's state does not hold together (" + "; ".join(bad)
                                  + "): it is damaged or was edited")

    def result(self, config: dict, run_dir, resumed_from: int | None, *,
               error: BaseException | None = None, clock: dict | None = None) -> TrainResult:
        """The :class:`TrainResult` of the rounds completed so far (``next_round`` of them);
        ``clock``: what timed them (:meth:`~gradcode.runtime.base.Engine.clock_info`)."""
        k = int(self.next_round)
        return TrainResult(
            config=config,
            params=[np.asarray(p) for p in self.params],
            round_times=self.round_times[:k],
            arrivals=self.arrivals[:k],
            messages=self.messages[:k],
            injected=self.injected[:k],
            losses=self.losses[:k],
            waitouts=self.waitouts[:k],
            loose=self.loose[:k],
            overflows=self.overflows[:k],
            metrics=self.metrics,
            failures=self.failures,
            run_dir=None if run_dir is None else str(run_dir),
            resumed_from=resumed_from,
            error=None if error is None else (str(error) or type(error).__name__),
            error_type=None if error is None else type(error).__name__,
            clock=clock,
        )


# ----------------------------------------------------------------------------------------- round log

class RoundLog:
    """``run_dir/rounds.jsonl``: one strict-JSON line per completed round, appended and flushed as
    the run goes, so a driver that is killed (SIGKILL, OOM, a lost machine) still leaves every
    round it completed on disk: its time, arrivals, messages, injected times, losses, whether it was
    waited out, metrics,
    and the fault records (all of them, on the lines where they changed; the last such line has
    their final state). A resumed run keeps the lines of the rounds before its checkpoint and
    writes the later rounds again."""

    def __init__(self, path: Path, *, keep_before: int):
        kept = []
        if keep_before and path.is_file():
            for line in read_regular(path).decode(errors="replace").splitlines():
                try:
                    if json.loads(line)["round"] < keep_before:
                        kept.append(line + "\n")
                except (ValueError, KeyError, TypeError):  # a line cut by a crash
                    continue
        self.fh = open(path, "w")
        self.fh.writelines(kept)
        self.fh.flush()
        self.faults_seen = None

    def write(self, t: int, state: TrainState, record: dict, fault_version: int) -> None:
        """Append round ``t``'s line; the fault records go with it when they changed since the
        last line (``fault_version``: the driver's count of changes)."""
        doc = {
            "round": t,
            "time": record["time"],
            "elapsed": record["elapsed"],
            "arrivals": state.arrivals[t],
            "messages": state.messages[t],
            "injected": state.injected[t],
            "losses": state.losses[t],
            "waited_out": bool(state.waitouts[t]),
            "loose_decode": state.loose[t],
            "overflows": int(state.overflows[t]),
            "metrics": record.get("metrics", []),
        }
        if fault_version != self.faults_seen:
            doc["faults"] = state.failures
            self.faults_seen = fault_version
        self.fh.write(json.dumps(json_safe(doc), allow_nan=False) + "\n")
        self.fh.flush()

    def close(self) -> None:
        if not self.fh.closed:
            self.fh.close()


# ----------------------------------------------------------------------------------------- checkpoints

_CKPT_VERSION = 3
#: the checkpoint's file in a run folder (its arrays lie beside it, ``checkpoint-<digest>.npz``)
CHECKPOINT = "checkpoint.json"
#: what versions before 3 wrote: a pickle, never loaded now
OLD_CHECKPOINT = "checkpoint.pkl"


def plain(value):
    """``value`` as JSON-able built-ins (arrays as lists), so configs compare with ``==``."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist() if hasattr(v, "tolist") else repr(v)))


#: what a run leaves in its run_dir that a new run there would overwrite
RUN_FILES = (CHECKPOINT, OLD_CHECKPOINT, "result.json", "rounds.jsonl")


class RunDirInUseError(GradcodeError, ValueError):
    """``run_dir`` already holds a run and neither ``resume`` nor ``overwrite`` was asked."""


def save_checkpoint(path: Path, config: dict, state: TrainState, scheme, inflight: dict, *,
                    extra: dict | None = None) -> None:
    """Write the checkpoint (:func:`~gradcode.runtime.safe_state.write_document`: the arrays first,
    then ``path`` atomically, then the previous arrays removed). ``extra`` (the spec and run config,
    for :func:`~gradcode.runtime.resume`) is added to the document."""

    doc = {"version": _CKPT_VERSION, "config": config, "state": state.to_dict(), "scheme": scheme,
           "inflight": inflight, **(extra or {})}
    write_document(path, doc)


def read_checkpoint(path: Path, *, trust: bool = False) -> dict:
    """The checkpoint document at ``path`` (its ``state`` still a dict), or a clear error: no
    checkpoint (``FileNotFoundError``), a pickle of an earlier version, a damaged or foreign one
    (:class:`CheckpointError`, naming the file; ``trust``: one written with another key is read,
    :func:`~gradcode.runtime.safe_state.read_document`)."""

    path = Path(path)
    if not path.is_file():
        if path.with_name(OLD_CHECKPOINT).is_file():
            raise CheckpointError(
                f"resume: {path.with_name(OLD_CHECKPOINT)} is a checkpoint of gradcode before checkpoint version 3,"
                " a pickle, which this version does not load (loading a pickle can run any code it names);"
                " start the run again, or resume it with the gradcode version that wrote it"
            )
        raise FileNotFoundError(f"resume: no checkpoint at {path}; run with checkpoint_every > 0 first")
    saved = read_document(path, trust=trust)
    if not isinstance(saved, dict) or not {"config", "state", "scheme", "inflight"} <= set(saved):
        raise CheckpointError(f"resume: {path} is not a gradcode checkpoint (no config, state, scheme and"
                              " inflight); start the run again without --resume")
    if saved.get("version") != _CKPT_VERSION:
        raise CheckpointError(f"resume: {path} has checkpoint version {saved.get('version')}, expected"
                              f" {_CKPT_VERSION}")
    return saved


def check_checkpoint_config(saved: dict, config: dict, *, ignore: Iterable[str] = ()) -> None:
    """Refuse to resume with a ``config`` that is not the checkpoint's (but the ``ignore`` entries):
    a resumed run continues the same training, never another code or problem."""
    old = saved["config"]
    differ = sorted(k for k in set(old) | set(config) if k not in ignore and old.get(k) != config.get(k))
    if differ:
        detail = "; ".join(f"{k}: checkpoint {old.get(k)!r} vs now {config.get(k)!r}" for k in differ)
        raise ValueError(f"resume: the configuration differs from the checkpoint's ({detail})")
