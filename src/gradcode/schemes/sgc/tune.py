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
job ``t - B`` got its ``n - s`` results in round ``t - B``; such a round costs 0 (:class:`_SRSGCWork`).
M-SGC's final rounds always hold the last jobs' remaining mini-tasks and are timed. Every
family, ``uncoded`` included, is replayed at its own load: the profile plus
``(L - L_0) alpha``.

Speed: GC is vectorized over rounds and ``s``; SR-SGC and M-SGC scan the rounds once per
``(B, W)`` with every ``lambda`` at once (the load, hence the straggler set, differs per
``lambda``). See ``benchmarks/bench_sgc.py`` for timings at ``n = 256``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from gradcode._validation import check_choice, check_int, check_real
from gradcode.schemes.sgc.msgc import msgc_load
from gradcode.stragglers.traces import Reference, adjust_profile, as_profile, fit_profile_slope, reference_profile
from gradcode.schemes.sgc.srsgc import srsgc_s

__all__ = ["Candidate", "Reference", "TuneResult", "adjust_profile", "fit_profile_slope", "reference_profile",
           "replay", "tune"]

FAMILIES = ("uncoded", "crc", "sr-sgc", "m-sgc")
#: the families' former names (one release, with a DeprecationWarning)
_FORMER = {"none": "uncoded", "gc": "crc"}


def family_names(families) -> tuple[str, ...]:
    """``families`` checked against :data:`FAMILIES` (the names :data:`~gradcode.schemes.SCHEMES`
    and the code registry use, so a candidate is built with ``make_scheme(c.scheme, n=n,
    **c.params)``); the former ``none``/``gc`` still work for a release, with a warning."""
    out = []
    for f in families:
        if f in _FORMER:
            warnings.warn(f"the tune family {f!r} is now {_FORMER[f]!r} (the old name goes in the next release)",
                          DeprecationWarning, stacklevel=3)
            f = _FORMER[f]
        out.append(check_choice("family", f, FAMILIES))
    return tuple(out)


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
    """``best``: the fastest candidate of each family searched; ``candidates``: all, fastest
    first; ``alpha``: the load slope used; ``reference_load``: the load of the profile replayed;
    ``skipped``: parameter sets left out because the profile is shorter than ``J + T`` rounds."""

    best: dict
    candidates: list
    alpha: float
    reference_load: float
    jobs: int
    mu: float
    waitout: str
    skipped: int = 0
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"best": {k: v.to_dict() for k, v in self.best.items()},
                "candidates": [c.to_dict() for c in self.candidates],
                "alpha": self.alpha, "reference_load": self.reference_load, "jobs": self.jobs,
                "mu": self.mu, "waitout": self.waitout, "skipped": self.skipped, "notes": list(self.notes)}


# --------------------------------------------------------------------------- profiles


# --------------------------------------------------------------------------- the replay


