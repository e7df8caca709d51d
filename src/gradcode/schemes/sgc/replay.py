"""The replay of SR-SGC and M-SGC over a delay profile (SGC App. J), compiled, one parameter set at
a time, with branch and bound over a family's parameter sets (:func:`replay_family`).

**The rule replayed** (:mod:`.tune`'s docstring has the paper's wording). Round ``t`` of a set
with load shift ``c`` (``(L - L_0) alpha``) and profile row ``x``: ``kappa = min x``; the deadline
is ``cutoff = min((1 + mu) max(kappa + c, 0), max(max x + c, 0))``; the stragglers ``S_t`` are the
workers with ``max(x_w + c, 0) > cutoff``, i.e. the ``k`` slowest of the row for some ``k``
(the adjustment and the clip are monotone). The round *resolves* when the effective pattern, the
rounds before committed plus ``S_t``, conforms to the scheme's straggler model on every live
*track* (SGC Sec. 2, Props. 3.1/3.2):

* SR-SGC: track ``a`` is the window of rounds ``a .. a + W - 1``, live at rounds
  ``t in [a, a + W - 1]``; it conforms while it is ``(B, W, lambda)``-bursty (at most
  ``lambda`` distinct stragglers in it, and each one's straggling rounds within ``B`` consecutive
  rounds) *or* has at most ``s`` stragglers in every round;
* M-SGC: track ``u < J`` is job ``u``'s span ``u .. u + T`` (``T = W - 2 + B``); it conforms
  while every window of ``W`` rounds of it, clipped to the span, is ``(B, W, lambda)``-bursty
  *or* the span is ``(B, W + B - 1, lambda)``-arbitrary (at most ``lambda`` distinct stragglers,
  each in at most ``B`` rounds).

A resolved round lasts ``cutoff`` and commits ``S_t``; otherwise it waits out: ``waitout="all"``
lasts ``max x + c`` (clipped) and commits no stragglers; ``"decodable"`` lasts until all but the
``k`` slowest are in, for the largest ``k`` that conforms (bisection, from ``k = 0``), and commits
those ``k``. SR-SGC's final rounds ``t >= J`` compute only Algorithm 1's re-attempts of job
``t - B`` (the first ``n - s - N(t - B)`` by index of the workers that did not return it in round
``t - B``); only they are timed, and a final round with none costs 0.

**Only the oldest live track is checked.** For tracks ``a < a'`` both live at ``t``, every window
of ``a'`` is a sub-window (or equal clip) of one of ``a``'s, so each of the two models holding on
``a`` implies it on ``a'``: the round resolves iff the oldest live track conforms. Its state is
kept in closed form, so a round costs ``O(|S_t| + log rounds)``, whatever ``W``:

* distinct stragglers of rounds ``lo .. t - 1``: the workers whose last straggling round is
  ``>= lo``, from a Fenwick tree over the histogram of last straggling rounds;
* a burst broken: the latest round ``r'`` with a pair of straggling rounds ``(r', r)`` of one
  worker, ``B <= r - r' <= W - 1``; the track of ``a`` broke iff ``r' >= a``;
* more than ``B`` straggling rounds in a span (M-SGC): the latest ``r`` with some worker
  straggling ``B + 1`` times in ``r .. now``;
* M-SGC's clipped windows: the distinct stragglers of each ``W``-round window (kept when its last
  round commits) and of each ``(W - 1)``-round window (the track's first, clipped window at its
  largest);
* more than ``s`` stragglers in a round (SR-SGC): the latest such round.

**Branch and bound** (``within >= 0``): every round costs at least its ``cutoff`` (a waited-out
round costs more; SR-SGC's final rounds at least 0), so ``sum_t cutoff_t`` bounds a set's total
from below. With ``waitout="all"`` the bound also counts wait-outs that no replay avoids: a round
that resolves with more than ``s`` stragglers (SR-SGC; any straggler for M-SGC) needs the oldest
live track to conform to a model that allows at most ``lambda`` distinct stragglers, each in at
most ``B`` of its rounds, over a window that holds the ``W`` rounds up to it. So in every block of
``W`` consecutive rounds the rounds that resolve so carry at most ``B lambda`` stragglers in all,
and the others wait out, each paying ``late - cutoff``: a fractional knapsack per block (weights:
stragglers, values: ``late - cutoff``) bounds what resolving can save. Sets are replayed in
increasing order of their bound; a replay stops as soon as its partial total plus the cutoffs of
its remaining rounds exceeds ``(1 + within)`` times the best total so far (plus ``1e-9`` of it, so
that rounding never drops a tie), and once a set's bound exceeds it no later set is replayed.
Every set whose total is within ``within`` of the family's best is replayed in full; ``within <
0`` replays every set.

**Sets that differ only in ``lambda``** (SR-SGC's sets of one ``(B, W, s)`` share their load):
``lambda`` enters a replay only through comparisons ``u <= lambda``; one replay records the
interval of ``lambda`` for which each comparison comes out alike, and settles every set of the run
whose ``lambda`` lies in it.

The totals are the per-track vectorized replay's bit for bit (the tests keep that replay as the
oracle): the same float64 operations, summed in the same order.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

__all__ = ["SRSGC", "MSGC", "ParameterSets", "replay_family"]

#: the parameter sets :func:`replay_family` replays, one entry each: ``B``, ``W``, ``lam``, ``s``
#: and ``shift``, the seconds added to every time of the profile for that set's load (SGC App. J:
#: ``(L - L_0) alpha``)
ParameterSets = namedtuple("ParameterSets", "B W lam s shift")

# The compiled replay's state as named records (numba passes named tuples as they are):
#: one parameter set: the family (``SRSGC``/``MSGC``), ``B``, ``W``, ``T``, ``lam``, ``s``
Params = namedtuple("Params", "fam B W T lam s")
#: the conformance state (:func:`_resolves`): each worker's ring ``hist`` of its last ``B + 1``
#: straggling rounds and their count ``cnt``, the Fenwick tree ``lasthist``, ``fw1``, the latest
#: events ``st`` and the interval ``iv`` of ``lam`` that answer alike
Track = namedtuple("Track", "hist cnt lasthist fw1 st iv")
#: Algorithm 1's bookkeeping (SR-SGC): who returned job ``t`` in round ``t`` (``comm``,
#: ``ncomm``), the re-attempts planned (``reatt``, ``nreatt``), the results of each job
#: (``count``), and a scratch marking (``mark``)
Attempts = namedtuple("Attempts", "comm ncomm reatt nreatt count mark")
#: the profile ``X``, each round sorted (``xs``, by ``order``), and under the current shift each
#: round's stragglers ``kk``, deadline ``cut`` and wait-out end ``lat`` (:func:`_rounds_at`)
Rounds = namedtuple("Rounds", "X xs order kk cut lat")
#: the closing rule: the shift ``c`` of the set being replayed, ``mu``, ``wait_all``
Rule = namedtuple("Rule", "c mu wait_all")
#: the sets of a family, sorted (:func:`replay_family`): ``B``, ``W``, ``T``, ``lam``, ``s``, the
#: shift id ``sid``, and ``group_end`` (the end of each set's run of equal ``(B, W, s, shift)``)
Sets = namedtuple("Sets", "B W T lam s sid group_end")

SRSGC, MSGC = 0, 1
_MARGIN = 1e-9


@njit(cache=True)
def _clip(v):
    return v if v > 0.0 else 0.0


@njit(cache=True)
def _cutoff(xs_t, c, mu):
    """The deadline of a row (sorted ``xs_t``) under shift ``c``: ``(cutoff, late)``."""
    late = _clip(xs_t[-1] + c)
    return min((1.0 + mu) * _clip(xs_t[0] + c), late), late


@njit(cache=True)
def _latest_at_most(hist, cnt, w, r):
    """Worker ``w``'s latest committed straggling round ``<= r`` (-1: none)."""
    ring = hist.shape[1]
    j = cnt[w] - 1
    while j >= 0 and hist[w, j % ring] > r:
        j -= 1
    return hist[w, j % ring] if j >= 0 else -1


