"""Delay traces: read, validate, write and load-adjust ``(rounds, workers)`` arrays of seconds.

Formats (chosen by the file's extension):

* ``.npy``: a 2-D numeric array, ``delays[t, w]`` = seconds worker ``w`` took in round ``t``
  (read with ``allow_pickle=False``);
* ``.csv`` / ``.txt``: one round per line, one comma-separated number per worker; blank lines and
  lines starting with ``#`` are skipped, and a first line that is not numeric is taken as a header;
* ``.pkl`` / ``.pickle``: the delay profiles of the public SGC experiments (Krishnan et al., App. J):
  a list over rounds of dicts whose ``'results'`` list holds one dict per worker with
  ``'worker_id'``, ``'started'`` and ``'finished'``; delay = finished - started (numbers, or
  ``datetime`` objects). Worker ids may be any sortable values; columns follow their sorted order
  (integer ids ``0..W-1`` map to column ``id``). Such a file is unpickled with only the types a
  profile holds (containers, numbers, text, ``datetime``'s, numpy arrays: :class:`_ProfileUnpickler`),
  so a pickle that names anything else (a function to call, ``os.system``) is refused, never run.

Malformed input (a missing file, an unknown extension, ragged rows, text that is not a number,
negative or non-finite delays, a worker count other than ``workers``, a pickled round that lacks a
worker or lists one twice) raises :class:`gradcode.TraceError` (a ``ValueError``) whose message
starts with the file name and says what is wrong and where.

Load adjustment (SGC App. J): the mean run time of a worker grows linearly with its normalised
load (their Fig. 16), with slope ``alpha`` seconds per unit load. A reference profile recorded
uncoded (load ``1/n``) is turned into the profile of a scheme with load ``L`` by adding
``(L - 1/n) alpha`` seconds to every entry: :func:`adjust_trace_load`. :func:`fit_load_slope` is the
least-squares line through measured ``(load, mean time)`` pairs that gives ``alpha``.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import math
import numbers
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gradcode._validation import check_int, check_real, file_problem, read_regular
from gradcode.errors import TraceError, UnsafeFileError

__all__ = [
    "Reference",
    "adjust_profile",
    "adjust_trace_load",
    "as_profile",
    "fit_load_slope",
    "fit_profile_slope",
    "reference_profile",
    "load_trace",
    "save_trace",
    "validate_trace",
]

_NPY = (".npy",)
_CSV = (".csv", ".txt")
_PICKLE = (".pkl", ".pickle")


def _kind(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in _NPY:
        return "npy"
    if suffix in _CSV:
        return "csv"
    if suffix in _PICKLE:
        return "pickle"
    raise TraceError(
        f"{path}: unknown trace format {suffix or '(no extension)'!r};"
        " use .npy, .csv (or .txt) or an SGC pickle (.pkl/.pickle)"
    )


def validate_trace(
    delays, *, workers: int | None = None, source: str = "trace", stragglers: str = "censor"
) -> np.ndarray:
    """``delays`` as a float64 ``(rounds, workers)`` array, or :class:`TraceError` naming ``source``.

    Checks: 2-D, at least one round and one worker, numeric, finite, non-negative, and
    ``workers`` columns when ``workers`` is given.

    Arrival tables recorded by :func:`gradcode.simulate` and ``gradcode train`` mark a straggler
    with ``-1``: its time is unknown, but it had not arrived when the round closed. With
    ``stragglers="censor"`` (the default) each ``-1`` is replaced by that lower bound, the latest
    arrival of its round, so such a table replays as a trace (a round of nothing but ``-1`` is an
    error); ``stragglers="error"`` refuses them like any other negative entry."""
    if stragglers not in ("censor", "error"):
        raise ValueError(f"stragglers must be 'censor' or 'error', got {stragglers!r}")
    try:
        arr = np.asarray(delays, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TraceError(f"{source}: not a rectangular numeric array (ragged rows or non-numbers): {exc}") from None
    if arr.ndim != 2:
        raise TraceError(f"{source}: a trace must be a 2-D (rounds, workers) array, got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise TraceError(f"{source}: the trace is empty (shape {arr.shape})")
    bad = ~np.isfinite(arr)
    if bad.any():
        t, w = map(int, np.argwhere(bad)[0])
        raise TraceError(f"{source}: non-finite delay {arr[t, w]} in round {t}, worker {w}"
                         f" ({int(bad.sum())} non-finite entries)")
    if stragglers == "censor" and (arr == -1).any():
        marked = arr == -1
        arrived = np.where(marked, -np.inf, arr).max(axis=1)
        if not np.isfinite(arrived).all():
            t = int(np.flatnonzero(~np.isfinite(arrived))[0])
            raise TraceError(f"{source}: round {t} has no arrival at all (every entry is -1, a straggler)")
        arr = np.where(marked, arrived[:, None], arr)
    neg = arr < 0
    if neg.any():
        t, w = map(int, np.argwhere(neg)[0])
        raise TraceError(f"{source}: negative delay {arr[t, w]} in round {t}, worker {w}"
                         f" ({int(neg.sum())} negative entries)")
    if workers is not None:
        workers = check_int("workers", workers, minimum=1)
        if arr.shape[1] != workers:
            raise TraceError(f"{source}: the trace has {arr.shape[1]} workers, expected workers={workers}")
    return arr


def load_trace(path, *, workers: int | None = None, stragglers: str = "censor") -> np.ndarray:
    """Read a ``(rounds, workers)`` float64 array of seconds from ``path`` (.npy, .csv or an SGC
    pickle; see the module docstring). ``workers``, when given, is the number of workers the trace
    must have; ``stragglers`` says what ``-1`` entries of a recorded arrival table (.npy or .csv)
    become (see :func:`validate_trace`). Raises :class:`gradcode.TraceError` naming the file and the problem."""
    if workers is not None:
        workers = check_int("workers", workers, minimum=1)
    path = Path(path)
    kind = _kind(path)
    problem = file_problem(path)
    if problem is not None:
        raise TraceError(f"{path}: no such trace file" if problem == "no such file" else f"{path}: {problem}")
    try:
        content = read_regular(path)
    except (OSError, UnsafeFileError) as exc:
        raise TraceError(f"{path}: cannot read ({exc})") from None
    if kind == "npy":
        if content[:6] != b"\x93NUMPY":
            raise TraceError(f"{path}: cannot read as .npy (no NumPy file header)")
        try:
            raw = np.load(io.BytesIO(content), allow_pickle=False)
        except ValueError as exc:
            raise TraceError(f"{path}: not a numeric .npy array ({exc})") from None
        except (OSError, EOFError) as exc:
            raise TraceError(f"{path}: cannot read as .npy ({exc})") from None
        if not (np.issubdtype(raw.dtype, np.number) or raw.dtype == bool):
            raise TraceError(f"{path}: the array holds {raw.dtype}, not numbers")
        return validate_trace(raw, workers=workers, source=str(path), stragglers=stragglers)
    if kind == "csv":
        return validate_trace(_read_csv(path, content), workers=workers, source=str(path), stragglers=stragglers)
    # an SGC profile holds measured started/finished pairs: a negative delay there is bad data
    return validate_trace(_read_pickle(path, content, workers), workers=workers, source=str(path),
                          stragglers="error")


def _read_csv(path: Path, content: bytes) -> np.ndarray:
    try:
        text = content.decode()
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: cannot read ({exc})") from None
    rows: list[list[float]] = []
    width = None
    first = True
    for lineno, fields in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not fields or all(not f.strip() for f in fields) or fields[0].lstrip().startswith("#"):
            continue
        try:
            values = [float(f) for f in fields]
        except ValueError:
            # a header names every column: a first line with numbers in it is a broken row, not a header
            if first and not any(_is_float(f) for f in fields):
                first = False
                width = len(fields)
                continue
            bad = next(f for f in fields if not _is_float(f))
            raise TraceError(f"{path}: line {lineno}: {bad.strip()!r} is not a number") from None
        first = False
        if width is None:
            width = len(values)
        elif len(values) != width:
            raise TraceError(
                f"{path}: ragged rows: line {lineno} has {len(values)} values, earlier rows (or the header)"
                f" have {width}"
            )
        rows.append(values)
    if not rows:
        raise TraceError(f"{path}: no rows of numbers")
    return np.array(rows, dtype=np.float64)


def _is_float(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _seconds(value, where: str, path: Path) -> float:
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    raise TraceError(f"{path}: {where}: expected a number of seconds, got {value!r}")


class _ProfileUnpickler(pickle.Unpickler):
    """Unpickles only what a delay profile holds: the builtin containers, numbers and text,
    ``datetime``'s values and numpy arrays (their reconstruction functions and dtypes); any other
    global a pickle names (a function it would call on load) is refused (module docstring)."""

    ALLOWED = {
        "builtins": {"dict", "list", "tuple", "set", "frozenset", "str", "bytes", "int", "float", "bool",
                     "complex"},
        "datetime": {"datetime", "date", "time", "timedelta", "timezone"},
        "numpy": {"ndarray", "dtype"},
        "numpy.core.multiarray": {"_reconstruct", "scalar"},
        "numpy._core.multiarray": {"_reconstruct", "scalar"},
        "numpy.core.numeric": {"_frombuffer"},
        "numpy._core.numeric": {"_frombuffer"},
    }

    def find_class(self, module: str, name: str):
        if name in self.ALLOWED.get(module, ()) or (module == "numpy" and name.endswith("DType")) \
                or (module == "numpy.dtypes" and name.endswith("DType")):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}, which a delay profile does not hold (only"
                                     " containers, numbers, text, datetimes and numpy arrays are read)")


def _read_pickle(path: Path, content: bytes, workers: int | None) -> np.ndarray:
    try:
        profile = _ProfileUnpickler(io.BytesIO(content)).load()
    except Exception as exc:  # unpickling can raise nearly anything
        raise TraceError(f"{path}: cannot unpickle ({type(exc).__name__}: {exc})") from None
    if isinstance(profile, np.ndarray) and profile.dtype != object:
        return profile
    if not isinstance(profile, (list, tuple)):
        raise TraceError(f"{path}: expected a list over rounds of dicts with 'results', got {type(profile).__name__}")
    if not profile:
        raise TraceError(f"{path}: the profile lists no rounds")
    per_round: list[dict] = []
    for t, rnd in enumerate(profile):
        if not isinstance(rnd, dict) or "results" not in rnd:
            raise TraceError(f"{path}: round {t}: expected a dict with a 'results' list, got {type(rnd).__name__}"
                             + (f" with keys {sorted(map(str, rnd))}" if isinstance(rnd, dict) else ""))
        results = rnd["results"]
        if not isinstance(results, (list, tuple)):
            raise TraceError(f"{path}: round {t}: 'results' must be a list, got {type(results).__name__}")
        delays: dict = {}
        for i, res in enumerate(results):
            if not isinstance(res, dict):
                raise TraceError(f"{path}: round {t}, result {i}: expected a dict, got {type(res).__name__}")
            missing = [k for k in ("worker_id", "started", "finished") if k not in res]
            if missing:
                raise TraceError(f"{path}: round {t}, result {i}: missing key(s) {', '.join(missing)}")
            w = res["worker_id"]
            try:
                hash(w)
            except TypeError:
                raise TraceError(f"{path}: round {t}, result {i}: unhashable worker_id {w!r}") from None
            if w in delays:
                raise TraceError(f"{path}: round {t}: worker {w!r} is listed twice")
            started = res["started"]
            finished = res["finished"]
            where = f"round {t}, worker {w!r}"
            if isinstance(started, _dt.datetime) and isinstance(finished, _dt.datetime):
                delays[w] = (finished - started).total_seconds()
            else:
                delays[w] = _seconds(finished, where + " 'finished'", path) - _seconds(started, where + " 'started'", path)
        per_round.append(delays)
    ids = set().union(*per_round)
    try:
        order = sorted(ids)
    except TypeError:
        raise TraceError(f"{path}: worker ids of mixed, unsortable types: {sorted(map(repr, ids))}") from None
    int_ids = all(isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in order)
    if workers is not None and int_ids:
        out_of_range = [w for w in order if not 0 <= w < workers]
        if out_of_range:
            raise TraceError(f"{path}: worker ids {out_of_range[:5]} are outside 0..{workers - 1} (workers={workers})")
        order = list(range(workers))
    elif int_ids and order and order[0] >= 0:
        order = list(range(order[-1] + 1))  # ids 0..max: a worker absent from every round is still missing
    column = {w: c for c, w in enumerate(order)}
    arr = np.empty((len(per_round), len(order)))
    for t, delays in enumerate(per_round):
        absent = [w for w in order if w not in delays]
        if absent:
            shown = ", ".join(map(repr, absent[:8])) + (" ..." if len(absent) > 8 else "")
            raise TraceError(f"{path}: round {t} has no result for worker(s) {shown}"
                             f" ({len(delays)} of {len(order)} workers present)")
        for w, v in delays.items():
            arr[t, column[w]] = v
    return arr


def save_trace(path, delays, *, overwrite: bool = True) -> Path:
    """Write a ``(rounds, workers)`` array of seconds to ``path`` (.npy, .csv/.txt, or the SGC
    pickle format with round ``t`` starting at the sum of the slowest times of the rounds before
    it). The array is validated first (:class:`TraceError` on bad input). Returns the path."""
    path = Path(path)
    kind = _kind(path)
    arr = validate_trace(delays, source=str(path))
    if path.exists() and not overwrite:
        raise TraceError(f"{path}: exists (pass overwrite=True to replace it)")
    if kind == "npy":
        with path.open("wb") as fh:  # np.save on a path would append .npy to other suffixes
            np.save(fh, arr, allow_pickle=False)
    elif kind == "csv":
        with path.open("w", newline="") as fh:
            fh.write(f"# gradcode trace: {arr.shape[0]} rounds x {arr.shape[1]} workers, seconds\n")
            writer = csv.writer(fh)
            for row in arr:
                writer.writerow([repr(float(v)) for v in row])
    else:
        profile = []
        start = 0.0
        for t, row in enumerate(arr):
            profile.append({
                "round": t,
                "results": [{"worker_id": w, "started": start, "finished": start + float(v)}
                            for w, v in enumerate(row)],
            })
            start += float(row.max())
        with path.open("wb") as fh:
            pickle.dump(profile, fh)
    return path


def adjust_trace_load(delays, *, from_load: float, to_load: float, slope: float) -> np.ndarray:
    """SGC App. J load adjustment: ``delays + (to_load - from_load) * slope``, clipped at 0.

    ``slope`` is seconds per unit of normalised load (the slope alpha of the linear fit of average
    run time against load, their Fig. 16); ``from_load`` is the load the trace was recorded at
    (``1/n`` for the uncoded reference profile) and ``to_load`` the load of the scheme to simulate.
    """
    arr = validate_trace(delays, source="delays")
    from_load = check_real("from_load", from_load, minimum=0.0)
    to_load = check_real("to_load", to_load, minimum=0.0)
    slope = check_real("slope", slope)
    out = arr + (to_load - from_load) * slope
    np.maximum(out, 0.0, out=out)
    return out


@dataclass(frozen=True)
class LoadFit:
    """A least-squares line ``time = intercept + slope * load`` (SGC App. J, Fig. 16): ``slope``
    in seconds per unit of normalised load (the paper's alpha), ``intercept`` in seconds, ``r2``
    the share of the means' variance it explains (NaN when they do not vary), through the
    ``means`` observed at ``loads``."""

    slope: float
    intercept: float
    r2: float
    loads: tuple
    means: tuple

    def line(self) -> str:
        r2 = "exact line through 2 loads" if len(self.loads) == 2 else f"R^2 = {self.r2:.4f}"
        return (f"alpha = {self.slope:.4g} s per unit load (intercept {self.intercept:.4g} s, {r2}, loads"
                f" {min(self.loads):.4g} to {max(self.loads):.4g})")

    def to_dict(self) -> dict:
        return {"slope": self.slope, "intercept": self.intercept, "r2": self.r2, "loads": list(self.loads),
                "means": list(self.means)}


def fit_load_line(loads, times) -> LoadFit:
    """:class:`LoadFit` through measured pairs (SGC App. J, Fig. 16). ``times`` may be
    ``(len(loads),)`` means or ``(len(loads), samples)`` raw run times (fitted to their row means)."""
    x = np.asarray(loads, dtype=np.float64)
    y = np.asarray(times, dtype=np.float64)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"loads must be a 1-D array of at least 2 loads, got shape {x.shape}")
    if y.ndim == 2:
        y = y.mean(axis=1)
    if y.shape != x.shape:
        raise ValueError(f"times must have one entry (or row) per load: {x.size}; got shape {np.shape(times)}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("loads and times must be finite")
    if np.ptp(x) == 0:
        raise ValueError("loads must not all be equal (the slope is undetermined)")
    slope, intercept = np.polynomial.polynomial.polyfit(x, y, 1)[::-1]
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - intercept - slope * x) ** 2).sum()) / total if total > 0 else math.nan
    return LoadFit(float(slope), float(intercept), r2, tuple(x.tolist()), tuple(y.tolist()))


def fit_load_slope(loads, times) -> tuple[float, float]:
    """``(slope, intercept)`` of :func:`fit_load_line`."""
    fit = fit_load_line(loads, times)
    return fit.slope, fit.intercept


def fit_model_slope(model, *, n: int, rounds: int, loads=None, seed: int = 0) -> LoadFit:
    """App. J's fit (Fig. 16: the average run time of the workers against their load) on a delay
    model: one draw of ``rounds`` rounds for ``n`` workers (the simulator's convention), its mean
    worker time at each of ``loads`` (default ``1/n``, 0.25, 0.5, 0.75, 1: the uncoded load to
    the whole data set), fitted by :func:`fit_load_line`. A model's message time does not depend on
    the load: it is in the intercept. ``model``: a delay model (:func:`make_delay_model`'s)."""
    if not hasattr(model, "draw"):
        raise TypeError(f"model must be a delay model (make_delay_model), got {type(model).__name__}")
    n = check_int("n", n, minimum=1)
    rounds = check_int("rounds", rounds, minimum=1)
    draw = model.draw(rounds, n, np.random.default_rng(seed))
    return fit_draw_slope(draw, comm=float(model.message_time(1.0)), loads=loads)


def fit_draw_slope(draw, *, comm: float = 0.0, loads=None) -> LoadFit:
    """:func:`fit_model_slope` on a draw already made (``comm``: the message time added to each)."""
    n = draw.shape[1]
    loads = np.asarray([1.0 / n, 0.25, 0.5, 0.75, 1.0] if loads is None else loads, dtype=np.float64)
    return fit_load_line(loads, [float(draw.times(load).mean()) + comm for load in loads])


# --------------------------------------------------------------------------- reference profiles (SGC App. J)


def as_profile(p, name="profile") -> np.ndarray:
    """A delay profile (``(rounds, workers)`` seconds) as a float64 array, checked as every trace
    is (:func:`validate_trace`; an array already checked passes at the cost of one scan)."""
    return validate_trace(p, source=name, stragglers="error")


def fit_profile_slope(profiles, loads) -> tuple[float, float]:
    """Least-squares line ``mean delay = a + alpha * load`` through profiles measured at ``loads``
    (App. J, Fig. 16; :func:`fit_load_slope` on the profiles' means).
    Returns ``(alpha, a)``; warns when ``alpha < 0`` (the load adjustment would then make a
    heavier scheme faster)."""
    profs = [as_profile(p, f"profiles[{i}]") for i, p in enumerate(profiles)]
    loads = np.asarray(loads, dtype=np.float64)
    if loads.shape != (len(profs),):
        raise ValueError(f"loads must give one load per profile ({len(profs)}), got shape {loads.shape}")
    alpha, a = fit_load_slope(loads, np.array([p.mean() for p in profs]))
    if alpha < 0:
        warnings.warn(
            f"the fitted load slope alpha = {alpha:.4g} s per unit load is negative: the load"
            " adjustment would make a heavier scheme faster; check the profiles", RuntimeWarning, stacklevel=2)
    return float(alpha), float(a)


def adjust_profile(profile, load: float, *, reference_load: float, alpha: float) -> np.ndarray:
    """The load-adjusted profile of App. J, ``profile + (load - reference_load) * alpha``, clipped
    at 0: :func:`adjust_trace_load`, the one rule (``tune``'s replay clips the same way)."""
    return adjust_trace_load(profile, from_load=reference_load, to_load=load, slope=alpha)


@dataclass(frozen=True)
class Reference:
    """The profile a replay uses and how it is load-adjusted (App. J): ``profile`` (the one at
    the smallest load, ``index`` in the list given), recorded at ``load``; ``alpha`` the load
    slope (given, or ``fitted`` from the profiles); ``notes`` what was fitted."""

    profile: np.ndarray
    index: int
    load: float
    alpha: float
    fitted: bool
    notes: tuple = ()


def reference_profile(profiles, *, loads=None, alpha: float | None = None) -> Reference:
    """Pick the reference profile and the load slope from one profile or several measured at
    ``loads`` (App. J), as :func:`tune` and ``gradcode simulate/compare --trace F --trace-load L
    ...`` do. ``profiles``: a ``(rounds, n)`` array of seconds or a list of them (same ``n``);
    ``loads``: one per profile (default ``[1/n]`` for a single profile: the paper's uncoded
    reference); ``alpha``: the slope, or ``None`` to fit it (:func:`fit_profile_slope`: needs two or
    more loads; warns when it is negative, as does a negative ``alpha`` given). The profile at the
    smallest load is the one replayed."""
    if isinstance(profiles, np.ndarray) or (isinstance(profiles, (list, tuple)) and profiles
                                            and np.ndim(profiles[0]) == 1):
        profs = [as_profile(profiles)]
    else:
        profs = [as_profile(p, f"profiles[{i}]") for i, p in enumerate(profiles)]
    if not profs:
        raise ValueError("a replay needs at least one delay profile")
    n = profs[0].shape[1]
    if any(p.shape[1] != n for p in profs):
        raise ValueError(f"every profile must have the same number of workers; got {[p.shape[1] for p in profs]}")
    if loads is None:
        if len(profs) > 1:
            raise ValueError("several profiles need their loads (loads=[...], one per profile)")
        loads = [1.0 / n]
    loads = np.asarray(loads, dtype=np.float64)
    if loads.shape != (len(profs),):
        raise ValueError(f"loads must give one load per profile ({len(profs)}), got {loads.tolist()}")
    if not (np.isfinite(loads).all() and (loads >= 0).all()):
        raise ValueError(f"loads must be finite and >= 0, got {loads.tolist()}")
    notes = []
    fitted = alpha is None
    if fitted:
        if len(profs) < 2:
            raise ValueError(
                "the load slope alpha is needed to adjust the profile to each scheme's load: give it (alpha=,"
                " --load-slope; seconds per unit load) or profiles measured at two or more loads")
        alpha, _ = fit_profile_slope(profs, loads)
        notes.append(f"alpha fitted from {len(profs)} profiles: {alpha:.6g} s per unit load")
    else:
        alpha = check_real("alpha", alpha)
        if alpha < 0:
            warnings.warn(f"alpha = {alpha} is negative: a heavier scheme would look faster", RuntimeWarning,
                          stacklevel=2)
    ref = int(np.argmin(loads))
    return Reference(profs[ref], ref, float(loads[ref]), float(alpha), fitted, tuple(notes))