def _popcount(words: np.ndarray) -> np.ndarray:
    """Set bits per row of packed words (last axis)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(words).sum(axis=-1, dtype=np.intp)
    return _POP8[words.view(np.uint8)].sum(axis=-1, dtype=np.intp)


_POP8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


class _Batch:
    """A batch of ``K`` replays of one family on the same profile, differing in their constant
    shift ``c`` (the load adjustment) and their model parameters (``lam``, ``s``): the effective
    straggler rows and the per-track flags.

    Rows are kept bit-packed (``n`` workers in ``ceil(n / 64)`` words), so the unions, overlaps and
    counts of the straggler model's checks cost a few words a replay instead of ``n`` booleans; the
    union of a track's past rounds comes from one suffix-OR over the last ``W`` rounds per round
    (not one OR per track), and a worker's straggling rounds in a span from running counts."""

    def __init__(self, family, n, rounds, B, W, lam, s, jobs):
        self.family, self.n, self.B, self.W, self.J = family, n, B, W, jobs
        self.lam = np.asarray(lam)
        self.s = np.asarray(s)
        K = self.lam.size
        self.words = -(-n // 64)
        self.H = np.zeros((K, rounds, self.words), dtype=np.uint64)  # packed straggler rows
        self.T = (W - 2 + B) if family == "m-sgc" else B
        if family == "m-sgc" and B > 1:  # straggling rounds per worker up to each round
            # a ring of the last T + 2 counts: the tracks of round t start at t - T at the earliest
            # (the whole table was K (rounds + 1) n int32, 126 MB at n = 256, J = 480)
            self._ring = self.T + 2
            self.C = np.zeros((K, self._ring, n), dtype=np.int32)
        self.flags: dict[int, np.ndarray] = {}  # track start -> (K, models) flags
        self.K = K

    def pack(self, rows: np.ndarray) -> np.ndarray:
        """``(K', n)`` booleans as ``(K', words)`` packed words."""
        bits = np.packbits(rows, axis=-1, bitorder="little")
        pad = 8 * self.words - bits.shape[-1]
        if pad:
            bits = np.concatenate([bits, np.zeros(bits.shape[:-1] + (pad,), dtype=np.uint8)], axis=-1)
        return bits.view(np.uint64)

    def tracks(self, t):
        if self.family == "m-sgc":
            return [u for u in range(max(0, t - self.T), t + 1) if u < self.J]
        return list(range(max(0, t - self.W + 1), t + 1))

    def _suffix_or(self, lo: int, hi: int) -> np.ndarray:
        """``out[j] = OR(H[:, lo + j : hi])`` for ``j = 0 .. hi - lo`` (the last one empty)."""
        out = np.zeros((hi - lo + 1, self.K, self.words), dtype=np.uint64)
        if hi > lo:
            out[:-1] = np.bitwise_or.accumulate(self.H[:, lo:hi][:, ::-1], axis=1)[:, ::-1].transpose(1, 0, 2)
        return out

    def begin(self, t):
        """Gather, for every live track of round ``t``, the unions and counts its checks need
        (stacked ``(tracks, K, words)``), and its flags so far."""
        B, W = self.B, self.W
        self._t = t
        self._tracks = tracks = self.tracks(t)
        if not tracks:
            return
        first = max(min(tracks[0], t - W + 1), 0)
        upto_t = self._suffix_or(first, t)                 # OR(H[j:t]) from j = first
        hi = t - B + 1
        upto_hi = self._suffix_or(first, max(hi, first))  # OR(H[j:hi])
        lo = np.maximum(np.asarray(tracks), t - W + 1) - first
        self._Db = upto_t[lo]
        self._Fb = np.where((hi > lo + first)[:, None, None], upto_hi[np.minimum(lo, upto_hi.shape[0] - 1)], 0)
        if self.family == "m-sgc":  # arbitrary (B, W + B - 1, lam) on the job's span
            self._Da = upto_t[np.asarray(tracks) - first]
            if B == 1:  # one straggling round in the span is a burst of B
                self._Ca = self._Da
            else:  # workers with B straggling rounds in the track's span so far
                ring = self._ring
                now, starts = self.C[:, t % ring], self.C[:, np.asarray(tracks) % ring]
                self._Ca = self.pack(now[None] - starts.transpose(1, 0, 2) >= B)
        ones = np.ones((self.K, 2), dtype=bool)
        self._prev = np.stack([self.flags.get(a, ones) for a in tracks])

    def _per_track(self, cur, idx=None):
        """Flags ``(tracks, K', 2)`` for stragglers ``cur`` ``(K', n)`` (rows ``idx`` of the batch)."""
        sel = slice(None) if idx is None else idx
        lam = self.lam[sel]
        packed = self.pack(cur)[None]
        b = (_popcount(self._Db[:, sel] | packed) <= lam) & ~(self._Fb[:, sel] & packed).any(axis=2)
        if self.family == "m-sgc":
            o = (_popcount(self._Da[:, sel] | packed) <= lam) & ~(self._Ca[:, sel] & packed).any(axis=2)
        else:  # SR-SGC: at most s stragglers in the round
            o = np.broadcast_to(np.count_nonzero(cur, axis=1) <= self.s[sel], b.shape)
        return np.stack([b, o], axis=2) & self._prev[:, sel]

    def ok(self, cur, idx=None):
        if not self._tracks:
            return np.ones(cur.shape[0], dtype=bool)
        return self._per_track(cur, idx).any(axis=2).all(axis=0)

    def commit(self, rows):
        t = self._t
        self.H[:, t] = self.pack(rows)
        if hasattr(self, "C"):
            self.C[:, (t + 1) % self._ring] = self.C[:, t % self._ring] + rows
        if self._tracks:
            for a, f in zip(self._tracks, self._per_track(rows)):
                self.flags[a] = f
        end = (t - self.T) if self.family == "m-sgc" else (t - self.W + 1)
        self.flags.pop(end, None)


def _clip(a):
    """The load-adjusted profile's values are clipped at 0, as :func:`adjust_trace_load` clips
    (``np.maximum`` keeps NaN, an idle worker of a final round). Its argument is always a fresh
    sum, clipped in place: no copy on the replay's hot path."""
    return np.maximum(a, 0.0, out=a) if isinstance(a, np.ndarray) else max(a, 0.0)


def _scan(family, X, shift, B, W, lam, s, jobs, mu, waitout):
    """Replay ``X + shift[k]`` (``K`` replays) for SR-SGC / M-SGC: total times and wait-outs."""
    R, n = X.shape
    batch = _Batch(family, n, R, B, W, lam, s, jobs)
    rounds = jobs + batch.T
    K = shift.size
    total = np.zeros(K)
    waits = np.zeros(K, dtype=np.intp)
    order = np.argsort(X[:rounds], axis=1, kind="stable")
    xs = np.take_along_axis(X[:rounds], order, axis=1)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(n)[None, :].repeat(rounds, axis=0), axis=1)
    work = _SRSGCWork(K, rounds, n, B, np.asarray(s), jobs) if family == "sr-sgc" else None
    for t in range(rounds):
        x = X[t]
        kappa, top = xs[t, 0], xs[t, -1]
        cutoff = np.minimum((1.0 + mu) * _clip(kappa + shift), _clip(top + shift))
        cur = _clip(x[None, :] + shift[:, None]) > cutoff[:, None]
        active = work.active(t) if work is not None else None
        if active is not None:  # a final round: only the re-attempting workers compute
            xa = _clip(np.where(active, x[None, :], np.nan) + shift[:, None])
            some = active.any(axis=1)
            filled = np.where(some[:, None], xa, 0.0)  # an idle replay: any finite row
            kap, hi = np.nanmin(filled, axis=1), np.nanmax(filled, axis=1)
            cutoff = np.where(some, np.minimum((1.0 + mu) * kap, hi), 0.0)  # nothing to compute: no time
            late = np.where(some, hi, 0.0)
            cur = active & (xa > cutoff[:, None])
        else:
            late = _clip(top + shift)
        batch.begin(t)
        ok = batch.ok(cur)
        total += np.where(ok, cutoff, late)
        rows = np.where(ok[:, None], cur, False)
        bad = np.flatnonzero(~ok)
        waits[bad] += 1
        # a final round left unresolved waits for its last active worker (both rules: an upper bound
        # of the decodable one, whose bisection below ranks every worker)
        if bad.size and waitout == "decodable" and active is None:
            # largest k such that the k slowest workers as stragglers conform: bisection on k
            hi_k = cur[bad].sum(axis=1)  # not ok
            lo_k = np.zeros(bad.size, dtype=np.intp)  # ok (no stragglers)
            while True:
                open_ = hi_k - lo_k > 1
                if not open_.any():
                    break
                mid = (lo_k + hi_k) // 2
                cand = rank[t][None, :] >= (n - mid)[:, None]
                good = batch.ok(cand, bad)
                lo_k = np.where(open_ & good, mid, lo_k)
                hi_k = np.where(open_ & ~good, mid, hi_k)
            k = lo_k
            end = _clip(xs[t, n - 1 - k] + shift[bad])
            total[bad] += end - late[bad]
            rows[bad] = rank[t][None, :] >= (n - k)[:, None]
        batch.commit(rows)
        if work is not None:
            work.commit(t, rows)
    return total, waits