@njit(cache=True)
def _tree_add(tree, r, v):
    """Add ``v`` at round ``r`` of a Fenwick tree over rounds (``tree[0]`` unused)."""
    i = r + 1
    while i < tree.size:
        tree[i] += v
        i += i & -i


@njit(cache=True)
def _tree_prefix(tree, r):
    """The sum over rounds ``0 .. r - 1``."""
    total = 0
    i = r
    while i > 0:
        total += tree[i]
        i -= i & -i
    return total


@njit(cache=True)
def _distinct(lasthist, lo, hi):
    """Workers whose last committed straggling round is in ``lo .. hi - 1`` (``lasthist``: a
    Fenwick tree of the histogram of last straggling rounds, so ``O(log rounds)`` whatever ``W``)."""
    lo = max(lo, 0)
    return _tree_prefix(lasthist, hi) - _tree_prefix(lasthist, lo) if hi > lo else 0


@njit(cache=True)
def _at_most(u, lam, iv):
    """``u <= lam``, narrowing ``iv`` to the ``lam`` for which the answer is the same."""
    if u <= lam:
        iv[0] = max(iv[0], u)
        return True
    iv[1] = min(iv[1], u - 1)
    return False


@njit(cache=True)
def _last(hist, cnt, w, B):
    """Worker ``w``'s latest committed straggling round (-1: none)."""
    return hist[w, (cnt[w] - 1) % (B + 1)] if cnt[w] > 0 else -1


