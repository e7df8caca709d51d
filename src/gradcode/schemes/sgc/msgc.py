"""M-SGC (multiplexed sequential gradient coding), SGC Sec. 3.3, Algorithm 2, eq. (1), Prop. 3.2,
App. E, Remark 3.2; and M-SGC-Rep (App. G).

Parameters ``n``, ``B``, ``W``, ``lambda`` with ``0 < B < W`` and ``0 <= lambda <= n``; delay
``T = W - 2 + B``. With ``X = B + (W - 1)(lambda + 1)`` (Sec. 3.3.2), the data set is cut into
``(W - 1 + B) n`` chunks (partition ids here are the paper's chunk ids):

* ``D_1``: chunks ``0 .. (W - 1) n - 1``, each a fraction ``(lambda + 1) / (n X)`` of the data;
  worker ``i`` stores ``[i (W - 1) : (i + 1)(W - 1) - 1]`` (the text's "[i:(W-1):(i+1)(W-1)-1]"
  is garbled; this is the reading of the Sec. 3.3.1 example, worker 0: D_0, D_1);
* ``D_2``: chunks ``(W - 1) n .. (W - 1 + B) n - 1``, each ``1 / (n X)``, in ``B`` groups of ``n``;
  group ``m`` is the data of its own ``(n, lambda)``-GC: worker ``i`` stores chunks
  ``(W - 1 + m) n + [i : i + lambda]*`` (M-SGC-Rep: its GC-Rep group's ``lambda + 1`` chunks).

Algorithm 2 (round ``t``, worker ``i``; mini-task ``T_i(t; j)`` works on job ``t - j``):

* ``j in [0 : W - 2]``: ``g_{i(W-1)+j}(t - j)`` (fixed, the "diagonal");
* ``j in [W - 1 : W - 2 + B]``: if the master holds all of ``{g_{i(W-1)+j'}(t - j)}_{j'}`` before
  round ``t``, the coded mini-task ``l_{i, j-(W-1)}(t - j)`` of group ``m = j - (W - 1)``;
  otherwise the first of them it does not hold (a re-attempt).

Each mini-task is one :class:`~gradcode.schemes.base.Task` with one message, in slot order, so a
worker's messages stream in the order the paper's worker performs its mini-tasks. Both kinds of
mini-task process the same amount of data, so the load is the same every round: eq. (1),
``L = (lambda + 1)(W - 1 + B) / (n X)`` for ``lambda < n``. Sec. 3.3.1 (``n = 4, B = 2, W = 3,
lambda = 2``): ``X = 8``, chunks ``3/32`` and ``1/32``, ``L = 3/8``.

``lambda = n`` (Remark 3.2): ``D_2`` is empty, the ``(W - 1) n`` chunks of ``D_1`` are equal
(``1 / ((W - 1) n)`` each), coded mini-tasks are trivial (no task is planned for them), a job
finishes as soon as its ``D_1`` chunks are all in, and the load is ``(W - 1 + B) / (n (W - 1))``
(a round may re-attempt in all ``B`` coded slots).

Job ``u`` decodes when the master holds all ``(W - 1) n`` of its ``D_1`` partial gradients (their
sum is ``g'(u)``) and, for each group ``m``, results that decode the group's GC (``g''(u)``, App.
E); the gradient is ``g'(u) + g''(u)``. The wait-out rule is in :mod:`.common` (per-job tracks:
bursty or arbitrary on the job's span ``[u : u + T]``).
"""

from __future__ import annotations

import numpy as np

from dataclasses import replace

from gradcode.codes.messages import as_rows
from gradcode.codes.reduce import merge_plans, reduce_plan, relabel
from gradcode.codes.tandon import Uncoded
from gradcode.schemes.base import SCHEMES, ProtocolError, Task
from gradcode.schemes.sgc.common import ONE, BaseGC, SequentialScheme, _Round, check_params
from gradcode.schemes.sgc.rounds import (
    MJobs,
    MParams,
    MRings,
    _m_loads,
    m_decodable,
    m_group_ok,
    m_job,
    m_plan_slot,
    m_receive,
    m_receive_all,
    msgc_rounds,
)

__all__ = ["MSGC", "MSGCRep", "msgc_partition_sizes"]


