"""Parameter selection for GC, SR-SGC and M-SGC from a delay profile (SGC App. J, J.1, K.2).

The paper's procedure (App. J): measure a *reference delay profile* (seconds per round and
worker, ``(rounds, n)``) with no coding, i.e. at load ``1/n``; fit the slope ``alpha`` of the mean
worker time against the load from profiles measured at several loads (Fig. 16: linear); estimate
every parameter set's run time by replaying the *load-adjusted* profile ``D + (L - L_0) alpha``
(the paper *adds* ``(L - 1/n) alpha`` seconds) through the master's rule, and keep the fastest of
each family (Table 1, Fig. 17).

Replay rule (Sec. 2 and App. J), per round, on the load-adjusted times ``x``: with ``kappa =
min x`` the master waits until ``(1 + mu) kappa`` (or until every worker is in, if sooner); the
workers not in are the round's stragglers. If that leaves the round *unresolved* (the effective
straggler pattern would not conform to the scheme's model, :mod:`.common`), the master waits:

* ``waitout="all"`` (the paper's: "it will wait out all the workers"): the round lasts
  ``max x`` and has no stragglers;
* ``waitout="decodable"`` (gradcode's simulator rule): the round lasts until the pattern
  conforms, i.e. until all but the ``k`` slowest workers are in, for the largest such ``k``.

A round of a family resolves when: ``uncoded`` never (it always waits for all ``n``); ``crc``
(``(n, s)``-GC, Tandon's cyclic repetition code) with at most ``s`` stragglers; SR-SGC / M-SGC when the effective pattern conforms on
every live track (windows of ``W`` rounds bursty or at most ``s`` stragglers per round; each job's
span ``[u, u + T]`` bursty or ``(B, W + B - 1, lambda)``-arbitrary). By Props. 3.1 / 3.2 the due
jobs then decode, so the replay tracks only the pattern, not the jobs. ``J`` jobs take ``J + T``
rounds (Sec. 2), every one timed, except SR-SGC's final rounds with nothing left to compute:
round ``t >= J`` has no job ``t``, only Algorithm 1's re-attempts of job ``t - B``, and none when
job ``t - B`` got its ``n - s`` results in round ``t - B``; such a round costs 0 (:mod:`.replay`).
M-SGC's final rounds always hold the last jobs' remaining mini-tasks and are timed. Every
family, ``uncoded`` included, is replayed at its own load: the profile plus
``(L - L_0) alpha``.

Speed: GC is vectorized over rounds and ``s``; SR-SGC and M-SGC are replayed one parameter set at
a time by a compiled replay that checks only the oldest live track, in ``O(stragglers)`` a round
whatever ``W``, and bounds the search: sets are replayed in increasing order of a lower bound on
their total, and a replay stops once it cannot come within ``within`` of the best so far
(:mod:`.replay`, exact: the best and every set listed are the exhaustive search's). At ``n =
256`` every set up to ``W = J`` takes 0.02 s (SR-SGC, M-SGC, J = 30 on a 40-round profile) to
0.2 s (J = 80); ``benchmarks/bench_sgc.py --only tune``. The first call after installing compiles
the replay (numba, cached on disk).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gradcode._options import described
from gradcode._validation import check_choice, check_int, check_real
from gradcode.schemes.sgc.msgc import check_msgc, msgc_loads
from gradcode.schemes.sgc.replay import ParameterSets, replay_family
from gradcode.schemes.sgc.srsgc import check_srsgc, srsgc_s
from gradcode.stragglers.traces import Reference, adjust_profile, as_profile, fit_profile_slope, reference_profile

__all__ = ["Candidate", "Reference", "TuneResult", "TuneSearch", "adjust_profile", "fit_profile_slope",
           "reference_profile", "replay", "tune"]

FAMILIES = ("uncoded", "crc", "sr-sgc", "m-sgc")


def family_names(families) -> tuple[str, ...]:
    """``families`` checked against :data:`FAMILIES` (the names :data:`~gradcode.schemes.SCHEMES`
    and the code registry use, so a candidate is built with ``make_scheme(c.scheme, n=n,
    **c.params)``)."""
    if isinstance(families, str):
        families = (families,)
    return tuple(check_choice("family", f, FAMILIES) for f in families)


@dataclass(frozen=True)
class TuneSearch:
    """How :func:`tune` replays the profile and which parameter sets it searches and lists: each
    field is a keyword of :func:`tune` and an option of ``gradcode tune`` (``--max-w`` is
    ``max_w``), declared here once."""

    mu: float = described(1.0, "Tolerance of the mu-deadline rule.")
    waitout: str = described("all", "'all' (the paper's: wait for every worker when the deadline leaves a round"
                             " unresolved) or 'decodable'.")
    families: Sequence[str] = described(FAMILIES, "Families searched (repeatable): uncoded, crc, sr-sgc, m-sgc.")
    max_w: int | None = described(None, "Largest W searched for SR-SGC and M-SGC (default: the jobs, every W as the"
                                  " paper searches).")
    max_delay: int | None = described(None, "Largest delay T searched (default: any that the profile fits).")
    within: float | None = described(0.05, "List every parameter set within this fraction of its family's best (0:"
                                     " the best and its ties); the others are bounded out of the replay. None"
                                     " (--every): replay and list every set.")
    only: Mapping | None = described(None, "Replay this one parameter set of the (single) family given.", cli=False)


@dataclass(frozen=True)
class Candidate:
    """One parameter set: ``scheme`` (family name), ``params`` (``{"s": ...}`` or ``{"B", "W",
    "lam"}``), ``load``, ``time`` (estimated seconds for ``J`` jobs), ``waitouts`` (rounds that
    waited) and ``delay`` (``T``)."""

    scheme: str
    params: dict
    load: float
    time: float
    waitouts: int
    delay: int

    def to_dict(self) -> dict:
        return {"scheme": self.scheme, "params": dict(self.params), "load": self.load, "time": self.time,
                "waitouts": self.waitouts, "delay": self.delay}


@dataclass(frozen=True)
class TuneResult:
    """``best``: the fastest candidate of each family searched; ``candidates``: the ones within
    ``tune``'s ``within`` of their family's best (all with ``within=None``), fastest first;
    ``alpha``: the load slope used; ``reference_load``: the load of the profile replayed;
    ``skipped``: parameter sets left out because the profile is shorter than ``J + T`` rounds;
    ``bounded``: parameter sets searched but not listed, farther than ``within`` from their
    family's best (most of them never replayed to the end, :mod:`.replay`)."""

    best: dict
    candidates: list
    alpha: float
    reference_load: float
    jobs: int
    mu: float
    waitout: str
    skipped: int = 0
    notes: list = field(default_factory=list)
    bounded: int = 0

    def to_dict(self) -> dict:
        return {"best": {k: v.to_dict() for k, v in self.best.items()},
                "candidates": [c.to_dict() for c in self.candidates],
                "alpha": self.alpha, "reference_load": self.reference_load, "jobs": self.jobs,
                "mu": self.mu, "waitout": self.waitout, "skipped": self.skipped, "bounded": self.bounded,
                "notes": list(self.notes)}