@njit(cache=True, inline="always")
def _bursty(lo, t, cur, ncur, p, track):
    """Rounds ``lo .. t`` with stragglers ``cur[:ncur]`` in round ``t``: at most ``lam`` distinct
    stragglers, and no worker of round ``t`` straggling in ``lo .. t - B`` too (a burst of more
    than ``B``; the earlier rounds' own bursts are the caller's)."""
    hist, cnt, B = track.hist, track.cnt, p.B
    u = _distinct(track.lasthist, lo, t)
    for i in range(ncur):
        w = cur[i]
        if _last(hist, cnt, w, B) < lo:
            u += 1
        if _latest_at_most(hist, cnt, w, t - B) >= lo:
            return False
    return _at_most(u, p.lam, track.iv)


@njit(cache=True, inline="always")
def _resolves(p, t, cur, ncur, track):
    """Whether stragglers ``cur[:ncur]`` in round ``t`` keep the oldest live track conforming
    (set ``p``, :class:`Params`; state ``track``, :class:`Track`).

    ``hist[w]``: worker ``w``'s last ``B + 1`` committed straggling rounds (a ring: its ``j``-th
    is at ``j % (B + 1)``, ``cnt[w]`` in all; enough, as at most ``B - 1`` of them are later than
    ``t - B``); ``lasthist``: how many workers' last one is each round (a Fenwick tree);
    ``fw1[r]``: distinct stragglers of rounds ``r - W + 2 .. r``; ``st``: the latest round
    starting a broken burst, the latest start of ``B + 1`` straggling rounds of one worker, the
    latest round with more than ``s`` stragglers, the latest end of a ``W``-round window with more
    than ``lam`` (-1: none); ``iv``: narrowed to the ``lam`` that answer alike (:func:`_at_most`)."""
    B, W, T, lam = p.B, p.W, p.T, p.lam
    hist, cnt, lasthist, fw1, st, iv = track
    if p.fam == 0:  # SR-SGC: window a0 .. t, bursty or at most s stragglers a round
        a0 = max(0, t - W + 1)
        if ncur <= p.s and st[2] < a0:
            return True
        return st[0] < a0 and _bursty(a0, t, cur, ncur, p, track)
    u0 = max(0, t - T)  # M-SGC: job u0's span
    # arbitrary (B, W + B - 1, lam) on the span
    arbitrary = st[1] < u0
    if arbitrary:
        u = _distinct(lasthist, u0, t)
        for i in range(ncur):
            w = cur[i]
            if _last(hist, cnt, w, B) < u0:
                u += 1
            if cnt[w] >= B and hist[w, (cnt[w] - B) % (B + 1)] >= u0:
                arbitrary = False
                break
        if arbitrary:
            arbitrary = _at_most(u, lam, iv)
    if arbitrary:
        return True
    # bursty on every window of W rounds clipped to the span
    if st[0] >= u0 or st[3] >= u0 + W - 1:
        return False
    if t - 1 >= u0 + W - 2 and not _at_most(fw1[u0 + W - 2], lam, iv):
        return False
    return _bursty(max(u0, t - W + 1), t, cur, ncur, p, track)