def check_msgc(n, B, W, lam, *, rep=False):
    n, B, W, lam = check_params(n, B, W, lam)
    if not B >= 1:
        raise ValueError(f"M-SGC needs 0 < B < W (Sec. 3.3); got B={B}")
    if not W > B:
        raise ValueError(f"M-SGC needs 0 < B < W (Sec. 3.3); got B={B}, W={W}")
    if not 0 <= lam <= n:
        raise ValueError(f"M-SGC needs 0 <= lam <= n = {n} (Sec. 3.3, Remark 3.2); got lam={lam}")
    if rep:
        if lam == n:
            raise ValueError(f"m-sgc-rep needs lam < n (with lam = n there is no coded part); got lam={lam}")
        if n % (lam + 1):
            raise ValueError(f"m-sgc-rep needs (lam + 1) to divide n (App. G); got n={n}, lam={lam}")
    return n, B, W, lam


def msgc_partition_sizes(n: int, B: int, W: int, lam: int) -> np.ndarray:
    """Data fractions of the ``(W - 1 + B) n`` chunks of Sec. 3.3.2 (``(W - 1) n`` for
    ``lambda = n``, Remark 3.2)."""
    n, B, W, lam = check_msgc(n, B, W, lam)
    if lam == n:
        return np.full((W - 1) * n, 1.0 / ((W - 1) * n))
    X = B + (W - 1) * (lam + 1)
    return np.concatenate([np.full((W - 1) * n, (lam + 1) / (n * X)), np.full(B * n, 1.0 / (n * X))])


def msgc_load(n: int, B: int, W: int, lam: int) -> float:
    """Eq. (1)."""
    n, B, W, lam = check_msgc(n, B, W, lam)
    return float(msgc_loads(n, B, W, np.array([lam]))[0])


def msgc_loads(n: int, B: int, W: int, lam: np.ndarray) -> np.ndarray:
    """Eq. (1) for every ``lam`` of an array of valid ones (``0 <= lam <= n``, unchecked): ``(lam +
    1)(W - 1 + B) / (n (B + (W - 1)(lam + 1)))``, and ``(W - 1 + B) / (n (W - 1))`` at ``lam = n``
    (Remark 3.2)."""
    lam = np.asarray(lam, dtype=np.float64)
    coded = (lam + 1) * (W - 1 + B) / (n * (B + (W - 1) * (lam + 1)))
    return np.where(lam == n, (W - 1 + B) / (n * (W - 1)), coded)


class _Job:
    """A job's state as checkpoints written before the rings kept it (read when one is resumed:
    :meth:`MSGC.__setstate__`)."""

    def __setstate__(self, state):
        have_shape, coded_shape = state["shape"]
        self.have = np.frombuffer(bytearray(state["buf"]), dtype=bool).reshape(have_shape)
        self.coded = np.frombuffer(bytearray(state["cbuf"]), dtype=bool).reshape(coded_shape)
        self.parts, self.codedmsg = state["parts"], state["codedmsg"]


