"""GC-DC played by the simulator a block of rounds per call, compiled (numba).

:meth:`GCDC.play_rounds <gradcode.schemes.gcdc.scheme.GCDC.play_rounds>` calls
:func:`gcdc_rounds`, which plays what the batched event path plays through ``observe_states``,
``plan_loads``, ``ready_after``, ``on_results`` and ``close``, with the same float64 operations,
so every record and the scheme's state are the same bit for bit (tests compare the three paths).
Per round ``t``:

1. **Algorithm 1** on the round's planning information (the states, or the rates with ``tau``, of
   round ``t`` for perfect SSI and of round ``t - 1`` for imperfect SSI, prepared by the caller):
   Phase I is :func:`~gradcode.schemes.gcdc.clustering._turns` itself (the rate order dealt into
   the columns by ``_dealt``, as ``dynamic_clustering`` does), Phase II the single swaps of
   :func:`~gradcode.schemes.gcdc.clustering._swap_for`, the same function ``dynamic_clustering``
   calls (lines 26-35: the first open cluster, the conflicted worker's clusters in ascending
   order, each in slot order). A conflict that no single swap resolves (possible only
   when Lemma 1's condition fails) needs the augmenting chains, which stay in Python: the kernel
   stops before that round, the caller runs ``dynamic_clustering`` for it and goes on with the
   placement given (``placed``);
2. **time** each worker's one message by the codeword it serves (the GC-SC code's loads);
3. **close**: the round is ready once every cluster holds ``l - r + 1`` results (GC-SC's rule,
   :class:`~gradcode.codes.rules.PerGroup`), i.e. at the latest of the clusters' ``(l - r +
   1)``-th arrivals; the closing rule (:func:`~gradcode.schemes.compiled.close_time`) gives the
   end, and the workers not in by then are the round's stragglers.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from gradcode.schemes.compiled import close_time, kth_smallest, records_row, time_round
from gradcode.schemes.gcdc.clustering import _dealt, _swap_for, _turns

#: ``info`` slots: rounds played, and whether the kernel stopped before a round whose conflicts
#: need Python's augmenting chains
PLAYED, CHAIN = range(2)

# The kernel's inputs and outputs as named records (numba passes named tuples of arrays as they
# are), one record per concern instead of 27 positional arguments; the first is the shared
# :data:`~gradcode.schemes.compiled.Timing`.

#: what round ``k`` is planned with: ``states[k]`` or, where ``by_rates[k]``, ``rates[k]`` with
#: ``tau``; ``placed[k]`` (``>= 0``) a placement Python made for a round that needed chains
Plans = namedtuple("Plans", "states rates by_rates tau placed")
#: the clustering: ``columns``, ``clusters_of``, ``membership`` (the assignment), ``ell`` workers a
#: cluster, ``shared`` (every worker in every cluster), ``loads`` (each codeword's prefix load),
#: ``need = l - r + 1`` results a cluster
Layout = namedtuple("Layout", "columns clusters_of membership ell shared loads need")
#: where the rounds go: the workers' straggler ``hist`` (by round) and the codewords' ``cw_rows``
#: (by block row), ``records`` (keep arrivals and finishes), the rounds' ``end``, ``waited``,
#: ``strag``, ``arr``, ``fin``, and ``info`` (:data:`PLAYED`, :data:`CHAIN`)
Tables = namedtuple("Tables", "hist cw_rows records end waited strag arr fin info")


@njit(cache=True)
def _single_swaps(members, count, cluster_of, clusters_of, membership, ell):
    """Phase II's single swaps in place, each conflict in worker order by :func:`_swap_for` (the
    rule ``dynamic_clustering`` runs); ``False`` at the first conflict that needs a chain."""
    for k in range(cluster_of.shape[0]):
        if cluster_of[k] >= 0:
            continue
        p, q, slot = _swap_for(k, members, count, clusters_of, membership, ell)
        if p < 0:
            return False
        w = members[q, slot]
        members[q, slot] = k
        cluster_of[k] = q
        members[p, count[p]] = w
        count[p] += 1
        cluster_of[w] = p
    return True


@njit(cache=True)
def gcdc_rounds(t0, timing, plans, layout, out):
    """GC-DC's rounds ``t0 .. t0 + m - 1`` (module docstring) on the block's
    :data:`~gradcode.schemes.compiled.Timing`,
    :class:`Plans` and :class:`Layout`, into its :class:`Tables`. Round ``k`` of the block is
    planned with ``plans.states[k]`` or, where ``plans.by_rates[k]``, with ``plans.rates[k]`` and
    ``tau``, unless ``plans.placed[k, 0] >= 0``: then ``placed[k]`` holds each cluster's members in
    slot order (``(P, l)`` flattened), Algorithm 1 as Python ran it for a round that needed chains.
    Writes the workers' straggler rows into ``out.hist`` (by round) and the codewords' into
    ``out.cw_rows`` (by block row)."""
    ic, sl, c, mu, wait_all = timing
    plan_states, plan_rates, by_rates, tau, placed = plans
    columns, clusters_of, membership, ell, shared, loads, need = layout
    hist, cw_rows, records, end, waited, strag, arr, fin, info = out
    m, K = ic.shape
    P = columns.shape[0]
    planned = np.ones(K, dtype=np.int64)
    counts = np.zeros(K, dtype=np.int64)
    A = np.zeros((K, 1))
    comp = np.zeros(K)
    lw = np.zeros((K, 1))
    cw = np.zeros(K, dtype=np.int64)
    buf = np.empty(ell)
    for k in range(m):
        t = t0 + k
        # ---- Algorithm 1
        if placed[k, 0] >= 0:
            members = placed[k].reshape(P, ell)
        else:
            if by_rates[k]:
                rates = plan_rates[k]
                states = rates < tau
                cols = _dealt(np.argsort(-rates, kind="mergesort"), clusters_of, P, columns.shape[1])
            else:
                states = plan_states[k]
                cols = columns
            _, _, members, count, cluster_of = _turns(states, cols, ell, shared)
            if not _single_swaps(members, count, cluster_of, clusters_of, membership, ell):
                info[CHAIN] = 1
                return
        for p in range(P):
            for i in range(ell):
                w = members[p, i]
                cw[w] = p * ell + i
                lw[w, 0] = loads[p * ell + i]
        # ---- time, and the instant every cluster has `need` results
        cwmin, cwmax = time_round(ic, sl, k, lw, planned, c, A, comp)
        ready = -np.inf
        for p in range(P):
            for i in range(ell):
                buf[i] = comp[members[p, i]]
            ready = max(ready, kth_smallest(buf, need - 1))
        e_, wt, _ = close_time(True, False, ready, mu, wait_all, K, cwmin, cwmax, cwmin)
        for w in range(K):
            counts[w] = 1 if comp[w] <= e_ else 0
        records_row(k, K, planned, counts, comp, A, records, strag, arr, fin)
        for w in range(K):
            hist[t, w] = strag[k, w]
            cw_rows[k, cw[w]] = strag[k, w]
        end[k] = e_
        waited[k] = wt
        info[PLAYED] = k + 1