@njit(cache=True, inline="always")
def _commit(p, t, rows, nrows, track):
    """Round ``t`` commits stragglers ``rows[:nrows]``: their rings, the histogram of last
    straggling rounds, and the latest events of ``st`` (:func:`_resolves` says which)."""
    fam, B, W, lam = p.fam, p.B, p.W, p.lam
    hist, cnt, lasthist, fw1, st, iv = track
    for i in range(nrows):
        w = rows[i]
        prev = _latest_at_most(hist, cnt, w, t - B)
        if prev >= 0 and prev >= t - W + 1 and prev > st[0]:
            st[0] = prev
        if fam == 1 and cnt[w] >= B and hist[w, (cnt[w] - B) % (B + 1)] > st[1]:
            st[1] = hist[w, (cnt[w] - B) % (B + 1)]
        if cnt[w] > 0:
            _tree_add(lasthist, _last(hist, cnt, w, B), -1)
        _tree_add(lasthist, t, 1)
        hist[w, cnt[w] % (B + 1)] = t
        cnt[w] += 1
    if fam == 0:
        if nrows > p.s:
            st[2] = t
    else:
        if t - W + 1 >= 0 and not _at_most(_distinct(lasthist, t - W + 1, t + 1), lam, iv):
            st[3] = t
        fw1[t] = _distinct(lasthist, t - W + 2, t + 1)


@njit(cache=True)
def _reattempts(t, B, need, attempts, stamp):
    """Algorithm 1's re-attempts planned for round ``t`` (into ``reatt[t]``): the first ``n - s -
    N(t - B)`` by index of the workers that did not return job ``t - B`` in round ``t - B``."""
    comm, ncomm, reatt, nreatt, count, mark = attempts
    old = t - B
    nreatt[t] = 0
    if old < 0:
        return
    lack = max(need - count[old], 0)
    if lack == 0:
        return
    m = 0
    for i in range(nreatt[old]):  # the union of two short lists, then its first lack by index
        mark[reatt[old, i]] = stamp
        reatt[t, m] = reatt[old, i]
        m += 1
    for i in range(ncomm[old]):
        if mark[comm[old, i]] != stamp:
            reatt[t, m] = comm[old, i]
            m += 1
    reatt[t, :m].sort()
    nreatt[t] = min(m, lack)


@njit(cache=True)
def _replay_one(p, rounds_, rule, J, bound, lbs, track, attempts, cur):
    """One parameter set ``p`` (:class:`Params`) on ``rounds_`` (:class:`Rounds`) under ``rule``:
    ``(total, waitouts, finished)``; stops (unfinished) once the partial total plus the remaining
    rounds' bound ``lbs`` exceeds ``bound``. ``track.iv`` ends as the interval of ``lam`` whose
    replay is this one, comparison for comparison."""
    fam, B, T = p.fam, p.B, p.T
    X, xs, order, kk, cut, lat = rounds_
    c, mu, wait_all = rule
    comm, ncomm, reatt, nreatt, count, mark = attempts
    n = X.shape[1]
    track.iv[0], track.iv[1] = -1, n + 1
    rounds = J + T
    track.cnt[:] = 0
    track.lasthist[:] = 0
    track.st[:] = -1
    need = n - p.s
    total = 0.0
    waits = 0
    stamp = 0
    for t in range(rounds):
        final = fam == 0 and t >= J
        if fam == 0:
            stamp += 1
            _reattempts(t, B, need, attempts, stamp)
        if final:  # only the re-attempting workers compute
            na = nreatt[t]
            cutoff, late, ncur = 0.0, 0.0, 0
            if na > 0:
                kap, hi = np.inf, -np.inf
                for i in range(na):
                    v = _clip(X[t, reatt[t, i]] + c)
                    kap = min(kap, v)
                    hi = max(hi, v)
                cutoff, late = min((1.0 + mu) * kap, hi), hi
                for i in range(na):
                    w = reatt[t, i]
                    if _clip(X[t, w] + c) > cutoff:
                        cur[ncur] = w
                        ncur += 1
            rows = cur
        else:
            cutoff, late, ncur = cut[t], lat[t], kk[t]
            rows = order[t, n - ncur:]
        ok = _resolves(p, t, rows, ncur, track)
        if ok:
            total += cutoff
            nrows = ncur
        else:
            total += late
            waits += 1
            nrows = 0
            if not wait_all and not final:  # largest k that conforms, by bisection
                lo_k, hi_k = 0, ncur
                while hi_k - lo_k > 1:
                    mid = (lo_k + hi_k) // 2
                    if _resolves(p, t, order[t, n - mid:], mid, track):
                        lo_k = mid
                    else:
                        hi_k = mid
                end = _clip(xs[t, n - 1 - lo_k] + c)
                total += end - late
                rows = order[t, n - lo_k:]
                nrows = lo_k
        if fam == 0 and t < J:  # Algorithm 1's bookkeeping: who returned job t in round t
            stamp += 1
            for i in range(nreatt[t]):
                mark[reatt[t, i]] = stamp
            missing = nreatt[t]
            for i in range(nrows):
                comm[t, i] = rows[i]
                if mark[rows[i]] != stamp:
                    missing += 1
            ncomm[t] = nrows
            count[t] = n - missing
        _commit(p, t, rows, nrows, track)
        if total + lbs[t + 1] > bound:
            return total, waits, False
    return total, waits, True


