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

from gradcode.codes.messages import as_rows
from gradcode.schemes.base import SCHEMES, Task
from gradcode.schemes.sgc.common import ONE, BaseGC, SequentialScheme, _Round, check_params
from gradcode.schemes.sgc.rounds import MParams, MRings, _m_loads, m_plan_slot, msgc_rounds

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
    __slots__ = ("buf", "cbuf", "coded", "coded_n", "codedmsg", "have", "missing", "parts")

    def n_missing(self) -> np.ndarray:
        """``D_1`` chunks not held, per worker."""
        return self.have.shape[1] - self.have.sum(axis=1)

    def __init__(self, n, W, B):
        # bytearrays written one byte per message, read as numpy views when planning
        self.buf = bytearray(n * (W - 1))
        self.have = np.frombuffer(self.buf, dtype=bool).reshape(n, W - 1)  # D_1 chunk i(W-1)+j' held
        self.missing = n * (W - 1)
        self.cbuf = bytearray(B * n)
        self.coded = np.frombuffer(self.cbuf, dtype=bool).reshape(B, n)  # l_{i,m} held
        self.coded_n = [0] * B
        self.parts: dict[int, np.ndarray] | None = None
        self.codedmsg: list[dict[int, np.ndarray]] | None = None

    def __getstate__(self):  # have and coded are views of the buffers: travel as the buffers alone
        return {"buf": bytes(self.buf), "cbuf": bytes(self.cbuf), "shape": (self.have.shape, self.coded.shape),
                "missing": self.missing, "coded_n": self.coded_n, "parts": self.parts, "codedmsg": self.codedmsg}

    def __setstate__(self, state):
        (have_shape, coded_shape) = state["shape"]
        self.buf = bytearray(state["buf"])
        self.have = np.frombuffer(self.buf, dtype=bool).reshape(have_shape)
        self.cbuf = bytearray(state["cbuf"])
        self.coded = np.frombuffer(self.cbuf, dtype=bool).reshape(coded_shape)
        self.missing, self.coded_n = state["missing"], list(state["coded_n"])
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
        self._jobs: dict[int, _Job] = {}
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

    def live_jobs(self) -> dict[int, dict]:
        """Each live job's state: ``have`` (the ``D_1`` chunks held), ``missing``, ``coded`` (the
        coded results held, per group) and ``coded_n``."""
        return {u: {"have": job.have.copy(), "missing": job.missing, "coded": job.coded.copy(),
                    "coded_n": list(job.coded_n)} for u, job in self._jobs.items()}

    # ----------------------------------------------------------- Algorithm 2
    def _job(self, u: int) -> _Job:
        job = self._jobs.get(u)
        if job is None:
            job = self._jobs[u] = _Job(self.n, self.W, self.B)
        return job

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
            m_plan_slot(j, W, self._job(u).have, self.gc is not None, slot, kind, k, col)
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
        job = self._jobs[r.t - int(slot[w, index])]
        kd, kk = int(kind[w, index]), int(k[w, index])
        if kd == 0:
            b = w * (self.W - 1) + kk  # also the D_1 chunk's partition id
            if not job.buf[b]:
                job.buf[b] = 1
                job.missing -= 1
                if payload is not None:
                    if job.parts is None:
                        job.parts = {}
                    job.parts[b] = payload
        else:
            b = kk * self.n + w
            if not job.cbuf[b]:
                job.cbuf[b] = 1
                job.coded_n[kk] += 1
                if payload is not None:
                    if job.codedmsg is None:
                        job.codedmsg = [{} for _ in range(self.B)]
                    job.codedmsg[kk][w] = payload

    def _receive_batch(self, r: _Round, workers: np.ndarray, indices: np.ndarray) -> None:
        slot, kind, k = r.plan
        js, kinds, ks = slot[workers, indices], kind[workers, indices], k[workers, indices]
        for j in range(kind.shape[1]):
            sel = js == j
            if not sel.any():
                continue
            job = self._jobs[r.t - j]
            ws, kd, kk = workers[sel], kinds[sel], ks[sel]
            d1 = kd == 0
            if d1.any():
                b = ws[d1] * (self.W - 1) + kk[d1]
                held = job.have.reshape(-1)
                new = b[~held[b]]
                held[new] = True
                job.missing -= new.size
            if not d1.all():
                m = j - (self.W - 1)
                cw = ws[~d1]
                held = job.coded[m]
                new = cw[~held[cw]]
                held[new] = True
                job.coded_n[m] += new.size

    def _due_after(self, r: _Round, u: int, at: np.ndarray, never: int) -> int:
        """Job ``u = t - T`` decodes in round ``t`` once every ``D_1`` chunk it misses is
        re-attempted and in (one per worker: a worker missing two cannot finish it now), and its
        last coded group (slot ``T``'s mini-tasks) decodes; its other groups were due earlier."""
        job = self._jobs.get(u)
        if job is None:
            return never
        if self._decodable(u):
            return 0
        slot, kind, _ = r.plan
        rows, cols = np.nonzero(slot == self._T)  # this round's messages for job u: slot T
        pos = at[rows, cols]
        k = 0
        if job.missing:
            miss = job.n_missing()
            if (miss > 1).any():
                return never
            need = miss[rows] == 1
            if int(need.sum()) < job.missing:
                return never
            k = int(pos[need].max())
        if self.gc is None:
            return k
        gc, m = self.gc, self.B - 1
        if any(not gc.decodable(job.coded[g], job.coded_n[g]) for g in range(m)):
            return never
        held = job.coded[m]
        if gc.decodable(held, job.coded_n[m]):
            return k
        coded = (kind[rows, cols] == 1) & ~held[rows]
        ws, p = rows[coded], pos[coded]
        if not gc.rep:
            x = gc.need - job.coded_n[m]
            return never if x > p.size else max(k, int(np.partition(p, x - 1)[x - 1]))
        first = np.full(gc.groups, never, dtype=np.intp)
        np.minimum.at(first, gc.group[ws], p)
        covered = np.bincount(gc.group[held], minlength=gc.groups) > 0
        return max(k, int(first[~covered].max()))

    def _decodable(self, u: int) -> bool:
        job = self._jobs.get(u)
        if job is None or job.missing:
            return False
        if self.gc is None:
            return True
        return all(self.gc.decodable(job.coded[m], job.coded_n[m]) for m in range(self.B))

    def _decode(self, u: int) -> np.ndarray:
        job = self._jobs[u]
        first = next(iter(job.parts.values()))
        m_len = first.shape[-1]
        g = np.zeros(m_len)
        for p in sorted(job.parts):  # g'(u): every D_1 partial gradient
            g += as_rows(job.parts[p])[0]
        if self.gc is not None:  # g''(u): each group's GC
            for m in range(self.B):
                g += self.gc.decode(job.codedmsg[m], m_len)
        return g[: self._check_dim(m_len)]

    def _forget(self, u: int) -> None:
        self._jobs.pop(u, None)

    # ----------------------------------------------------------- compiled rounds
    def _to_rings(self) -> tuple:
        """The state :func:`~gradcode.schemes.sgc.rounds.msgc_rounds` works on: track flags and
        jobs by ``u mod T + 2``; per job ``have``, ``missing``, ``coded``, ``coded_n`` and, for
        GC-Rep, the results per group ``cov`` and the groups not covered ``uncov``."""
        n, B, W, R = self.n, self.B, self.W, self._T + 2
        groups = self.gc.groups if (self.gc is not None and self.gc.rep) else 1
        fl_id, fl_st, fl_val, jid, jfin = self._rings(R, R, self._jobs)
        have = np.zeros((R, n, W - 1), dtype=bool)
        missing = np.zeros(R, dtype=np.int64)
        coded = np.zeros((R, B, n), dtype=bool)
        coded_n = np.zeros((R, B), dtype=np.int64)
        cov = np.zeros((R, B, groups), dtype=np.int64)
        uncov = np.full((R, B), groups, dtype=np.int64)
        for u, job in self._jobs.items():
            x = u % R
            have[x], missing[x], coded[x], coded_n[x] = job.have, job.missing, job.coded, job.coded_n
            if self.gc is not None and self.gc.rep:
                for g in range(B):
                    cov[x, g] = np.bincount(self.gc.group[job.coded[g]], minlength=groups)
                uncov[x] = (cov[x] == 0).sum(axis=1)
        return fl_id, fl_st, fl_val, jid, have, missing, coded, coded_n, cov, uncov, jfin

    def _from_rings(self, rings, info) -> None:
        fl_id, fl_st, fl_val, jid, have, missing, coded, coded_n, cov, uncov, jfin = rings
        jobs = {}
        for u, x in self._unrings(fl_id, fl_st, fl_val, jid, jfin):
            job = jobs[u] = _Job(self.n, self.W, self.B)
            job.have[:] = have[x]
            job.coded[:] = coded[x]
            job.missing, job.coded_n = int(missing[x]), coded_n[x].tolist()
        self._jobs = jobs

    def _kernel(self, first, timing, hist, rings, out) -> None:
        gc, n = self.gc, self.n
        rep = gc is not None and gc.rep
        group = (gc.group if rep else np.zeros(n)).astype(np.int64)
        sizes = self.partition_sizes
        size2 = float(sizes[(self.W - 1) * n]) if gc is not None else 0.0
        params = MParams(self.B, self.W, self.lam, -1 if self.jobs is None else self.jobs, rep, group,
                         gc.groups if rep else 1, self._coded_last, float(sizes[0]), size2)
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
