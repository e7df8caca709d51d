"""The wait-out rule's conformance check (SGC Sec. 2, Remark 2.3), written once: compiled
functions over named records that the compiled rounds (:mod:`.rounds`) call inline, and that
:class:`~.common.Conformance`, the protocol path's object, drives.

A *track* is a stretch of rounds that must conform to one of the scheme's models (:mod:`.common`
says which tracks SR-SGC and M-SGC keep); a *model* is ``bursty`` (at most ``lam`` distinct
stragglers in its window of ``W`` rounds, no worker straggling more than ``B`` rounds in a row),
``arbitrary`` (at most ``lam`` distinct stragglers and ``N`` straggling rounds a worker in its
window) or ``per-round`` (at most ``s`` stragglers in each round). For round ``t`` each (track,
model) entry ``e = k M + m`` is evaluated from the window's past rounds (:func:`window`):
``nonD[e]``, the workers that did not straggle in them (everyone for ``per-round``), ``F[e]``, the
workers that may not straggle now (a bursty burst at its limit, an arbitrary worker at ``N``),
and ``lim[e]``; with the round's current stragglers ``cur`` (:func:`count`) ``base[e] = |D| +
|cur \\ D|`` and ``fcnt[e] = |F ∩ cur|``. The entry holds while ``base <= lim``, ``fcnt == 0``
and the track still conformed to the model before (``prev``); a track holds while one of its
entries does. The counts only fall as workers complete, so a round's first conforming instant
is found by removing workers in order of completion (:func:`first_conforming`; the compiled rounds do
the same inside their receipt loops).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

__all__ = ["ARBITRARY", "BURSTY", "PER_ROUND", "KINDS", "Flags", "Models", "Tracks"]

#: model kinds (:class:`Conformance`'s "bursty", "arbitrary", "per-round")
BURSTY, ARBITRARY, PER_ROUND = 0, 1, 2
#: the model kinds by the names :class:`~.common.Conformance` takes them
KINDS = {"bursty": BURSTY, "arbitrary": ARBITRARY, "per-round": PER_ROUND}

#: the straggler models a track may conform to: each one's ``kinds`` (bursty, arbitrary,
#: per-round), its ``Ns`` (burst length / stragglers), ``Ws`` (window) and ``lims`` (stragglers a
#: round)
Models = namedtuple("Models", "kinds Ns Ws lims")
#: the conformance scratch of the live tracks (:func:`scratch`): ``starts``, per entry ``e = k * M
#: + m`` ``prev`` (still conforms), ``nonD``, ``F``, ``base``, ``fcnt``, ``lim``, and the window
#: counts ``cnt``
Tracks = namedtuple("Tracks", "starts prev cnt nonD F base fcnt lim")
#: the tracks' stored flags (the compiled rounds' rings ``fl_id``, ``fl_st``, ``fl_val``)
Flags = namedtuple("Flags", "fl_id fl_st fl_val")


@njit(cache=True)
def scratch(tracks, M, n):
    """The conformance arrays for at most ``tracks`` live tracks of ``M`` models each (and as
    many rows of window counts), as :class:`Tracks`."""
    KM = tracks * M
    return Tracks(np.zeros(tracks, dtype=np.int64), np.zeros(KM, dtype=np.bool_), np.zeros((tracks, n), dtype=np.int32),
                  np.zeros((KM, n), dtype=np.bool_), np.zeros((KM, n), dtype=np.bool_), np.zeros(KM, dtype=np.int64),
                  np.zeros(KM, dtype=np.int64), np.zeros(KM, dtype=np.int64))


@njit(cache=True, inline="always")
def window(t, hist, tracks, K, models):
    """Round ``t``'s entries for the ``K`` live tracks ``starts[:K]`` from the closed rounds
    ``hist`` (rows by round): ``nonD``, ``F``, ``lim``, and ``base = |D|``, ``fcnt = 0`` (no
    current straggler yet). Window counts come from one running sum over the last rounds, read at
    each track's window length."""
    starts, prev, cnt, nonD, F, base, fcnt, lim = tracks
    kinds, Ns, Ws, lims = models
    n = nonD.shape[1]
    M = kinds.shape[0]
    longest = 0
    for m in range(M):
        if kinds[m] != PER_ROUND and Ws[m] > longest:
            longest = Ws[m]
    rows = min(t, max(longest - 1, 0))
    for w in range(n):
        cnt[0, w] = 0
    for L in range(1, rows + 1):
        row = hist[t - L]
        for w in range(n):
            cnt[L, w] = cnt[L - 1, w] + (1 if row[w] else 0)
    for k in range(K):
        a = starts[k]
        for m in range(M):
            e = k * M + m
            lim[e] = lims[m]
            D = 0
            if kinds[m] == PER_ROUND:
                for w in range(n):
                    nonD[e, w] = True
                    F[e, w] = False
            else:
                lo = t - Ws[m] + 1
                L = t - (a if a > lo else lo)
                if L > rows:
                    L = rows
                short = Ns[m] - 1 if Ns[m] - 1 < L else L
                for w in range(n):
                    x = cnt[L, w]
                    nonD[e, w] = x == 0
                    F[e, w] = (x - cnt[short, w] > 0) if kinds[m] == BURSTY else (x >= Ns[m])
                    if x != 0:
                        D += 1
            base[e] = D
            fcnt[e] = 0