@njit(cache=True)
def _rounds_at(xs, c, mu, kk, cut, lat):
    """Every round's stragglers count ``kk``, deadline ``cut`` and wait-out end ``lat`` under shift
    ``c``: computed once per shift, so that a replay reads three short arrays, not the profile."""
    n = xs.shape[1]
    for t in range(xs.shape[0]):
        cutoff, late = _cutoff(xs[t], c, mu)
        k = 0
        while k < n and _clip(xs[t, n - 1 - k] + c) > cutoff:
            k += 1
        kk[t], cut[t], lat[t] = k, cutoff, late


@njit(cache=True)
def _waiting_blocks(kk, cut, lat, end, W, heavy, blocks, pv, pw, totals):
    """The items of :func:`_forced_waits` for a shift ``c``: the rounds ``0 .. end - 1`` with more
    than ``heavy`` stragglers, by blocks of ``W`` rounds, each block's in decreasing order of
    ``(late - cutoff) / stragglers`` as prefix sums of values ``pv`` and weights ``pw`` (block
    ``b``'s are ``blocks[b] .. blocks[b + 1] - 1``; ``totals[b]`` its total value). Returns the
    number of blocks."""
    nb = 0
    m = 0
    value, weight = np.empty(W), np.empty(W)
    for a in range(0, end, W):
        blocks[nb] = m
        q = 0
        for t in range(a, min(a + W, end)):
            if kk[t] > heavy and lat[t] > cut[t]:
                value[q], weight[q] = lat[t] - cut[t], kk[t]
                q += 1
        order = np.argsort(-(value[:q] / weight[:q]))
        v, w = 0.0, 0.0
        for j in order:
            v += value[j]
            w += weight[j]
            pv[m], pw[m] = v, w
            m += 1
        totals[nb] = v
        nb += 1
    blocks[nb] = m
    return nb


@njit(cache=True)
def _forced_waits(nb, blocks, pv, pw, totals, cap):
    """A lower bound on what waiting out adds (``waitout="all"``): in any ``W`` consecutive rounds,
    the rounds that resolve with more than ``heavy`` stragglers commit at most ``cap = B lam``
    straggling (worker, round) pairs (module docstring), so in each block of ``W`` rounds the rest
    wait out, paying ``late - cutoff`` each; the fractional knapsack of the block's rounds
    (:func:`_waiting_blocks`) bounds what resolving can save."""
    extra = 0.0
    for b in range(nb):
        lo, hi = blocks[b], blocks[b + 1]
        if lo == hi:
            continue
        j = np.searchsorted(pw[lo:hi], cap, side="right")  # whole items that fit
        saved = pv[lo + j - 1] if j > 0 else 0.0
        if j < hi - lo:  # and a fraction of the next
            wj = pw[lo + j] - (pw[lo + j - 1] if j > 0 else 0.0)
            vj = pv[lo + j] - saved
            done = pw[lo + j - 1] if j > 0 else 0.0
            saved += vj * (cap - done) / wj
        extra += max(totals[b] - saved, 0.0)
    return extra