# --------------------------------------------------------------------------- the replay


def _clip(a):
    """The load-adjusted profile's values are clipped at 0, as :func:`adjust_trace_load` clips
    (``np.maximum`` keeps NaN, an idle worker of a final round). Its argument is always a fresh
    sum, clipped in place: no copy on the replay's hot path."""
    return np.maximum(a, 0.0, out=a) if isinstance(a, np.ndarray) else max(a, 0.0)


def _gc_times(X, shift, s, jobs, mu, waitout):
    """``(n, s)``-GC for every ``s`` at once: ``(len(s),)`` total times and wait-outs."""
    x = np.sort(X[:jobs], axis=1)  # (J, n)
    n = x.shape[1]
    kappa, top = x[:, :1], x[:, -1:]
    c = shift[None, :]
    # the adjusted profile is clipped at 0 (adjust_trace_load); clipping is monotone, so it
    # commutes with the order statistics taken here
    cutoff = np.minimum((1.0 + mu) * _clip(kappa + c), _clip(top + c))  # (J, S)
    strag = np.stack([(_clip(x + ci) > cutoff[:, [i]]).sum(axis=1) for i, ci in enumerate(shift)], axis=1)
    ok = strag <= s[None, :]
    if waitout == "all":
        late = _clip(top + c)
    else:  # until n - s are in
        late = _clip(x[:, np.clip(n - 1 - s, 0, n - 1)] + c)
    times = np.where(ok, cutoff, late)
    return times.sum(axis=0), (~ok).sum(axis=0)


