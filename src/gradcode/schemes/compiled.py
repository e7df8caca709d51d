"""Compiled pieces that the schemes' compiled rounds (:meth:`Scheme.play_rounds
<gradcode.schemes.Scheme.play_rounds>`) share with each other: the simulator's timing of a round
(:func:`~gradcode.schemes.timing.message_arrivals`, the same float64 operations) and its closing
rule (:mod:`gradcode.sim.simulator`), in time rather than in message counts, and a round's row of
the simulator's tables."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

__all__ = ["Timing", "close_time", "kth_smallest", "records_row", "time_round"]

#: a block's times, the first record every compiled-rounds kernel takes (numba passes named tuples
#: of arrays as they are): ``intercept``, ``slope`` ``(m, n)``, the message time ``c``, the
#: mu-rule's ``mu`` (-1: close when decodable) and ``wait_all`` (wait out every worker past the
#: deadline)
Timing = namedtuple("Timing", "intercept slope c mu wait_all")


@njit(cache=True)
def time_round(ic, sl, k, loads, planned, c, A, comp):
    """``message_arrivals`` (the same operations) for every worker's planned messages in round
    ``k`` of the block: ``A[w, i]``, ``comp[w]`` (its last message); returns the first and last
    completion. The delays are finite (the simulator checks its draws)."""
    cwmin = np.inf
    cwmax = -np.inf
    for w in range(A.shape[0]):
        p = planned[w]
        if not p:
            continue
        prev = 0.0
        for i in range(p):
            x = ic[k, w] + sl[k, w] * loads[w, i]
            if x <= 0.0:  # np.maximum's rules: a tie gives the second argument (+0.0 for -0.0)
                x = 0.0
            if i and x <= prev:
                x = prev
            if c != 0.0:
                x += c
            A[w, i] = x
            prev = x
        comp[w] = prev
        if prev < cwmin:
            cwmin = prev
        if prev > cwmax:
            cwmax = prev
    return cwmin, cwmax


@njit(cache=True)
def close_time(found, ready0, tau, mu, wait_all, nplanned, cwmin, cwmax, first):
    """The simulator's closing rule (``_play_batched``) in time: ``found``/``ready0`` whether the
    round becomes ready / is ready before any message, ``tau`` the earliest arrival by which it is
    (readiness changes only as workers complete, and only improves); ``cwmin``/``cwmax`` the
    first and last completion, ``first`` the first arrival. Returns ``(end, waited, ok)``; the
    round takes in every message that arrived by ``end`` (the batched path's ``fed``, ties
    included)."""
    if mu >= 0.0 and nplanned > 0:
        cutoff = min((1.0 + mu) * cwmin, cwmax)
        if ready0 or (found and tau <= cutoff):
            return cutoff, False, True
        if not found:
            return 0.0, True, False
        return (cwmax if wait_all else tau), True, True
    if not found:
        return 0.0, False, False
    if nplanned == 0:
        return 0.0, False, True
    return (first if ready0 else tau), False, True


@njit(cache=True)
def records_row(k, n, planned, counts, last, A, records, strag, arr, fin):
    """Row ``k`` of the simulator's tables: the stragglers (given a task, not all of it in by the
    close), and with ``records`` the arrival of each worker's last message in (``-1`` unless all
    were) and of its last message (``0`` without a task)."""
    for w in range(n):
        p = planned[w]
        strag[k, w] = p > 0 and counts[w] < p
        if records:
            arr[k, w] = last[w] if (p > 0 and counts[w] == p) else -1.0
            fin[k, w] = A[w, p - 1] if p > 0 else 0.0


@njit(cache=True)
def kth_smallest(a, k):
    """The ``k``-th smallest value of ``a`` (0-based; reorders ``a``): Hoare's quickselect, the
    value ``np.partition(a, k)[k]`` gives (written out: ``np.partition`` costs numba seconds more
    to compile)."""
    lo, hi = 0, a.shape[0] - 1
    while lo < hi:
        pivot = a[(lo + hi) >> 1]
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            break
    return a[k]