class _SRSGCWork:
    """Which of SR-SGC's final rounds have work, by Algorithm 1 (SGC Sec. 3.2), for ``K`` replays.

    In round ``t`` the workers that did not return job ``t - B``'s result in round ``t - B`` re-attempt
    it, as many as job ``t - B`` still lacks (``n - s - N(t - B)``, first by worker index), and the
    others attempt job ``t``. The final ``B`` rounds ``t = J .. J + B - 1`` have no job ``t`` (the
    paper's trivial tasks, "which do not incur any computation", Sec. 3.3.1), so a final round
    whose job ``t - B`` was finished in its own round (``N(t - B) >= n - s``) computes nothing: it
    costs no time and has no stragglers, as in the authors' own simulator. In a final round with
    re-attempts left only the re-attempting workers compute, so only they are timed."""

    def __init__(self, K, rounds, n, B, s, jobs):
        self.B, self.J, self.n = B, jobs, n
        self.need = (n - np.broadcast_to(s, (K,))).astype(np.intp)
        self.returned = np.zeros((rounds, K, n), dtype=bool)  # returned job t's result in round t
        self.count = np.zeros((rounds, K), dtype=np.intp)  # N(t)
        self._reattempt = np.zeros((K, n), dtype=bool)

    def active(self, t):
        """Plan round ``t``'s re-attempts; ``(K, n)``: the workers computing in it if it is a final
        round (none: it costs nothing), else None."""
        old = t - self.B
        if old < 0:
            self._reattempt = np.zeros_like(self._reattempt)
        else:
            lack = np.maximum(self.need - self.count[old], 0)
            cand = ~self.returned[old]
            self._reattempt = cand & (np.cumsum(cand, axis=1) <= lack[:, None])
        return self._reattempt if t >= self.J else None

    def commit(self, t, stragglers):
        if t < self.J:
            self.returned[t] = ~self._reattempt & ~stragglers
            self.count[t] = self.returned[t].sum(axis=1)


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
    res = tune(X, jobs=jobs, mu=mu, waitout=waitout, alpha=alpha,
               loads=None if reference_load is None else [reference_load],
               families=(scheme,), only=params)
    return res.candidates[0]