@njit(cache=True)
def _lower_bounds(fam, xs, J, sets, shifts, by_shift, mu, forced):
    """Each set's lower bound: ``sum_t cutoff_t`` (SR-SGC's final rounds 0), plus with ``forced``
    the wait-outs no replay can avoid (:func:`_forced_waits`). The sets are taken by shift, then
    ``W``, then ``T`` (the order ``by_shift``), so that each shift's rounds and each block list are
    computed once."""
    Bs, Ws, Ts, lams, ss, sid = sets.B, sets.W, sets.T, sets.lam, sets.s, sets.sid
    K = Ts.size
    R = xs.shape[0]
    lb = np.zeros(K)
    kk, cut, lat = np.zeros(R, dtype=np.int64), np.zeros(R), np.zeros(R)
    prefix = np.zeros(R + 1)
    blocks = np.zeros(R + 2, dtype=np.int64)
    pv, pw, totals = np.zeros(R), np.zeros(R), np.zeros(R + 1)
    at = -1  # the shift whose rounds kk, cut, lat hold
    blocks_of = (-1, -1, -1)  # the (W, heavy, end) whose blocks are held
    nb = 0
    for i in by_shift:
        if sid[i] != at:
            at = sid[i]
            if forced:
                _rounds_at(xs, shifts[at], mu, kk, cut, lat)
            else:  # the deadlines alone (M-SGC: as many shifts as sets)
                for t in range(R):
                    cut[t] = _cutoff(xs[t], shifts[at], mu)[0]
            for t in range(R):
                prefix[t + 1] = prefix[t] + cut[t]
            blocks_of = (-1, -1, -1)
        end, heavy = (J, ss[i]) if fam == 0 else (J + Ts[i], 0)
        lb[i] = prefix[end]
        if forced:
            if blocks_of != (Ws[i], heavy, end):
                blocks_of = (Ws[i], heavy, end)
                nb = _waiting_blocks(kk, cut, lat, end, Ws[i], heavy, blocks, pv, pw, totals)
            lb[i] += _forced_waits(nb, blocks, pv, pw, totals, Bs[i] * lams[i])
    return lb


@njit(cache=True)
def _family(fam, X, xs, order, J, sets, shifts, by_shift, rule, within):
    """Every set of ``sets`` (:class:`Sets`), in increasing order of its lower bound (module
    docstring), under ``rule`` (its ``c`` unused: each set has its shift). The sets are sorted by
    ``(B, W, s, shift, lam)``; ``group_end[i]``: the end of set ``i``'s run of equal ``(B, W, s,
    shift)``, whose members differ only in ``lam``: one replay settles every member whose ``lam``
    makes the same comparisons come out alike (the same trajectory, bit for bit)."""
    Bs, Ws, Ts, lams, ss, sid, group_end = sets
    _, mu, wait_all = rule
    K = Bs.size
    R, n = X.shape
    rounds_max = R
    forced = within >= 0 and wait_all
    # SR-SGC's shifts are few (one per s): its forced wait-outs order the visit; M-SGC's differ per
    # lam, so each set's are computed when it is reached
    lb = _lower_bounds(fam, xs, J, sets, shifts, by_shift, mu, forced and fam == 0)
    visit = np.argsort(lb, kind="mergesort")
    times = np.full(K, np.nan)
    waits = np.zeros(K, dtype=np.int64)
    state = np.zeros(K, dtype=np.int64)  # 0: not replayed, 1: replayed in full, 2: bounded out
    lbs = np.zeros(rounds_max + 1)
    hist = np.empty((n, Bs.max() + 1), dtype=np.int64)  # rings of the last B + 1 straggling rounds
    cnt = np.zeros(n, dtype=np.int64)
    lasthist = np.zeros(rounds_max + 1, dtype=np.int64)
    fw1 = np.zeros(rounds_max, dtype=np.int64)
    attempts = Attempts(np.empty((rounds_max, n), dtype=np.int64), np.zeros(rounds_max, dtype=np.int64),
                        np.empty((rounds_max, n), dtype=np.int64), np.zeros(rounds_max, dtype=np.int64),
                        np.zeros(rounds_max, dtype=np.int64), np.zeros(n, dtype=np.int64))
    cur = np.empty(n, dtype=np.int64)
    iv = np.zeros(2, dtype=np.int64)
    st = np.full(4, -1, dtype=np.int64)
    kk, cut, lat = np.zeros(rounds_max, dtype=np.int64), np.zeros(rounds_max), np.zeros(rounds_max)
    at = -1  # the shift they hold
    blocks = np.zeros(rounds_max + 2, dtype=np.int64)
    pv, pw, totals = np.zeros(rounds_max), np.zeros(rounds_max), np.zeros(rounds_max + 1)
    best = np.inf
    for j in range(K):
        i = visit[j]
        if state[i]:
            continue
        bound = np.inf if within < 0 else best * (1.0 + within) + _MARGIN * best
        if lb[i] > bound:
            break
        c, T = shifts[sid[i]], Ts[i]
        if sid[i] != at:
            _rounds_at(xs, c, mu, kk, cut, lat)
            at = sid[i]
        if forced and fam == 1:
            nb = _waiting_blocks(kk, cut, lat, J + T, Ws[i], 0, blocks, pv, pw, totals)
            if lb[i] + _forced_waits(nb, blocks, pv, pw, totals, Bs[i] * lams[i]) > bound:
                state[i] = 2
                continue
        lbs[J + T] = 0.0  # the bound of the rounds after t, for stopping early
        for t in range(J + T - 1, -1, -1):
            lbs[t] = lbs[t + 1] + (0.0 if (fam == 0 and t >= J) else cut[t])
        attempts.mark[:] = 0
        total, w, fin = _replay_one(Params(fam, Bs[i], Ws[i], T, lams[i], ss[i]), Rounds(X, xs, order, kk, cut, lat),
                                    Rule(c, mu, wait_all), J, bound, lbs,
                                    Track(hist[:, :Bs[i] + 1], cnt, lasthist, fw1, st, iv), attempts, cur)
        # the members of i's run with lam in iv: i itself, and neighbours (lam ascending)
        lo = i
        while lo > 0 and group_end[lo - 1] == group_end[i] and lams[lo - 1] >= iv[0]:
            lo -= 1
        hi = i + 1
        while hi < group_end[i] and lams[hi] <= iv[1]:
            hi += 1
        for m in range(lo, hi):
            if state[m]:  # settled by its own replay (a run's members meet other bounds: B lam varies)
                continue
            if fin:
                times[m], waits[m], state[m] = total, w, 1
            else:
                state[m] = 2
        if fin:
            best = min(best, total)
    return times, waits, state == 1