def replay(profile, scheme: str, params: dict, *, jobs: int, mu: float = 1.0, waitout: str = "all",
           alpha: float = 0.0, reference_load: float | None = None) -> Candidate:
    """Estimated run time of ``J`` jobs for one parameter set (module docstring)."""
    X = as_profile(profile)
    res = tune(X, jobs=jobs, mu=mu, waitout=waitout, load_slope=alpha,
               trace_load=None if reference_load is None else [reference_load],
               families=(scheme,), only=params)
    return res.candidates[0]


def tune(profiles, *, jobs: int, trace_load=None, load_slope: float | None = None, **search) -> TuneResult:
    """Estimate the run time of ``jobs`` jobs for every valid parameter set of each family in
    ``families`` (``uncoded``; ``crc``: ``s = 0 .. n - 1``; ``sr-sgc``: ``B | W - 1``, ``W <=
    max_w``, ``0 < lam <= n`` with ``s <= n - 1``; ``m-sgc``: ``0 < B < W <= max_w``, ``0 <= lam
    <= n``) and rank them (module docstring). Candidates are named as the scheme registries name
    them: ``make_scheme(c.scheme, n=n, **c.params)`` builds one.

    ``profiles``: a ``(rounds, n)`` array of seconds, or a list of them measured at ``trace_load``
    (one load each; default ``[1/n]`` for a single profile). The profile at the smallest load is
    replayed, shifted by ``(L - L_0) alpha``. ``load_slope``: alpha, seconds per unit load;
    ``None`` fits it from the profiles (:func:`fit_profile_slope`, needs two or more loads). The
    keywords are named as ``gradcode tune``'s options (``--trace-load``, ``--load-slope``,
    ``--max-w``). ``search``: the fields of :class:`TuneSearch`: ``mu``, the tolerance of the
    deadline rule; ``waitout``, ``"all"`` (the paper's) or ``"decodable"``; ``families``;
    ``max_w``, the largest ``W`` searched (default ``J``, as the paper's search; a set also needs
    ``J + T`` rounds of profile: the sets left out for that are counted in ``skipped``, and warned
    of when ``max_w`` is given); ``max_delay``, the largest delay ``T`` searched (default: any that
    fits); ``within``, the candidates kept, every set whose total is within that fraction of its
    family's best (default 5 %; ``0``: the best and its ties), the sequential families' other sets
    bounded out without a full replay (:mod:`.replay`) and counted in ``TuneResult.bounded``;
    ``None`` replays and keeps every set; ``only``, replay one parameter set of the (single)
    family given."""
    names = [f.name for f in dataclasses.fields(TuneSearch)]
    unknown = sorted(set(search) - set(names))
    if unknown:
        raise TypeError(f"tune() got unexpected keywords {unknown}: it takes jobs, trace_load, load_slope and the"
                        f" fields of TuneSearch ({', '.join(names)})")
    search = TuneSearch(**search)
    mu, waitout, families, max_w, max_delay, within, only = (getattr(search, f.name)
                                                              for f in dataclasses.fields(TuneSearch))
    ref = reference_profile(profiles, loads=trace_load, alpha=load_slope)
    X, L0, alpha, notes = ref.profile, ref.load, ref.alpha, list(ref.notes)
    R = X.shape[0]
    jobs = check_int("jobs", jobs, minimum=1)
    mu = check_real("mu", mu, minimum=0.0)
    check_choice("waitout", waitout, ("all", "decodable"))
    explicit_W = max_w is not None
    max_W = max(jobs, 2) if max_w is None else check_int("max_w", max_w, minimum=2)
    max_delay = None if max_delay is None else check_int("max_delay", max_delay, minimum=0)
    within = None if within is None else check_real("within", within, minimum=0.0)
    families = family_names(families)
    if jobs > R:
        raise ValueError(
            f"the profile has {R} rounds but J = {jobs} jobs need at least J + T >= {jobs} rounds; give a"
            " longer profile (or fewer jobs): rounds are not recycled")
    replay_args = (X, L0, alpha, jobs, mu, waitout)
    cands: list[Candidate] = []
    skipped = bounded = 0
    if "uncoded" in families and (only is None or not only):
        # load 1/n, shifted from the profile's load as every scheme is
        n = X.shape[1]
        t = float(_clip(X[:jobs] + (1.0 / n - L0) * alpha).max(axis=1).sum())
        cands.append(Candidate("uncoded", {}, 1.0 / n, t, jobs, 0))
    if "crc" in families:
        cands += _crc_candidates(replay_args, only)
    for fam in ("sr-sgc", "m-sgc"):
        if fam in families:
            found, left_out, cut = _sequential_candidates(fam, replay_args, max_W, max_delay,
                                                          -1.0 if within is None or only else within, only)
            cands += found
            skipped += left_out
            bounded += cut  # stopped by the bound before the end of their replay
    if skipped:
        msg = (f"{skipped} parameter sets left out: the profile has {R} rounds, and J = {jobs} jobs of a scheme"
               f" with delay T take J + T rounds (SGC Sec. 2), so only T <= {R - jobs} fit (rounds are not"
               " recycled: give a longer profile or fewer jobs)")
        notes.append(msg)
        if explicit_W:  # by default W runs up to J: sets beyond the profile are noted, not warned of
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
    if not cands:
        raise ValueError("no parameter set could be replayed" + (f": {notes[-1]}" if notes else ""))
    cands.sort(key=lambda c: (c.time, c.load))
    best = {}
    for c in cands:
        best.setdefault(c.scheme, c)
    if within is not None:
        kept = [c for c in cands if c.time <= best[c.scheme].time * (1.0 + within)]
        bounded += len(cands) - len(kept)
        cands = kept
    return TuneResult(best, cands, float(alpha), L0, jobs, mu, waitout, skipped, notes, bounded)


