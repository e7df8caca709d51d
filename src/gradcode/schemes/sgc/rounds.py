"""SR-SGC and M-SGC played by the simulator a block of rounds per call, compiled (numba).

:meth:`SequentialScheme.play_rounds <gradcode.schemes.sgc.common.SequentialScheme.play_rounds>`
calls these kernels; they play exactly the protocol that the simulator's batched event path plays
through ``plan_loads``, ``ready_after``, ``on_results`` and ``close`` (:mod:`gradcode.sim.simulator`
has the timing and closing rules), with the same float64 operations in the same order, so every
record and the scheme's state after the block are the same bit for bit (the tests compare all three
paths: per message, batched, compiled). What changes is where the work happens: one call per
block instead of about a hundred numpy calls per round. Receipts are written out in loops that
take a batch of workers per call (a numba call with a dozen array arguments costs more than the
receipt itself).

Per round ``t`` (of ``t0 .. t0 + m - 1``):

1. **plan**: Algorithm 1 (SR-SGC; Algorithm 3 for GC-Rep) or Algorithm 2 (M-SGC), as
   ``_new_round`` does it on the job states, and each worker's prefix loads (``task_schedule``'s
   running sums, redone only when a worker's sequence of mini-task kinds changes);
2. **time**: each message's arrival (:func:`~gradcode.schemes.compiled.time_round`);
3. **conformance**: the wait-out rule's tracks and models, by the functions of :mod:`.conformance`
   that :class:`~.common.Conformance` runs on the protocol path (per track and model: the
   window's past stragglers ``D``, the workers forbidden to straggle now ``F``, the limit), kept
   as counts that a worker's completion updates in ``O(tracks x models)``;
4. **receive until ready**: readiness (at most ``max_cur`` incomplete workers, the due job
   decodes, the pattern conforms on every live track) changes only when a worker's last message
   arrives (it ends the worker's stragglership; the due job's tasks are each worker's last:
   SR-SGC sends one message, M-SGC's slot ``T`` comes last), and only improves. So the workers
   are taken in order of completion and readiness is checked after each instant; the first
   ``n - max_cur`` completions cannot make the round ready, so they are found by one selection
   and taken at once, and only the rest are sorted (a full sort of the messages cost more than
   the rest of the round). The instant found is the batched path's ``ready_after`` threshold in
   time, the closing rule (:func:`~gradcode.schemes.compiled.close_time`) gives the end, and
   every message in by then is received (receiving is idempotent and order-free);
5. **close**: the jobs that decode finish (in job order), the stragglers' row is recorded, the
   tracks' flags are committed and the jobs and tracks that leave the window are forgotten.

State between blocks lives in the scheme's own objects; the kernels work on rings of it (jobs by
``u mod (T + 2)``, track flags by start), filled from the scheme before a block and written back
after it (``SequentialScheme._to_rings`` / ``_from_rings``).

Status codes in ``info[STATUS]``: 0 played, 1 a round cannot finish even with every message (the
simulator's ``NotDecodableError``), 2 a track broke or a job was left unfinished past its window
(cannot happen when the rules above hold; reported rather than trusted).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from gradcode.schemes.compiled import close_time, kth_smallest, records_row, time_round
from gradcode.schemes.sgc.conformance import (
    ARBITRARY,
    BURSTY,
    PER_ROUND,
    Flags,
    Models,
    all_ok,
    begin,
    entry_ok,
    leave,
    scratch,
)

#: ``info`` slots the kernels fill: re-attempted tasks, jobs finished, the highest job given
#: work, whether any message was received, status, the round it refers to, rounds played
REATTEMPTS, FINISHED, LAST_JOB, RECEIVED, STATUS, AT, PLAYED = range(7)
@njit(cache=True)
def _in_range(u, J):
    return u >= 0 and (J < 0 or u < J)


@njit(cache=True, inline="always")
def _live_track(a, K, M, tracks, flags):
    """Add the track starting at ``a`` to the round's ``K`` live ones unless it broke, with its
    flags (all models while it has none stored); returns the new count."""
    starts, prev = tracks.starts, tracks.prev
    fl_id, fl_st, fl_val = flags
    x = a % fl_id.shape[0]
    if fl_id[x] == a and fl_st[x] == 2:
        return K
    starts[K] = a
    for m in range(M):
        prev[K * M + m] = fl_val[x, m] if (fl_id[x] == a and fl_st[x] == 1) else True
    return K + 1


@njit(cache=True, inline="always")
def _commit(k, t, strag, hist, tracks, K, M, flags, gone):
    """Close round ``t`` (block row ``k``): record its stragglers, store each live track's flags
    (``Conformance.commit``; ``False`` if a track fits no model) and drop the track starting at
    ``gone``, which leaves the window."""
    starts, prev, base, lim, fcnt = tracks.starts, tracks.prev, tracks.base, tracks.lim, tracks.fcnt
    fl_id, fl_st, fl_val = flags
    FR = fl_id.shape[0]
    for w in range(strag.shape[1]):
        hist[t, w] = strag[k, w]
    for q in range(K):
        a = starts[q]
        y = a % FR
        anyok = False
        for mm in range(M):
            f = entry_ok(q * M + mm, prev, base, lim, fcnt)
            fl_val[y, mm] = f
            anyok = anyok or f
        fl_id[y] = a
        fl_st[y] = 1 if anyok else 2
        if not anyok:
            return False
    if gone >= 0 and fl_id[gone % FR] == gone:
        fl_id[gone % FR] = -1
        fl_st[gone % FR] = 0
    return True


@njit(cache=True)
def _forget(u, jid, jfin):
    """Job ``u`` (``t - T - 1``) left the window: forget it if it finished (every job does)."""
    x = u % jid.shape[0]
    if u >= 0 and jid[x] == u and jfin[x]:
        jid[x] = -1
        jfin[x] = False


@njit(cache=True)
def _by_completion(comp, planned, n, ct, cw, over):
    """The planned workers in the order the scan receives them (``comp[w]``: the arrival of
    ``w``'s last message): ``(order, head, first)``. No round is ready before ``over`` workers
    have completed (at most ``max_cur`` may be incomplete), so the ``head`` workers that complete
    by the ``over``-th completion ``first`` (ties included) come first, in any order (one
    selection), and only the rest are sorted (``head = 0``: all sorted)."""
    N = 0
    for w in range(n):
        if planned[w]:
            ct[N] = comp[w]
            cw[N] = w
            N += 1
    out = np.empty(N, dtype=np.int64)
    if over <= 0 or over > N:
        order = np.argsort(ct[:N])
        for x in range(N):
            out[x] = cw[order[x]]
        return out, 0, 0.0
    first = kth_smallest(ct[:N].copy(), over - 1)
    head = 0
    for x in range(N):
        if ct[x] <= first:
            out[head] = cw[x]
            head += 1
    rest = np.empty(N - head)
    idx = np.empty(N - head, dtype=np.int64)
    r = 0
    for x in range(N):
        if ct[x] > first:
            rest[r] = ct[x]
            idx[r] = cw[x]
            r += 1
    order = np.argsort(rest)
    for x in range(r):
        out[head + x] = idx[order[x]]
    return out, head, first


@njit(cache=True)
def _group(order, i, head, first, comp):
    """The end of the scan's next group from ``i``: the head, or the workers that complete at
    the same instant as ``order[i]``; returns ``(stop, time)``."""
    if i < head:
        return head, first
    tg = comp[order[i]]
    stop = i + 1
    while stop < order.shape[0] and comp[order[stop]] == tg:
        stop += 1
    return stop, tg


# ------------------------------------------------------------------------------------ SR-SGC


@njit(cache=True, inline="always")
def sr_reattempts(old, recv, fresh, need_n, rep, group, gseen, job_of):
    """Algorithm 1's re-attempts (Algorithm 3 for GC-Rep): the first ``n - s - N(old)`` workers by
    index that did not return job ``old`` (GC-Rep: whose group did not) compute it again,
    ``job_of[w] = old``; returns how many. ``recv``: who returned it, ``fresh``: ``N(old)``, the
    results of round ``old`` itself. The protocol path (``SRSGC._new_round``) and
    :func:`srsgc_rounds` both plan with it."""
    if rep:
        gseen[:] = False
        for w in range(recv.shape[0]):
            if recv[w]:
                gseen[group[w]] = True
    quota = need_n - fresh
    taken = 0
    for w in range(recv.shape[0]):
        if quota <= 0:
            break
        if not recv[w] and not (rep and gseen[group[w]]):
            job_of[w] = old
            quota -= 1
            taken += 1
    return taken


@njit(cache=True, inline="always")
def sr_receive(u, w, fresh, x, recv, jcount, jfresh):
    """Worker ``w``'s result for job ``u`` (ring slot ``x``), counted once; ``fresh``: it came in
    round ``u`` itself (``N(u)``, Algorithm 1). Returns whether it was new. The protocol path
    (``SRSGC._receive``) and :func:`srsgc_rounds` both receive with it."""
    if recv[x, w]:
        return False
    recv[x, w] = True
    jcount[x] += 1
    if fresh:
        jfresh[x] += 1
    return True


@njit(cache=True)
def sr_receive_all(t, workers, job_of, recv, jcount, jfresh):
    """:func:`sr_receive` for the messages of ``workers`` in round ``t`` (a batch)."""
    R = recv.shape[0]
    for w in workers:
        u = job_of[w]
        sr_receive(u, w, u == t, u % R, recv, jcount, jfresh)


@njit(cache=True)
def sr_decodable(sl, jcount, recv, need_n, rep, group, groups, gseen):
    """Whether the job in ring slot ``sl`` decodes: ``n - s`` results, or one per group (GC-Rep).
    The protocol path (``SRSGC._decodable``) and :func:`srsgc_rounds` both decide with it."""
    if not rep:
        return jcount[sl] >= need_n
    for g in range(groups):
        gseen[g] = False
    got = 0
    for w in range(recv.shape[1]):
        if recv[sl, w] and not gseen[group[w]]:
            gseen[group[w]] = True
            got += 1
    return got == groups


@njit(cache=True, inline="always")
def _sr_take(now, order, lo, hi, by, rings, params, tracks, E, uncovered):
    """Receive the results of workers ``order[lo:hi]`` that arrived by ``by`` (each one message,
    for job ``now.t`` or the re-attempted ``now.old``): they leave the round's stragglers. Returns
    ``(workers taken, the due job's groups still uncovered (GC-Rep))``. One call per batch of
    workers, with the receipt written out in the loop: a call per worker costs more than the
    receipt itself."""
    t, old, due, job_of, cur, counts, A, gcov = now
    recv, jcount, jfresh = rings.recv, rings.jcount, rings.jfresh
    rep, group = params.rep, params.group
    R = rings.jid.shape[0]
    taken = 0
    for z in range(lo, hi):
        w = order[z]
        if counts[w] or A[w, 0] > by:
            continue
        counts[w] = 1
        taken += 1
        cur[w] = False
        leave(w, tracks, E)
        u = job_of[w]
        if sr_receive(u, w, u == t, u % R, recv, jcount, jfresh) and due and u == old and rep:
            if gcov[group[w]] == 0:
                uncovered -= 1
            gcov[group[w]] += 1
    return taken, uncovered


@njit(cache=True)
def sr_job(u, jid, recv, jcount, jfresh, jfin):
    """Job ``u``'s ring slot, new if it has none (``_job(u)``); ``False`` if the slot still holds
    a job that was never forgotten."""
    x = u % jid.shape[0]
    if jid[x] == u:
        return True
    if jid[x] >= 0:
        return False
    jid[x] = u
    recv[x, :] = False
    jcount[x] = 0
    jfresh[x] = 0
    jfin[x] = False
    return True


# The kernels' inputs and outputs as named records (numba passes named tuples of arrays as they
# are): the block's :data:`~gradcode.schemes.compiled.Timing`, the scheme's parameters, its state
# as rings, and the block's output tables.

#: SR-SGC's round: ``t``, the re-attempted job ``old`` and whether it is ``due``, each worker's
#: ``job_of``, the stragglers so far ``cur``, messages received ``counts``, arrivals ``A``, and the
#: due job's results per group ``gcov`` (GC-Rep)
SRNow = namedtuple("SRNow", "t old due job_of cur counts A gcov")
#: SR-SGC's parameters: ``B``, ``W``, ``lam``, ``s``, ``J`` (jobs, -1: unbounded), ``rep`` (GC-Rep),
#: ``group`` (each worker's GC-Rep group), ``groups``, ``prefix`` (the loads' message prefixes)
SRParams = namedtuple("SRParams", "B W lam s J rep group groups prefix")
#: SR-SGC's state: track flags at ``a mod (W + 1)`` (``fl_id`` the start or -1, ``fl_st`` 1 flags /
#: 2 broken, ``fl_val`` per model: bursty, per-round), jobs at ``u mod (B + 2)`` (``jid`` the job
#: or -1, ``recv``, ``jcount``, ``jfresh`` = N(u), ``jfin``)
SRRings = namedtuple("SRRings", "fl_id fl_st fl_val jid recv jcount jfresh jfin")
#: M-SGC's round: ``t``, message ``c`` of worker ``i`` as its ``slot``, ``kind`` and ``kk``
#: (:func:`_m_plan`), messages ``planned`` and received (``counts``), the stragglers so far ``cur``,
#: each worker's ``last`` message received and the arrivals ``A``
MNow = namedtuple("MNow", "t slot kind kk planned cur counts last A")
#: M-SGC's parameters: ``B``, ``W``, ``lam``, ``J``, ``rep``, ``group``, ``groups``, ``coded_last``
#: (the last partition of each worker's coded mini-task, -1: none), ``size1``/``size2`` (a
#: ``D_1`` / ``D_2`` chunk's data fraction)
MParams = namedtuple("MParams", "B W lam J rep group groups coded_last size1 size2")
#: M-SGC's jobs by ``u mod (T + 2)`` (the job part of :class:`MRings`, what the protocol path
#: keeps): ``jid``, ``have``, ``missing``, ``coded``, ``coded_n``, ``cov``, ``uncov``, ``jfin``
MJobs = namedtuple("MJobs", "jid have missing coded coded_n cov uncov jfin")
#: M-SGC's state: track flags by job (``fl_*``, models: bursty, arbitrary), jobs by ``u mod (T +
#: 2)``: ``jid``, ``have`` ``(n, W - 1)`` D_1 chunks held, ``missing``, ``coded`` ``(B, n)`` coded
#: results held, ``coded_n``, ``cov``/``uncov`` (GC-Rep: results per group, groups uncovered), ``jfin``
MRings = namedtuple("MRings", "fl_id fl_st fl_val jid have missing coded coded_n cov uncov jfin")
#: a block's output: ``records`` (keep arrivals and finishes), the rounds' ``end``, ``waited``,
#: ``strag``, ``arr``, ``fin``, the jobs finished and their rounds (``fjobs``, ``frounds``) and
#: ``info`` (the slots above)
Tables = namedtuple("Tables", "records end waited strag arr fin fjobs frounds info")


@njit(cache=True)
def srsgc_rounds(t0, timing, params, hist, rings, out):
    """SR-SGC's rounds ``t0 .. t0 + m - 1`` (module docstring) on :class:`SRParams` and the state
    :class:`SRRings`, into :class:`Tables` and the straggler history ``hist``."""
    ic, sl_, c, mu, wait_all = timing
    B, W, lam, s, J, rep, group, groups, prefix = params
    fl_id, fl_st, fl_val, jid, recv, jcount, jfresh, jfin = rings
    records, end, waited, strag, arr, fin, fjobs, frounds, info = out
    m_rounds, n = ic.shape
    T = B
    need_n = n - s
    max_cur = max(lam, s)
    R = jid.shape[0]
    kinds = np.array([BURSTY, PER_ROUND], dtype=np.int64)
    Ns = np.array([B, 0], dtype=np.int64)
    Ws = np.array([W, 0], dtype=np.int64)
    lims = np.array([lam, s], dtype=np.int64)
    M = 2
    models = Models(kinds, Ns, Ws, lims)
    flags = Flags(fl_id, fl_st, fl_val)
    tracks = scratch(W, M, n)
    prev, base, lim, fcnt = tracks.prev, tracks.base, tracks.lim, tracks.fcnt
    job_of = np.empty(n, dtype=np.int64)
    planned = np.zeros(n, dtype=np.int64)
    counts = np.zeros(n, dtype=np.int64)
    cur = np.zeros(n, dtype=np.bool_)
    last = np.empty(n)
    A = np.zeros((n, 1))
    prefix2 = prefix.reshape(n, 1)
    ct = np.empty(n)
    comp = np.zeros(n)
    cw = np.empty(n, dtype=np.int64)
    gseen = np.zeros(max(groups, 1), dtype=np.bool_)
    gcov = np.zeros(max(groups, 1), dtype=np.int64)
    nfin = 0
    for k in range(m_rounds):
        t = t0 + k
        # ---- plan: Algorithm 1 (3 for GC-Rep)
        own = _in_range(t, J)
        for w in range(n):
            job_of[w] = t if own else -1
        old = t - B
        xo = old % R
        due = _in_range(old, J) and not (jid[xo] == old and jfin[xo])
        if (own and not sr_job(t, jid, recv, jcount, jfresh, jfin)) or (
                due and not sr_job(old, jid, recv, jcount, jfresh, jfin)):
            info[STATUS] = 2
            info[AT] = t
            return
        if due:
            info[REATTEMPTS] += sr_reattempts(old, recv[xo], jfresh[xo], need_n, rep, group, gseen, job_of)
        last_job = -1
        ncur = 0
        nplanned = 0
        for w in range(n):
            p = 1 if job_of[w] >= 0 else 0
            planned[w] = p
            counts[w] = 0
            cur[w] = p > 0
            ncur += p
            nplanned += p
            if job_of[w] > last_job:
                last_job = job_of[w]
        if last_job > info[LAST_JOB]:
            info[LAST_JOB] = last_job
        # ---- conformance: tracks a = max(0, t - W + 1) .. t that are not broken
        K = 0
        for a in range(max(0, t - W + 1), t + 1):
            K = _live_track(a, K, M, tracks, flags)
        begin(t, hist, tracks, K, models, cur)
        E = K * M
        # ---- the due job's state (job t - B): decodable once n - s results (one per group)
        due_ok = True
        uncovered = 0
        if due:
            if rep:
                for g in range(groups):
                    gcov[g] = 0
                uncovered = groups
                for w in range(n):
                    if recv[xo, w]:
                        if gcov[group[w]] == 0:
                            uncovered -= 1
                        gcov[group[w]] += 1
                due_ok = uncovered == 0
            else:
                due_ok = jcount[xo] >= need_n
        # ---- time the messages
        cwmin, cwmax = time_round(ic, sl_, k, prefix2, planned, c, A, comp)
        now = SRNow(t, old, due, job_of, cur, counts, A, gcov)
        # ---- receive the workers in order of arrival until the round is ready (only completions
        # change readiness), then every message in by the close
        order, head, tau1 = _by_completion(comp, planned, n, ct, cw, ncur - max_cur)
        N = order.shape[0]
        ready0 = ncur <= max_cur and due_ok and all_ok(K, M, ncur, prev, base, lim, fcnt)
        found = ready0
        tau = 0.0
        i = 0
        while not found and i < N:
            stop, tg = _group(order, i, head, tau1, comp)
            taken, uncovered = _sr_take(now, order, i, stop, np.inf, rings, params, tracks, E, uncovered)
            ncur -= taken
            i = stop
            due_ok = not due or (uncovered == 0 if rep else jcount[xo] >= need_n)
            if ncur <= max_cur and due_ok and all_ok(K, M, ncur, prev, base, lim, fcnt):
                found = True
                tau = tg
        e_, wt, ok = close_time(found, ready0, tau, mu, wait_all, nplanned, cwmin, cwmax, cwmin)
        if not ok:
            info[STATUS] = 1
            info[AT] = t
            return
        taken, uncovered = _sr_take(now, order, i, N, e_, rings, params, tracks, E, uncovered)
        ncur -= taken
        for w in range(n):
            if counts[w]:
                last[w] = A[w, 0]
                info[RECEIVED] = 1
        end[k] = e_
        waited[k] = wt
        # ---- close: finish what decodes, record, commit the tracks, forget
        for u in range(max(0, t - T), t + 1):
            x = u % R
            if _in_range(u, J) and jid[x] == u and not jfin[x]:
                if sr_decodable(x, jcount, recv, need_n, rep, group, groups, gseen):
                    jfin[x] = True
                    fjobs[nfin] = u
                    frounds[nfin] = t
                    nfin += 1
        records_row(k, n, planned, counts, last, A, records, strag, arr, fin)
        if not _commit(k, t, strag, hist, tracks, K, M, flags, t - W + 1):
            info[STATUS] = 2
            info[AT] = t
            return
        _forget(t - T - 1, jid, jfin)
        info[PLAYED] = k + 1
        info[FINISHED] = nfin


# ------------------------------------------------------------------------------------- M-SGC


@njit(cache=True)
def m_group_ok(x, g, coded_n, uncov, need_n, rep):
    """Whether coded group ``g`` of the job in ring slot ``x`` decodes: ``n - lam`` results, or
    every GC-Rep group covered."""
    return uncov[x, g] == 0 if rep else coded_n[x, g] >= need_n


@njit(cache=True)
def m_decodable(x, Bc, missing, coded_n, uncov, need_n, rep):
    """Whether the job in ring slot ``x`` decodes: every ``D_1`` chunk held and each of its
    ``Bc`` coded groups decodes. The protocol path (``MSGC._decodable``) and
    :func:`msgc_rounds` both decide with it."""
    if missing[x]:
        return False
    for g in range(Bc):
        if not m_group_ok(x, g, coded_n, uncov, need_n, rep):
            return False
    return True


@njit(cache=True)
def _m_new_job(x, u, rings, groups):
    """Job ``u`` takes ring slot ``x``: nothing held yet."""
    jid, have, missing, coded, coded_n, cov, uncov, jfin = (rings.jid, rings.have, rings.missing, rings.coded,
                                                           rings.coded_n, rings.cov, rings.uncov, rings.jfin)
    jid[x] = u
    have[x] = False
    missing[x] = have.shape[1] * have.shape[2]
    coded[x] = False
    coded_n[x] = 0
    cov[x] = 0
    uncov[x] = groups
    jfin[x] = False


@njit(cache=True, inline="always")
def m_receive_chunk(x, w, g, have, missing):
    """Worker ``w``'s ``D_1`` chunk ``g`` of the job in ring slot ``x``, counted once; returns
    whether it was new. With :func:`m_receive_coded`, M-SGC's receipt, which the protocol path
    (``MSGC._receive``, :func:`m_receive_all`) runs; :func:`_m_take` writes the same lines out in
    its loop, because as calls there they slow the compiled rounds (BENCHMARKS.md, "2026-11-27: the
    kernels' arguments as named records, the conformance helpers inlined"), and the three-path
    tests hold the two to the same states."""
    if have[x, w, g]:
        return False
    have[x, w, g] = True
    missing[x] -= 1
    return True


@njit(cache=True, inline="always")
def m_receive_coded(x, w, g, coded, coded_n, cov, uncov, rep, group):
    """Worker ``w``'s coded result for group ``g`` of the job in ring slot ``x``, counted once
    (GC-Rep: the group's coverage too); returns whether it was new."""
    if coded[x, g, w]:
        return False
    coded[x, g, w] = True
    coded_n[x, g] += 1
    if rep:
        q = group[w]
        if cov[x, g, q] == 0:
            uncov[x, g] -= 1
        cov[x, g, q] += 1
    return True


@njit(cache=True)
def m_receive(x, w, kind, g, jobs, rep, group):
    """A message of worker ``w`` for the job in ring slot ``x`` (``jobs``: :class:`MJobs` or the
    rings): a ``D_1`` chunk ``g`` (``kind`` 0) or a coded result for group ``g``; returns whether
    it was new."""
    if kind == 0:
        return m_receive_chunk(x, w, g, jobs.have, jobs.missing)
    return m_receive_coded(x, w, g, jobs.coded, jobs.coded_n, jobs.cov, jobs.uncov, rep, group)


@njit(cache=True)
def m_receive_all(t, workers, indices, slot, kind, kk, jobs, rep, group):
    """:func:`m_receive` for a batch of messages of round ``t`` (worker, index)."""
    have, missing, coded, coded_n, cov, uncov = jobs.have, jobs.missing, jobs.coded, jobs.coded_n, jobs.cov, jobs.uncov
    R = jobs.jid.shape[0]
    for z in range(workers.shape[0]):
        w, i = workers[z], indices[z]
        x = (t - slot[w, i]) % R
        if kind[w, i] == 0:
            m_receive_chunk(x, w, kk[w, i], have, missing)
        else:
            m_receive_coded(x, w, kk[w, i], coded, coded_n, cov, uncov, rep, group)


@njit(cache=True)
def m_job(u, jobs, groups):
    """Job ``u``'s ring slot, opened if new (:func:`_m_new_job`, as :func:`_m_plan` opens them);
    ``False`` if the slot still holds a job that was never forgotten."""
    x = u % jobs.jid.shape[0]
    if jobs.jid[x] == u:
        return True
    if jobs.jid[x] >= 0:
        return False
    _m_new_job(x, u, jobs, groups)
    return True


@njit(cache=True, inline="always")
def _m_take(now, order, lo, hi, last_only, by, rings, params, tracks, E):
    """Receive, for workers ``order[lo:hi]``, their last message (``last_only``: the scan) or
    every message that arrived by ``by`` (then ``counts`` and ``last`` are set); a worker whose
    last message is in leaves the round's stragglers. Returns how many left. Receiving is
    idempotent (a message already held changes nothing), so the close's pass may take the
    scan's messages again. One call per batch of workers, the receipt (:func:`m_receive_chunk`,
    :func:`m_receive_coded`) written out in the loop: a call per message costs more than the
    receipt itself."""
    t, slot, kind, kk, planned, cur, counts, last, A = now
    have, missing, coded, coded_n, cov, uncov = rings.have, rings.missing, rings.coded, rings.coded_n, rings.cov, rings.uncov
    rep, group = params.rep, params.group
    R = rings.jid.shape[0]
    taken = 0
    for z in range(lo, hi):
        w = order[z]
        p = planned[w]
        a = p - 1 if last_only else 0
        b = p
        if not last_only:
            b = 0
            while b < p and A[w, b] <= by:
                b += 1
            counts[w] = b
            if b:
                last[w] = A[w, b - 1]
        for i in range(a, b):
            x = (t - slot[w, i]) % R
            g = kk[w, i]
            if kind[w, i] == 0:
                if not have[x, w, g]:
                    have[x, w, g] = True
                    missing[x] -= 1
            elif not coded[x, g, w]:
                coded[x, g, w] = True
                coded_n[x, g] += 1
                if rep:
                    q = group[w]
                    if cov[x, g, q] == 0:
                        uncov[x, g] -= 1
                    cov[x, g, q] += 1
        if b == p and p > 0 and cur[w]:
            taken += 1
            cur[w] = False
            leave(w, tracks, E)
    return taken


@njit(cache=True, inline="always")
def m_plan_slot(j, W, have, coded_ok, slot, kind, kk, planned):
    """Algorithm 2's mini-task in slot ``j`` (job ``t - j``) for every worker, appended at its
    ``planned`` column: slots ``j <= W - 2`` the fixed ``D_1`` chunk ``j``; later slots the first
    ``D_1`` chunk of the job the worker does not hold (``have``: ``(n, W - 1)``), a re-attempt, or
    once it holds them all the coded mini-task of group ``j - (W - 1)`` (none when ``lam = n``:
    ``coded_ok`` false, Remark 3.2). The protocol path (``MSGC._new_round``) and
    :func:`msgc_rounds` both plan with it."""
    for w in range(planned.shape[0]):
        col = planned[w]
        if j <= W - 2:  # fixed mini-task: D_1 chunk j of the job
            slot[w, col], kind[w, col], kk[w, col] = j, 0, j
            planned[w] = col + 1
            continue
        first = -1  # the first D_1 chunk not held: a re-attempt
        for b in range(W - 1):
            if not have[w, b]:
                first = b
                break
        if first < 0:
            if coded_ok:
                slot[w, col], kind[w, col], kk[w, col] = j, 1, j - (W - 1)
                planned[w] = col + 1
        else:
            slot[w, col], kind[w, col], kk[w, col] = j, 0, first
            planned[w] = col + 1


@njit(cache=True)
def _m_plan(now, S, coded_ok, params, rings):
    """Algorithm 2 for round ``now.t`` (``MSGC._new_round``): message ``c`` of worker ``i`` is slot
    ``slot[i, c]`` (job ``t - slot``), a ``D_1`` chunk ``kk`` (``kind`` 0) or the coded mini-task
    of group ``kk`` (``kind`` 1); ``planned[i]`` messages. Opens the jobs it names. Returns the
    highest job given work (-1: none), or -2 if a ring slot still holds a job never forgotten."""
    t, slot, kind, kk, planned = now.t, now.slot, now.kind, now.kk, now.planned
    J, W, groups = params.J, params.W, params.groups
    jid, have = rings.jid, rings.have
    R = jid.shape[0]
    n = planned.shape[0]
    for w in range(n):
        planned[w] = 0
    last_job = -1
    for j in range(S):
        u = t - j
        if not _in_range(u, J):
            continue
        last_job = max(last_job, u)
        x = u % R
        if jid[x] != u:
            if jid[x] >= 0:
                return -2
            _m_new_job(x, u, rings, groups)
        m_plan_slot(j, W, have[x], coded_ok, slot, kind, kk, planned)
    return last_job


@njit(cache=True)
def _m_loads(planned, kind, loads, memo, memo_n, size1, size2, lam, coded_last):
    """Each worker's prefix loads (``MSGC._round_loads``: ``task_schedule``'s running sum over its
    mini-tasks' partitions, a message ready at the last partition its coefficients use, then the
    running maximum), recomputed only for workers whose kinds differ from the row timed last."""
    for w in range(planned.shape[0]):
        p = planned[w]
        same = memo_n[w] == p
        if same:
            for i in range(p):
                if memo[w, i] != kind[w, i]:
                    same = False
                    break
        if same:
            continue
        acc = 0.0
        pv = 0.0
        for i in range(p):
            if kind[w, i] == 0:
                acc += size1
                v = acc
            else:
                v = 0.0
                for q in range(lam + 1):
                    acc += size2
                    if q == coded_last[w]:
                        v = acc
            if i and not v >= pv:
                v = pv
            loads[w, i] = v
            pv = v
            memo[w, i] = kind[w, i]
        memo_n[w] = p


@njit(cache=True)
def msgc_rounds(t0, timing, params, hist, rings, out):
    """M-SGC's rounds ``t0 .. t0 + m - 1`` (module docstring) on :class:`MParams` and the state
    :class:`MRings`, into :class:`Tables` and the straggler history ``hist``."""
    ic, sl_, c, mu, wait_all = timing
    B, W, lam, J, rep, group, groups, coded_last, size1, size2 = params
    fl_id, fl_st, fl_val, jid, have, missing, coded, coded_n, cov, uncov, jfin = rings
    records, end, waited, strag, arr, fin, fjobs, frounds, info = out
    m_rounds, n = ic.shape
    T = W - 2 + B
    S = W - 1 + B
    coded_ok = lam < n
    Bc = B if coded_ok else 0
    need_n = n - lam
    max_cur = lam
    R = jid.shape[0]
    FR = fl_id.shape[0]
    kinds = np.array([BURSTY, ARBITRARY], dtype=np.int64)
    Ns = np.array([B, B], dtype=np.int64)
    Ws = np.array([W, W + B - 1], dtype=np.int64)
    lims = np.array([lam, lam], dtype=np.int64)
    M = 2
    models = Models(kinds, Ns, Ws, lims)
    flags = Flags(fl_id, fl_st, fl_val)
    tracks = scratch(T + 1, M, n)
    prev, base, lim, fcnt = tracks.prev, tracks.base, tracks.lim, tracks.fcnt
    slot = np.zeros((n, S), dtype=np.int64)
    kind = np.zeros((n, S), dtype=np.int8)
    kk = np.zeros((n, S), dtype=np.int64)
    planned = np.zeros(n, dtype=np.int64)
    counts = np.zeros(n, dtype=np.int64)
    cur = np.zeros(n, dtype=np.bool_)
    last = np.empty(n)
    A = np.zeros((n, S))
    loads = np.zeros((n, S))
    memo = np.full((n, S), -1, dtype=np.int8)  # the kinds each worker's loads row was timed for
    memo_n = np.full(n, -1, dtype=np.int64)
    ct = np.empty(n)
    comp = np.zeros(n)
    cw = np.empty(n, dtype=np.int64)
    everyone = np.arange(n)
    nfin = 0
    for k in range(m_rounds):
        t = t0 + k
        # ---- plan: Algorithm 2
        now = MNow(t, slot, kind, kk, planned, cur, counts, last, A)
        last_job = _m_plan(now, S, coded_ok, params, rings)
        if last_job == -2:
            info[STATUS] = 2
            info[AT] = t
            return
        if last_job > info[LAST_JOB]:
            info[LAST_JOB] = last_job
        ncur = 0
        nplanned = 0
        for w in range(n):
            counts[w] = 0
            cur[w] = planned[w] > 0
            if planned[w] > 0:
                ncur += 1
                nplanned += 1
        # ---- conformance: one track per live job u in [t - T, t] not finished (and not broken)
        K = 0
        for u in range(max(0, t - T), t + 1):
            x = u % R
            if not _in_range(u, J) or (jid[x] == u and jfin[x]):
                continue
            K = _live_track(u, K, M, tracks, flags)
        begin(t, hist, tracks, K, models, cur)
        E = K * M
        # ---- prefix loads (task_schedule's running sums), memoised per worker by its kinds
        _m_loads(planned, kind, loads, memo, memo_n, size1, size2, lam, coded_last)
        # ---- time the messages
        cwmin, cwmax = time_round(ic, sl_, k, loads, planned, c, A, comp)
        # ---- receive the workers in order of completion until the round is ready: only a worker's
        # last message changes readiness (it ends the worker's stragglership, and the due job's
        # mini-tasks are in slot T, each worker's last); then every message in by the close
        u_due = t - T
        xd = u_due % R
        due = _in_range(u_due, J) and not (jid[xd] == u_due and jfin[xd])
        ready0 = ncur <= max_cur and (not due or (jid[xd] == u_due and m_decodable(
            xd, Bc, missing, coded_n, uncov, need_n, rep))) and all_ok(K, M, ncur, prev, base, lim, fcnt)
        found = ready0
        tau = 0.0
        order, head, tau1 = _by_completion(comp, planned, n, ct, cw, ncur - max_cur)
        N = order.shape[0]
        i = 0
        while not found and i < N:
            stop, tg = _group(order, i, head, tau1, comp)
            ncur -= _m_take(now, order, i, stop, True, np.inf, rings, params, tracks, E)
            i = stop
            if ncur <= max_cur and (not due or (jid[xd] == u_due and m_decodable(
                    xd, Bc, missing, coded_n, uncov, need_n, rep))) and all_ok(K, M, ncur, prev, base, lim, fcnt):
                found = True
                tau = tg
        first = np.inf
        for w in range(n):
            if planned[w] and A[w, 0] < first:
                first = A[w, 0]
        e_, wt, ok = close_time(found, ready0, tau, mu, wait_all, nplanned, cwmin, cwmax, first)
        if not ok:
            info[STATUS] = 1
            info[AT] = t
            return
        ncur -= _m_take(now, everyone, 0, n, False, e_, rings, params, tracks, E)
        for w in range(n):
            if counts[w]:
                info[RECEIVED] = 1
                break
        end[k] = e_
        waited[k] = wt
        # ---- close: finish, record, commit; the ending tracks are t - T and the jobs finished
        # before this round (those finished now end with the next round's commit)
        for u in range(max(0, t - T), t + 1):
            x = u % FR
            if _in_range(u, J) and jid[u % R] == u and jfin[u % R] and u > t - T and fl_id[x] == u:
                fl_id[x] = -1
                fl_st[x] = 0
        for u in range(max(0, t - T), t + 1):
            x = u % R
            if _in_range(u, J) and jid[x] == u and not jfin[x]:
                if m_decodable(x, Bc, missing, coded_n, uncov, need_n, rep):
                    jfin[x] = True
                    fjobs[nfin] = u
                    frounds[nfin] = t
                    nfin += 1
        records_row(k, n, planned, counts, last, A, records, strag, arr, fin)
        if not _commit(k, t, strag, hist, tracks, K, M, flags, t - T):
            info[STATUS] = 2
            info[AT] = t
            return
        _forget(t - T - 1, jid, jfin)
        info[PLAYED] = k + 1
        info[FINISHED] = nfin