def replay_family(family: str, X: np.ndarray, jobs: int, sets: ParameterSets, *, mu: float, waitout: str,
                  within: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Replay ``X + sets.shift[i]`` for SR-SGC or M-SGC parameter sets ``(B[i], W[i], lam[i],
    s[i])`` of :class:`ParameterSets` (module docstring): ``(times, waitouts, replayed)``; a set
    left out by the bound (``within >= 0``) has ``replayed`` false and a NaN time. Every set must
    fit the profile (``J + T`` rounds)."""
    B, W, lam, s, shift = sets
    fam = SRSGC if family == "sr-sgc" else MSGC
    if np.size(B) == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    shifts, sid = np.unique(np.asarray(shift, dtype=np.float64), return_inverse=True)
    sid = sid.ravel()
    perm = np.lexsort((lam, sid, s, W, B))  # runs of equal (B, W, s, shift), lam ascending
    B, W, lam, s, sid = (np.ascontiguousarray(np.asarray(a)[perm], dtype=np.int64) for a in (B, W, lam, s, sid))
    key = np.stack([B, W, s, sid])
    starts = np.flatnonzero(np.r_[True, (key[:, 1:] != key[:, :-1]).any(axis=0)])
    group_end = np.repeat(np.r_[starts[1:], B.size], np.diff(np.r_[starts, B.size]))
    T = B if fam == SRSGC else W - 2 + B
    rounds = jobs + int(T.max(initial=0))
    if rounds > X.shape[0]:
        raise ValueError(f"the profile has {X.shape[0]} rounds; these sets need {rounds}")
    Xr = np.ascontiguousarray(X[:rounds], dtype=np.float64)
    order = np.argsort(Xr, axis=1, kind="stable")
    xs = np.take_along_axis(Xr, order, axis=1)
    sets = Sets(B, W, np.ascontiguousarray(T), lam, s, sid, group_end)
    times, waits, replayed = _family(fam, Xr, xs, order.astype(np.int64), int(jobs), sets, shifts,
                                     np.lexsort((T, W, sid)), Rule(0.0, float(mu), waitout == "all"), float(within))
    out = [np.empty_like(a) for a in (times, waits, replayed)]
    for o, a in zip(out, (times, waits, replayed)):
        o[perm] = a
    return tuple(out)