@njit(cache=True, inline="always")
def count(cur, tracks, E):
    """Add the current stragglers ``cur`` to the ``E`` entries' counts (after :func:`window`):
    ``base += |cur \\ D|``, ``fcnt += |F ∩ cur|``."""
    nonD, F, base, fcnt = tracks.nonD, tracks.F, tracks.base, tracks.fcnt
    for w in range(cur.shape[0]):
        if cur[w]:
            for e in range(E):
                if nonD[e, w]:
                    base[e] += 1
                if F[e, w]:
                    fcnt[e] += 1


@njit(cache=True, inline="always")
def leave(w, tracks, E):
    """Worker ``w`` is no longer a straggler of the round: the ``E`` entries' counts drop (what a
    receipt does; :func:`count` added it)."""
    nonD, F, base, fcnt = tracks.nonD, tracks.F, tracks.base, tracks.fcnt
    for e in range(E):
        if nonD[e, w]:
            base[e] -= 1
        if F[e, w]:
            fcnt[e] -= 1


@njit(cache=True, inline="always")
def begin(t, hist, tracks, K, models, cur):
    """:func:`window` then :func:`count`: round ``t``'s entries with its stragglers so far."""
    window(t, hist, tracks, K, models)
    count(cur, tracks, K * models.kinds.shape[0])


@njit(cache=True, inline="always")
def entry_ok(e, prev, base, lim, fcnt):
    return prev[e] and base[e] <= lim[e] and fcnt[e] == 0


@njit(cache=True, inline="always")
def all_ok(K, M, ncur, prev, base, lim, fcnt):
    """Every live track conforms to some model (with no stragglers left: every track still has
    a model, its ``prev``)."""
    for k in range(K):
        good = False
        for m in range(M):
            e = k * M + m
            if (prev[e] if ncur == 0 else entry_ok(e, prev, base, lim, fcnt)):
                good = True
                break
        if not good:
            return False
    return True


@njit(cache=True)
def evaluate(D, cur, tracks, K, M, out):
    """``out[e]``: entry ``e`` holds with the stragglers ``cur`` (the window's ``|D|`` given)."""
    E = K * M
    for e in range(E):
        tracks.base[e] = D[e]
        tracks.fcnt[e] = 0
    count(cur, tracks, E)
    for e in range(E):
        out[e] = entry_ok(e, tracks.prev, tracks.base, tracks.lim, tracks.fcnt)


@njit(cache=True)
def first_conforming(D, done, cur, never, tracks, K, M):
    """The smallest ``k`` such that every track conforms with the stragglers ``cur & (done >
    k)``: worker ``w`` leaves the round's stragglers once ``done[w]`` messages are in (``never``
    if it does not). The workers are removed in order of ``done`` (ties at once) from the counts
    with all of ``cur``; once none is left every track keeps a model."""
    E = K * M
    for e in range(E):
        tracks.base[e] = D[e]
        tracks.fcnt[e] = 0
    count(cur, tracks, E)
    idx = np.flatnonzero(cur)
    if idx.size == 0 or K == 0:
        return 0
    d = done[idx]
    order = np.argsort(d, kind="mergesort")
    ncur = idx.size
    if all_ok(K, M, ncur, tracks.prev, tracks.base, tracks.lim, tracks.fcnt):
        return 0
    i = 0
    while i < order.size:
        at = d[order[i]]
        while i < order.size and d[order[i]] == at:
            leave(idx[order[i]], tracks, E)
            ncur -= 1
            i += 1
        if ncur == 0 or all_ok(K, M, ncur, tracks.prev, tracks.base, tracks.lim, tracks.fcnt):
            return at if at < never else never
    return never