def _crc_candidates(replay_args: tuple, only: dict | None) -> list[Candidate]:
    """Tandon's cyclic repetition code with every ``s = 0 .. n - 1`` (load ``(s + 1) / n``),
    replayed at once (:func:`_gc_times`)."""
    X, L0, alpha, jobs, mu, waitout = replay_args
    n = X.shape[1]
    s = np.arange(n) if only is None else np.array([check_int("s", only["s"], minimum=0, maximum=n - 1)])
    L = (s + 1) / n
    times, waits = _gc_times(X, (L - L0) * alpha, s, jobs, mu, waitout)
    return [Candidate("crc", {"s": int(si)}, float(li), float(ti), int(wi), 0)
            for si, li, ti, wi in zip(s, L, times, waits)]


def _parameter_sets(fam: str, n: int, max_W: int, max_T: int, only: dict | None):
    """Every valid ``(B, W, lam)`` of SR-SGC or M-SGC with ``W <= max_W`` and delay ``T <=
    max_T`` (or ``only``), one ``(B, W)`` pair at a time: ``(B, W, T, lam, s, load)`` with arrays
    over ``lam``, ``s`` and loads from the schemes' own rules (:func:`srsgc_s`,
    :func:`msgc_loads`)."""
    if only is not None:  # one set, checked as the scheme checks it
        (check_srsgc if fam == "sr-sgc" else check_msgc)(n, only["B"], only["W"], only["lam"])
        pairs = [(only["B"], only["W"])]
    elif fam == "sr-sgc":  # T = B, W = x B + 1
        pairs = [(B, W) for B in range(1, min(max_T, max_W - 1) + 1) for W in range(B + 1, max_W + 1, B)]
    else:  # T = W - 2 + B
        pairs = [(B, W) for W in range(2, min(max_W, max_T + 1) + 1) for B in range(1, min(W - 1, max_T + 2 - W) + 1)]
    for B, W in pairs:
        if fam == "sr-sgc":
            lam = np.arange(1, n + 1)
            s = srsgc_s(B, W, lam)
            lam, s = lam[s <= n - 1], s[s <= n - 1]
            T, load = B, (s + 1) / n
        else:
            lam = np.arange(0, n + 1)
            T, s, load = W - 2 + B, lam, msgc_loads(n, B, W, lam)
        if only is not None:
            keep = lam == only["lam"]
            lam, s, load = lam[keep], s[keep], load[keep]
        if T <= max_T:
            yield B, W, T, lam, s, load


