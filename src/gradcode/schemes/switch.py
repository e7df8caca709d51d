"""Start uncoded, measure the workers, switch to the best scheme (SGC App. K, Fig. 18).

:class:`ProbeThenSwitch` runs ``probe`` rounds uncoded (job ``t`` in round ``t``, every worker one
partition), collecting each round's measured worker times from the driver
(:meth:`~gradcode.schemes.Scheme.observe_times`). After the last probe round it turns them into a
delay profile and searches GC, SR-SGC and M-SGC parameters for the jobs left with the paper's
procedure (:func:`choose_after_probe`: App. J's replay of the load-adjusted profile through the
master's rule, :func:`gradcode.schemes.sgc.tune.tune`), then runs the winner from the next round
on: its round ``u`` is round ``probe + u``, its job ``u`` is job ``probe + u``. No job is lost (the
uncoded jobs finish in their own rounds) and the workers are not restarted: the scheme's
partitions change, so tasks carry the layout (``changes_layout``) and the workers hold the whole
data set (only :mod:`gradcode.torch` problems do).

The profile: ``times[t, w]`` seconds after round ``t`` started at which worker ``w`` delivered its
result (a worker that did not, a dead one, gets the round's slowest time). The load slope
``alpha`` (seconds per unit of load, App. J) cannot be fitted from one load: unless given it is
estimated as ``n`` times the median over probe rounds of the fastest worker's time, i.e. the
fastest worker's time is taken as all computation at the uncoded load ``1/n`` (an upper bound on
the slope when part of it is communication, which favours lighter schemes). :class:`ProbeThenSwitch`
splits what it knows: the slope of the delays it injects (App. J's fit on them, given by its
trainer) plus ``n`` times the fastest worker's *own* time (its arrival less its injected delay),
so delays that do not grow with the load are not mistaken for computation. The probe is tiled to
cover the jobs left (its behaviour is assumed to repeat). The closing rule of the search is the
run's: ``"decodable"`` is the replay with ``mu = 0`` and the decodable wait-out (the round ends
as soon as the pattern conforms), a number ``mu`` the paper's rule with the run's wait-out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from gradcode._validation import check_int, check_real
from gradcode.schemes.base import Scheme

__all__ = ["ProbeThenSwitch", "SlopeSource", "choose_after_probe", "set_decode_rtol"]


def set_decode_rtol(scheme, rtol: float | None, *, strict: bool = False) -> None:
    """Set ``decode_rtol`` and ``decode_strict`` on the codes ``scheme`` decodes with (a static
    code, GC-DC's clusters' code, the sequential codes' base code): the tolerance of their
    decodes' error bound, and whether a decode beyond it (no worse than a plain sum) or with an
    estimated bound is refused (:func:`~gradcode.codes.precision.accept_bound`)."""
    from gradcode.codes import LinearCode

    stack, seen = [scheme], set()
    while stack:
        obj = stack.pop()
        for name in ("code", "gc"):
            sub = getattr(obj, name, None)
            if isinstance(sub, LinearCode):
                sub.decode_rtol = rtol
                sub.decode_strict = bool(strict)
            elif sub is not None and id(sub) not in seen:
                seen.add(id(sub))
                stack.append(sub)


def choose_after_probe(times: np.ndarray, *, jobs: int, models: int = 1, close="decodable",
                       waitout: str = "decodable", load_slope: float | None = None, seed: int = 0,
                       max_w: int | None = None, families=None, load_slope_from: str = "given"
                       ) -> tuple[Scheme, dict]:
    """The scheme to switch to for ``jobs`` more jobs after a probe that measured ``times`` (``(T,
    n)`` seconds, module docstring), and the report: ``chosen`` (family and parameters),
    ``candidates`` (the best of each family with their predicted totals), ``alpha``,
    ``search_seconds``. The sequential codes are searched only when ``models`` exceeds their delay
    ``T`` (a model's next job must not start before its last one finished), over every ``W`` (up to
    ``max_w``, default the jobs); ``load_slope_from``: where a given ``load_slope`` comes from
    (the report's ``alpha_from``); ``families``: the
    families searched (default ``uncoded``, ``crc`` and, with several models, ``sr-sgc``,
    ``m-sgc``)."""
    from gradcode.schemes.factory import make_scheme
    from gradcode.schemes.sgc.tune import family_names, tune

    started = time.perf_counter()
    X = np.asarray(times, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1:
        raise ValueError(f"times must be a (probe rounds, n) array, got shape {X.shape}")
    n = X.shape[1]
    jobs = check_int("jobs", jobs, minimum=1)
    models = check_int("models", models, minimum=1)
    if load_slope is None:
        alpha = float(n * np.median(X.min(axis=1)))
        alpha_from = ("estimated: n x the median fastest worker time of the probe (an upper bound when part of"
                      " that time does not grow with the load)")
    else:
        alpha = check_real("load_slope", load_slope, minimum=0.0)
        alpha_from = str(load_slope_from)
    mu, rule = (0.0, "decodable") if close == "decodable" else (float(close), waitout)
    if families is None:
        families = ("uncoded", "crc") + (("sr-sgc", "m-sgc") if models > 1 else ())
    families = family_names(families)
    if models == 1 and not {"uncoded", "crc"} & set(families):
        raise ValueError(f"no parameter set of {', '.join(families)} fits {models} model(s): the sequential codes"
                         " need more models than their delay T")
    # the probe, repeated over the jobs left and the delays T < models the sequential codes may have
    profile = np.resize(X, (jobs + models - 1, n))
    result = tune(profile, jobs=jobs, load_slope=alpha, mu=mu, waitout=rule, families=families, max_w=max_w,
                  max_delay=models - 1, within=0.0)  # the best of each family is all the switch needs
    best = result.candidates[0]
    if best.scheme == "uncoded" or (best.scheme == "crc" and best.params["s"] == 0):  # crc with s = 0 is uncoded
        scheme = make_scheme("uncoded", n=n)
    else:
        scheme = make_scheme(best.scheme, n=n, seed=seed, **best.params)
    report = {
        "chosen": {"family": best.scheme, "params": dict(best.params), "scheme": repr(scheme),
                   "predicted_total": best.time, "load": best.load},
        "candidates": [c.to_dict() for c in sorted(result.best.values(), key=lambda c: (c.time, c.load))],
        "alpha": alpha, "alpha_from": alpha_from, "probe_rounds": int(X.shape[0]), "jobs": jobs,
        "rule": {"mu": mu, "waitout": rule}, "search_seconds": time.perf_counter() - started,
    }
    return scheme, report


@dataclass(frozen=True)
class SlopeSource:
    """Where the search's load slope (SGC App. J's alpha) comes from: ``given`` seconds per unit
    load, when known; else ``injected`` (the slope of the delays the run injects, fitted as App. J
    does, described by ``injected_from``) plus ``n`` times the median over probe rounds of the
    fastest worker's own time."""

    given: float | None = None
    injected: float = 0.0
    injected_from: str = "no delays injected"

    def __post_init__(self):
        if self.given is not None:
            object.__setattr__(self, "given", check_real("load_slope", self.given, minimum=0.0))
        object.__setattr__(self, "injected", check_real("injected slope", self.injected, minimum=0.0))


class ProbeThenSwitch(Scheme):
    """Uncoded for ``probe`` rounds, then the scheme :func:`choose_after_probe` picks from the
    measured times (module docstring). ``rounds``: the run's rounds (the jobs left are ``rounds -
    probe``, one a round); ``models``, ``close``, ``waitout``, ``seed``, ``families``: as
    :func:`choose_after_probe` (which searches every ``W`` up to the jobs left); ``decode_rtol``,
    ``decode_strict``: set on the chosen scheme's codes; ``slope``: the search's load slope, given or estimated
    (:class:`SlopeSource`; module docstring). ``report`` holds the choice once made."""

    changes_layout = True
    label = "auto"
    decode_strict = False  # (a class default: schemes checkpointed before the option read False)

    def __init__(self, n: int, probe: int, rounds: int, *, models: int = 1, close="decodable",
                 waitout: str = "decodable", seed: int = 0, decode_rtol: float | None = None, families=None,
                 slope: SlopeSource = SlopeSource(), decode_strict: bool = False):
        from gradcode.codes import make_code
        from gradcode.schemes.static import StaticScheme

        self.n = check_int("n", n, minimum=2)
        self.probe = check_int("probe", probe, minimum=1)
        self.rounds = check_int("rounds", rounds, minimum=self.probe + 1)
        self.first = StaticScheme(make_code("uncoded", n=self.n))
        self.second: Scheme | None = None
        if families is not None:
            from gradcode.schemes.sgc.tune import FAMILIES, family_names

            families = tuple(families)
            if not families or any(f not in FAMILIES for f in families):
                raise ValueError(f"families must name some of {', '.join(FAMILIES)}; got {families!r}")
            families = family_names(families)
            if models < 2 and not set(families) & {"uncoded", "crc"}:
                raise ValueError(f"families {families!r} are sequential codes, whose jobs span rounds: they need"
                                 " models >= 2 (pipelined models), or add 'crc'")
        self._options = dict(models=models, close=close, waitout=waitout, seed=seed, families=families)
        if not isinstance(slope, SlopeSource):
            raise TypeError(f"slope must be a SlopeSource, got {type(slope).__name__}")
        self.slope = slope
        self._times = np.zeros((self.probe, self.n))
        self._own = np.full((self.probe, self.n), np.nan)  # each worker's time less its injected delay
        self.decode_rtol, self.decode_strict = decode_rtol, bool(decode_strict)
        self.report: dict | None = None
        self.chunks = 1

    def __repr__(self) -> str:
        return f"ProbeThenSwitch(probe={self.probe}, then {self.second!r})"

    # which scheme a round belongs to, and its own round and job numbers
    def _at(self, t: int) -> tuple[Scheme, int]:
        if t < self.probe:
            return self.first, t
        if self.second is None:
            raise RuntimeError(f"round {t}: the probe's {self.probe} rounds have not all been observed yet")
        return self.second, t - self.probe

    @property
    def current(self) -> Scheme:
        return self.second if self.second is not None else self.first

    @property
    def delay(self) -> int:
        return self.current.delay

    @property
    def partition_sizes(self) -> np.ndarray:
        return self.current.partition_sizes

    @property
    def load(self):
        return self.current.load

    def stored_partitions(self, worker: int) -> tuple[int, ...]:
        return self.first.stored_partitions(worker)

    def observe_times(self, t: int, times, injected=None) -> None:
        if t < self.probe:
            row = np.asarray(times, dtype=np.float64).copy()
            late = row < 0
            own = row - (0.0 if injected is None else np.asarray(injected, dtype=np.float64))
            self._own[t] = np.where(late, np.nan, np.maximum(own, 0.0))
            if late.all():
                row[:] = 0.0
            elif late.any():
                row[late] = row[~late].max()  # at least the round's slowest time
            self._times[t] = row
            if t == self.probe - 1 and self.second is None:
                slope, source = self._load_slope()
                self.second, self.report = choose_after_probe(self._times, jobs=self.rounds - self.probe,
                                                              load_slope=slope, load_slope_from=source,
                                                              **self._options)
                set_decode_rtol(self.second, self.decode_rtol, strict=self.decode_strict)

    def _load_slope(self) -> tuple[float, str]:
        """The search's load slope and where it comes from (class docstring)."""
        if self.slope.given is not None:
            return self.slope.given, "given"
        fastest = np.nanmin(np.where(np.isnan(self._own).all(axis=1, keepdims=True), 0.0, self._own), axis=1)
        own = float(self.n * np.median(fastest))
        return self.slope.injected + own, (
            f"{self.slope.injected_from}: {self.slope.injected:.4g}, plus n x the fastest worker's own time in the"
            f" probe (its arrival less its injected delay: an upper bound of the computation's slope): {own:.4g}")

    def round_stragglers(self, counts, planned) -> np.ndarray:
        return self.current.round_stragglers(counts, planned)

    def _plan(self, t: int):
        scheme, u = self._at(t)
        plan = scheme.plan(u)
        if scheme is self.first:
            return plan
        return {w: tuple(replace(task, job=task.job + self.probe) for task in tasks) for w, tasks in plan.items()}

    def _on_result(self, t, worker, index, payload, at):
        scheme, u = self._at(t)
        scheme.on_result(u, worker, index, payload, at)

    def _ready(self, t: int) -> bool:
        scheme, u = self._at(t)
        return scheme.ready(u)

    def _close(self, t: int, arrived):
        scheme, u = self._at(t)
        out = scheme.close(u, arrived)
        return out if scheme is self.first else [(job + self.probe, g) for job, g in out]

    def _observe_states(self, t: int, straggling, rates) -> None:
        scheme, u = self._at(t)
        scheme.observe_states(u, straggling, rates)

    @property
    def straggler_history(self) -> np.ndarray:
        parts = [self.first.stragglers]
        if self.second is not None:
            parts.append(self.second.stragglers)
        out = np.concatenate(parts) if len(parts) > 1 else parts[0].copy()
        out.flags.writeable = False
        return out