def tune(profiles, *, jobs: int, loads=None, alpha: float | None = None, mu: float = 1.0,
         waitout: str = "all", families=FAMILIES, max_W: int = 8, only: dict | None = None) -> TuneResult:
    """Estimate the run time of ``jobs`` jobs for every valid parameter set of each family in
    ``families`` (``uncoded``; ``crc``: ``s = 0 .. n - 1``; ``sr-sgc``: ``B | W - 1``, ``W <=
    max_W``, ``0 < lam <= n`` with ``s <= n - 1``; ``m-sgc``: ``0 < B < W <= max_W``, ``0 <= lam
    <= n``) and rank them (module docstring). Candidates are named as the scheme registries name
    them: ``make_scheme(c.scheme, n=n, **c.params)`` builds one.

    ``profiles``: a ``(rounds, n)`` array of seconds, or a list of them measured at ``loads``
    (one load each; default ``[1/n]`` for a single profile). The profile at the smallest load is
    replayed, shifted by ``(L - L_0) alpha``. ``alpha``: the load slope (seconds per unit load);
    ``None`` fits it from the profiles (:func:`fit_profile_slope`, needs two or more loads).
    ``mu``: the tolerance of the deadline rule. ``waitout``: ``"all"`` (the paper's) or
    ``"decodable"``. ``only``: replay one parameter set of the (single) family given."""
    ref = reference_profile(profiles, loads=loads, alpha=alpha)
    X, L0, alpha, notes = ref.profile, ref.load, ref.alpha, list(ref.notes)
    R = X.shape[0]
    jobs = check_int("jobs", jobs, minimum=1)
    mu = check_real("mu", mu, minimum=0.0)
    check_choice("waitout", waitout, ("all", "decodable"))
    max_W = check_int("max_W", max_W, minimum=2)
    families = family_names(families)
    if jobs > R:
        raise ValueError(
            f"the profile has {R} rounds but J = {jobs} jobs need at least J + T >= {jobs} rounds; give a"
            " longer profile (or fewer jobs): rounds are not recycled")
    replay_args = (X, L0, alpha, jobs, mu, waitout)
    cands: list[Candidate] = []
    skipped = 0
    if "uncoded" in families and (only is None or not only):
        # load 1/n, shifted from the profile's load as every scheme is
        n = X.shape[1]
        t = float(_clip(X[:jobs] + (1.0 / n - L0) * alpha).max(axis=1).sum())
        cands.append(Candidate("uncoded", {}, 1.0 / n, t, jobs, 0))
    if "crc" in families:
        cands += _crc_candidates(replay_args, only)
    for fam in ("sr-sgc", "m-sgc"):
        if fam in families:
            found, left_out = _sequential_candidates(fam, replay_args, max_W, only)
            cands += found
            skipped += left_out
    if skipped:
        msg = (f"{skipped} parameter sets left out: the profile has {R} rounds, and J = {jobs} jobs of a scheme"
               f" with delay T take J + T rounds (SGC Sec. 2), so only T <= {R - jobs} fit (rounds are not"
               " recycled: give a longer profile or fewer jobs)")
        notes.append(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
    if not cands:
        raise ValueError("no parameter set could be replayed" + (f": {notes[-1]}" if notes else ""))
    cands.sort(key=lambda c: (c.time, c.load))
    best = {}
    for c in cands:
        best.setdefault(c.scheme, c)
    return TuneResult(best, cands, float(alpha), L0, jobs, mu, waitout, skipped, notes)


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


def _sequential_candidates(fam: str, replay_args: tuple, max_W: int, only: dict | None) -> tuple[list, int]:
    """``(candidates, parameter sets left out)`` of SR-SGC or M-SGC: every valid ``(B, W)`` with
    ``W <= max_W`` and every ``lam`` at once (:func:`_scan`), their ``T`` and loads from the
    schemes' own functions (:func:`srsgc_s`, :func:`msgc_load`); a set whose ``J + T`` rounds
    exceed the profile is left out and counted."""
    X, L0, alpha, jobs, mu, waitout = replay_args
    R, n = X.shape
    pairs = [(B, W) for W in range(2, max_W + 1) for B in range(1, W) if fam == "m-sgc" or (W - 1) % B == 0]
    if only is not None:
        pairs = [(only["B"], only["W"])]
    cands, skipped = [], 0
    for B, W in pairs:
        T = B if fam == "sr-sgc" else W - 2 + B
        if fam == "sr-sgc":
            lam = np.arange(1, n + 1)
            s = np.array([srsgc_s(B, W, int(x)) for x in lam])
            keep = s <= n - 1
            lam, s = lam[keep], s[keep]
            L = (s + 1) / n
        else:
            lam = np.arange(0, n + 1)
            s = lam
            L = np.array([msgc_load(n, B, W, int(x)) for x in lam])
        if only is not None:
            keep = lam == only["lam"]
            lam, s, L = lam[keep], s[keep], L[keep]
        if not lam.size:
            continue
        if jobs + T > R:
            skipped += lam.size
            continue
        times, waits = _scan(fam, X, (L - L0) * alpha, B, W, lam, s, jobs, mu, waitout)
        cands += [Candidate(fam, {"B": B, "W": W, "lam": int(x)}, float(li), float(ti), int(wi), T)
                  for x, li, ti, wi in zip(lam, L, times, waits)]
    return cands, skipped