def _count_sets(fam: str, n: int, max_W: int, min_T: int) -> int:
    """How many valid sets with ``W <= max_W`` have a delay ``T >= min_T`` (counted, not built)."""
    if fam == "sr-sgc":  # lam <= n with s = ceil(B lam / (W - 1 + B)) <= n - 1
        return sum(min(n, (n - 1) * (W - 1 + B) // B) for B in range(max(min_T, 1), max_W)
                   for W in range(B + 1, max_W + 1, B))
    return (n + 1) * sum(1 for W in range(2, max_W + 1) for B in range(1, W) if W - 2 + B >= min_T)


def _sequential_candidates(fam: str, replay_args: tuple, max_W: int, max_delay: int | None, within: float,
                           only: dict | None) -> tuple[list, int, int]:
    """``(candidates, sets left out for the profile's length, sets whose replay the bound stopped)`` of SR-SGC or
    M-SGC: every valid set with ``W <= max_W`` and ``T <= max_delay`` replayed by
    :func:`replay_family`, the ones within ``within`` of the best in full (``within < 0``: all)."""
    X, L0, alpha, jobs, mu, waitout = replay_args
    R, n = X.shape
    fits = R - jobs  # J + T rounds must fit the profile
    max_T = fits if max_delay is None else min(fits, max_delay)
    sets = [(np.full(lam.size, B), np.full(lam.size, W), lam, s, load, np.full(lam.size, T))
            for B, W, T, lam, s, load in _parameter_sets(fam, n, max_W, max_T, only)]
    top = None if max_delay is None else max_delay + 1  # sets from fits + 1 to max_delay: the profile's fault
    if only is not None:
        T = only["B"] if fam == "sr-sgc" else only["W"] - 2 + only["B"]
        skipped = int(fits < T < (top or T + 1))
    else:
        skipped = _count_sets(fam, n, max_W, fits + 1) - (0 if top is None else _count_sets(fam, n, max_W, top))
        skipped = max(skipped, 0)
    if not sets:
        return [], skipped, 0
    B, W, lam, s, load, T = (np.concatenate(parts) for parts in zip(*sets))
    times, waits, replayed = replay_family(fam, X, jobs, ParameterSets(B, W, lam, s, (load - L0) * alpha), mu=mu,
                                           waitout=waitout, within=within)
    cands = [Candidate(fam, {"B": int(B[i]), "W": int(W[i]), "lam": int(lam[i])}, float(load[i]),
                       float(times[i]), int(waits[i]), int(T[i])) for i in np.flatnonzero(replayed)]
    return cands, skipped, int(B.size - len(cands))