@SCHEMES.register("m-sgc")
class MSGC(SequentialScheme):
    """M-SGC (module docstring): ``n`` workers, ``B``, ``W``, ``lam`` (``0 < B < W``,
    ``0 <= lam <= n``), delay ``T = W - 2 + B``, load of eq. (1). ``seed``: the random
    coefficients of the ``B`` ``(n, lam)``-GCs (one code, used for every group). ``jobs``: ``J``,
    the number of jobs (``None``: a new job every round); jobs ``>= J`` are trivial. ``dim``: the
    gradient dimension to decode (default: the message length)."""

    summary = "M-SGC (SGC Sec. 3.3): diagonally interleaved mini-tasks, B (n, lam)-GCs, T = W - 2 + B"
    _rep = False
    _batched_family = True
    _compiled_family = True

    def __init__(self, n: int, B: int, W: int, lam: int, *, seed=0, jobs: int | None = None,
                 dim: int | None = None):
        n, B, W, lam = check_msgc(n, B, W, lam, rep=self._rep)
        self.B, self.W, self.lam = B, W, lam
        self._T = W - 2 + B
        self.partition_sizes = msgc_partition_sizes(n, B, W, lam)
        self.partition_sizes.flags.writeable = False
        self.gc = None if lam == n else BaseGC(n, lam, rep=self._rep, seed=seed)
        models = [("bursty", B, W, lam), ("arbitrary", B, W + B - 1, lam)]
        self._init_common(n, jobs, dim, models, lam)
        self._compiled()
        self._new_rings()
        # D_1's chunk j of worker i is partition i (W - 1) + j; chunk i of D_2's group m is
        # partition (W - 1) n + m n + i, and worker i codes over the base GC's partitions of it
        # (built on demand: B n (lam + 1) tuples would be most of a large M-SGC's build)
        #: the position in its coded mini-task of the last partition worker i's coefficients use
        #: (a message is ready once its worker has computed that far: task_schedule's rule)
        self._coded_last = np.full(n, -1, dtype=np.int64)
        if self.gc is not None:
            self._coded_last[:] = [np.flatnonzero(np.any(self.gc.coefficients(i)[0] != 0, axis=1)).max(initial=-1)
                                   for i in range(n)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, B={self.B}, W={self.W}, lam={self.lam})"

    @property
    def load(self) -> float:
        """Normalized load per worker and round, eq. (1)."""
        return msgc_load(self.n, self.B, self.W, self.lam)

    def stored_partitions(self, worker: int) -> tuple[int, ...]:
        """``W - 1`` chunks of ``D_1`` and ``lam + 1`` chunks of each of the ``B`` groups of
        ``D_2`` (Sec. 3.3.2)."""
        i = self._check_worker(worker)
        own = tuple(range(i * (self.W - 1), (i + 1) * (self.W - 1)))
        if self.gc is None:
            return own
        return own + tuple(p for m in range(self.B) for p in self._coded_partitions(m, i))

    def _coded_partitions(self, m: int, i: int) -> tuple[int, ...]:
        """The partitions of worker ``i``'s coded mini-task for D_2's group ``m``."""
        base = (self.W - 1) * self.n + m * self.n
        return tuple(base + p for p in self.gc.partitions(i))

    def _compiled(self) -> None:
        """What the compiled functions take besides the rings: the GC-Rep groups (one for GC) and
        each worker's group."""
        rep = self.gc is not None and self.gc.rep
        self._groups = self.gc.groups if rep else 1
        self._group = (self.gc.group if rep else np.zeros(self.n)).astype(np.int64)

    def _new_rings(self) -> None:
        """The jobs' state as the compiled rounds keep it, by ``u mod T + 2``
        (:class:`~gradcode.schemes.sgc.rounds.MJobs`); the received payloads by job (``_parts``:
        the ``D_1`` chunks' by partition, ``_coded``: each group's coded results by worker)."""
        n, B, W, R = self.n, self.B, self.W, self._T + 2
        self._m = MJobs(np.full(R, -1, dtype=np.int64), np.zeros((R, n, W - 1), dtype=bool), np.zeros(R, dtype=np.int64),
                        np.zeros((R, B, n), dtype=bool), np.zeros((R, B), dtype=np.int64),
                        np.zeros((R, B, self._groups), dtype=np.int64), np.full((R, B), self._groups, dtype=np.int64),
                        np.zeros(R, dtype=bool))
        self._parts: dict[int, dict] = {}
        self._coded: dict[int, list[dict]] = {}

    def __getstate__(self):  # the rings travel as a plain tuple: a checkpoint rebuilds no named tuple
        state = self.__dict__.copy()
        state["_m"] = tuple(self._m)
        return state

    def __setstate__(self, state):
        jobs = state.pop("_jobs", None)
        self.__dict__.update(state)
        self._restored()
        if "_m" in state:
            self._m = MJobs(*state["_m"])
        if jobs is not None:  # a checkpoint written before the rings: its jobs moved into them
            rep = self.gc is not None and self.gc.rep
            self._compiled()
            self._new_rings()
            for u, job in jobs.items():
                x = self._job(u)
                for w, g in zip(*np.nonzero(job.have)):
                    m_receive(x, int(w), 0, int(g), self._m, False, self._group)
                for g, w in zip(*np.nonzero(job.coded)):
                    m_receive(x, int(w), 1, int(g), self._m, rep, self._group)
                if job.parts:
                    self._parts[u] = dict(job.parts)
                if job.codedmsg:
                    self._coded[u] = [dict(d) for d in job.codedmsg]

    def live_jobs(self) -> dict[int, dict]:
        """Each live job's state: ``have`` (the ``D_1`` chunks held), ``missing``, ``coded`` (the
        coded results held, per group) and ``coded_n``."""
        m = self._m
        return {int(u): {"have": m.have[x].copy(), "missing": int(m.missing[x]), "coded": m.coded[x].copy(),
                         "coded_n": m.coded_n[x].tolist()} for x, u in enumerate(m.jid.tolist()) if u >= 0}

    # ----------------------------------------------------------- Algorithm 2
    def _job(self, u: int) -> int:
        """Job ``u``'s ring slot, opened if new (:func:`~gradcode.schemes.sgc.rounds.m_job`)."""
        if not m_job(u, self._m, self._groups):
            raise ProtocolError(f"{type(self).__name__}: jobs {int(self._m.jid[u % self._m.jid.size])} and {u} are"
                                " both live; a job leaves the window T + 1 rounds after its own")
        return u % self._m.jid.size

    def _slot(self, u: int) -> int | None:
        x = u % self._m.jid.size
        return x if self._m.jid[x] == u else None

    def _new_round(self, t: int) -> _Round:
        """Algorithm 2 as arrays: message ``c`` of worker ``i`` is mini-task slot ``slot[i, c]``
        (job ``t - slot``), a ``D_1`` chunk ``i(W-1) + k[i, c]`` (``kind`` 0) or the coded
        mini-task of group ``k[i, c]`` (``kind`` 1); ``kind`` is -1 past a worker's messages.
        Each slot is :func:`~gradcode.schemes.sgc.rounds.m_plan_slot`, the compiled rounds' own."""
        n, W, B = self.n, self.W, self.B
        S = W - 1 + B
        slot = np.full((n, S), -1, dtype=np.int64)
        kind = np.full((n, S), -1, dtype=np.int8)
        k = np.zeros((n, S), dtype=np.int64)
        col = np.zeros(n, dtype=np.int64)
        last_job = -1
        for j in range(S):
            u = t - j
            if not self._job_range(u):
                continue
            last_job = max(last_job, u)
            m_plan_slot(j, W, self._m.have[self._job(u)], self.gc is not None, slot, kind, k, col)
        return _Round(t, col, (slot, kind, k), last_job)

    def _task(self, t: int, i: int, slot: int, kind: int, k: int) -> Task:
        if kind == 0:
            return Task(t - slot, (i * (self.W - 1) + k,), ONE)
        return Task(t - slot, self._coded_partitions(k, i), self.gc.coefficients(i))

    def _round_tasks(self, r: _Round) -> dict[int, tuple[Task, ...]]:
        slot, kind, k = r.plan
        return {i: tuple(self._task(r.t, i, *x) for x in zip(slot[i, :c].tolist(), kind[i, :c].tolist(), k[i, :c].tolist()))
                for i, c in enumerate(r.planned.tolist()) if c}

    def _round_loads(self, r: _Round) -> np.ndarray:
        """The prefix loads of each worker's messages: :func:`~gradcode.schemes.sgc.rounds._m_loads`,
        the compiled rounds' own closed form of :func:`~gradcode.schemes.static.task_schedule` on
        M-SGC's mini-tasks (every ``D_1`` chunk has one size, every coded chunk another, and a
        coded message is ready where the worker's coefficients end); past a worker's messages its
        last load, as ``task_schedule`` pads."""
        slot, kind, _ = r.plan
        n, S = kind.shape
        loads = np.zeros((n, S))
        sizes = self.partition_sizes
        size2 = float(sizes[(self.W - 1) * n]) if self.gc is not None else 0.0
        _m_loads(r.planned, kind, loads, np.full((n, S), -1, dtype=np.int8), np.full(n, -1, dtype=np.int64),
                 float(sizes[0]), size2, self.lam, self._coded_last)
        last = loads[np.arange(n), np.maximum(r.planned - 1, 0)] * (r.planned > 0)
        past = np.arange(S) >= r.planned[:, None]
        loads[past] = np.broadcast_to(last[:, None], (n, S))[past]
        return loads

    def _receive(self, r: _Round, w: int, index: int, payload) -> None:
        slot, kind, k = r.plan
        u = r.t - int(slot[w, index])
        kd, kk = int(kind[w, index]), int(k[w, index])
        rep = self.gc is not None and self.gc.rep
        if m_receive(u % self._m.jid.size, w, kd, kk, self._m, rep, self._group) and payload is not None:
            if kd == 0:  # the D_1 chunk's partition id
                self._parts.setdefault(u, {})[w * (self.W - 1) + kk] = payload
            else:
                self._coded.setdefault(u, [{} for _ in range(self.B)])[kk][w] = payload
            self._file(u, (kd, kk, w), w, r.t, index, payload)

    def _receive_batch(self, r: _Round, workers: np.ndarray, indices: np.ndarray) -> None:
        slot, kind, k = r.plan
        m_receive_all(r.t, workers.astype(np.int64, copy=False), indices.astype(np.int64, copy=False), slot, kind,
                      k, self._m, self.gc is not None and self.gc.rep, self._group)

    def _due_after(self, r: _Round, u: int, at: np.ndarray, never: int) -> int:
        """Job ``u = t - T`` decodes in round ``t`` once every ``D_1`` chunk it misses is
        re-attempted and in (one per worker: a worker missing two cannot finish it now), and its
        last coded group (slot ``T``'s mini-tasks) decodes; its other groups were due earlier."""
        x = self._slot(u)
        if x is None:
            return never
        if self._decodable(u):
            return 0
        m = self._m
        slot, kind, _ = r.plan
        rows, cols = np.nonzero(slot == self._T)  # this round's messages for job u: slot T
        pos = at[rows, cols]
        k = 0
        if m.missing[x]:
            miss = m.have.shape[2] - m.have[x].sum(axis=1)
            if (miss > 1).any():
                return never
            need = miss[rows] == 1
            if int(need.sum()) < m.missing[x]:
                return never
            k = int(pos[need].max())
        if self.gc is None:
            return k
        gc, last = self.gc, self.B - 1
        if any(not self._group_ok(x, g) for g in range(last)):
            return never
        if self._group_ok(x, last):
            return k
        held = m.coded[x, last]
        coded = (kind[rows, cols] == 1) & ~held[rows]
        ws, p = rows[coded], pos[coded]
        if not gc.rep:
            need_n = gc.need - int(m.coded_n[x, last])
            return never if need_n > p.size else max(k, int(np.partition(p, need_n - 1)[need_n - 1]))
        first = np.full(gc.groups, never, dtype=np.intp)
        np.minimum.at(first, gc.group[ws], p)
        covered = np.bincount(gc.group[held], minlength=gc.groups) > 0
        return max(k, int(first[~covered].max()))

    def _group_ok(self, x: int, g: int) -> bool:
        """Coded group ``g`` of the job in slot ``x`` decodes (:func:`~gradcode.schemes.sgc.rounds.m_group_ok`)."""
        gc = self.gc
        return bool(m_group_ok(x, g, self._m.coded_n, self._m.uncov, self.n - self.lam, gc.rep))

    def _decodable(self, u: int) -> bool:
        x = self._slot(u)
        m = self._m
        return x is not None and bool(m_decodable(x, 0 if self.gc is None else self.B, m.missing, m.coded_n, m.uncov,
                                                  self.n - self.lam, self.gc is not None and self.gc.rep))

    def _decode(self, u: int) -> np.ndarray:
        parts = self._parts[u]
        m_len = next(iter(parts.values())).shape[-1]
        g = np.zeros(m_len)
        for p in sorted(parts):  # g'(u): every D_1 partial gradient
            g += as_rows(parts[p])[0]
        if self.gc is not None:  # g''(u): each group's GC
            for m in range(self.B):
                g += self.gc.decode(self._coded[u][m], m_len)
        return g[: self._check_dim(m_len)]

    def _forget(self, u: int) -> None:
        x = self._slot(u)
        if x is not None:
            self._m.jid[x] = -1
        self._parts.pop(u, None)
        self._coded.pop(u, None)
        self._where.pop(u, None)

    def _reduce_plans(self, u: int, reduced_by: int) -> list:
        """Job ``u``'s decode (:meth:`_decode`) as plans: the ``D_1`` chunks' plain sum (the
        uncoded code over them: weight 1 each, not judged, as :meth:`_decode` does not judge it)
        and each group's GC decode. The groups the plain-sum rule accepts before the sum are joined
        with the ``D_1`` sum into one plan; a group judged after the sum keeps a plan (and a part of
        the reduction) of its own, judged on its own decoded norm, as :meth:`_decode` judges it."""
        where = self._where[u]
        parts = self._parts[u]
        chunks = sorted(parts)
        W = self.W
        m_len = parts[chunks[0]].length
        d1 = reduce_plan(Uncoded(len(chunks)), {q: [parts[p]] for q, p in enumerate(chunks)}, dim=m_len,
                         reduced_by=reduced_by)
        plans = [replace(relabel(d1, {q: (p // (W - 1), [where[(0, p % (W - 1), p // (W - 1))][1:]])
                                      for q, p in enumerate(chunks)}), checked=True)]
        if self.gc is not None:
            for m in range(self.B):
                coded = self._coded[u][m]
                plans.append(self.gc.reduce_plan(coded, {w: where[(1, m, w)][1:] for w in coded}, m_len, reduced_by))
        return [merge_plans([p for p in plans if p.checked])] + [p for p in plans if not p.checked]

    def _unreceive(self, u: int, key, rnd: int, t: int) -> None:
        """A result of job ``u`` is gone: a ``D_1`` chunk or a group's coded result (``key``:
        ``(kind, k)``). One of round ``t`` is computed again by the task sent again; one of an
        earlier round is not asked for again unless its group decodes without it (re-attempts
        take the place of the worker's coded mini-tasks, beyond the straggler model the paper's
        guarantee covers), so its loss stops the run."""
        kind, k, w = key
        x = self._slot(u)
        m = self._m
        if kind == 0:
            self._parts.get(u, {}).pop(w * (self.W - 1) + k, None)
            if x is not None and m.have[x, w, k]:
                m.have[x, w, k] = False
                m.missing[x] += 1
            if rnd < t:
                raise self._lost(u, w, rnd, f"its D_1 chunk {k}")
            return
        if u in self._coded:
            self._coded[u][k].pop(w, None)
        if x is not None and m.coded[x, k, w]:
            m.coded[x, k, w] = False
            m.coded_n[x, k] -= 1
            if self.gc.rep:
                q = int(self._group[w])
                m.cov[x, k, q] -= 1
                if m.cov[x, k, q] == 0:
                    m.uncov[x, k] += 1
        if rnd < t and x is not None and not self._group_ok(x, k):
            raise self._lost(u, w, rnd, f"its coded result for group {k}")

    # ----------------------------------------------------------- compiled rounds
    def _to_rings(self) -> tuple:
        """The state :func:`~gradcode.schemes.sgc.rounds.msgc_rounds` works on: track flags by
        job, and copies of the jobs' rings (a block the kernel cannot finish leaves the scheme as
        it was)."""
        m = self._m
        live = [u for u in m.jid.tolist() if u >= 0]
        fl_id, fl_st, fl_val, _, jfin = self._rings(m.jid.size, m.jid.size, live)
        return (fl_id, fl_st, fl_val, *(a.copy() for a in m[:-1]), jfin)

    def _from_rings(self, rings, info) -> None:
        fl_id, fl_st, fl_val, *jobs = rings
        self._m = MJobs(*jobs)
        self._unrings(fl_id, fl_st, fl_val, self._m.jid, self._m.jfin)

    def _kernel(self, first, timing, hist, rings, out) -> None:
        gc, n = self.gc, self.n
        sizes = self.partition_sizes
        size2 = float(sizes[(self.W - 1) * n]) if gc is not None else 0.0
        params = MParams(self.B, self.W, self.lam, -1 if self.jobs is None else self.jobs, gc is not None and gc.rep,
                         self._group, self._groups, self._coded_last, float(sizes[0]), size2)
        msgc_rounds(first, timing, params, hist, MRings(*rings), out)

    def _track_starts(self, t: int):
        lo = max(0, t - self._T)
        return [u for u in range(lo, t + 1) if self._job_range(u) and u not in self._finished]

    def _ending_tracks(self, t: int):
        ending = [t - self._T] + [u for u in self._finished if u > t - self._T]
        return ending


@SCHEMES.register("m-sgc-rep")
class MSGCRep(MSGC):
    """M-SGC-Rep (App. G): M-SGC whose ``B`` coded groups use GC-Rep (``(lam + 1) | n``: worker
    ``i`` in group ``floor(i / (lam + 1))`` sends the plain sum of its group's chunks; one
    result per group decodes). Same load, delay and wait-out rule as M-SGC."""

    summary = "M-SGC-Rep (SGC App. G): M-SGC with GC-Rep coded groups, (lam + 1) | n"
    _rep = True
