"""SR-SGC (selective-reattempt sequential gradient coding), SGC Sec. 3.2, Algorithm 1, Prop. 3.1,
App. D; and SR-SGC-Rep (App. G, Algorithm 3).

Parameters ``n``, ``B``, ``W``, ``lambda`` with ``0 < lambda <= n``, ``B > 0`` and ``B | (W - 1)``
(``W = x B + 1``, ``x >= 1``). The base code is ``(n, s)``-GC with

    s = ceil(B lambda / (W - 1 + B)) = ceil(lambda / (x + 1)),

delay ``T = B`` and load ``(s + 1) / n`` (Sec. 3.2); ``s <= n - 1`` is needed for the base code.
Worker ``i`` stores the base code's partitions (``n`` equal chunks) for the whole run and in each
round computes either its base-code result for the round's own job, ``l_i(t)``, or a re-attempt of
``l_i(t - B)``:

Algorithm 1 (round ``t``): ``delta = N(t - B)``, the results for job ``t - B`` the master received
in round ``t - B``; for ``i = 0 .. n - 1``: if ``delta < n - s`` and worker ``i`` did not return
``l_i(t - B)`` in round ``t - B``, it re-attempts ``l_i(t - B)`` and ``delta += 1``; otherwise it
computes ``l_i(t)``. (Jobs outside ``[0, J)`` count as complete, ``N = n``.)

Algorithm 3 (SR-SGC-Rep, ``(s + 1) | n``, GC-Rep base): a worker whose group already returned
``l^(g)(t - B)`` in round ``t - B`` computes ``l^(g)(t)``; else Algorithm 1's rule.

Job ``u`` decodes once the master holds base-code results for it that decode (``n - s`` distinct
workers' ``l_i(u)``, or one per group for GC-Rep), from round ``u`` and from the re-attempts of
round ``u + B``. A job that decodes in its own round finishes there (delay 0). The wait-out rule
is in :mod:`.common` (every window of ``W`` rounds bursty or at most ``s`` stragglers per round).
"""

from __future__ import annotations

import numpy as np

from gradcode.schemes.base import SCHEMES, Task
from gradcode.schemes.sgc.common import BaseGC, SequentialScheme, _Round, check_params
from gradcode.schemes.sgc.rounds import REATTEMPTS, SRParams, SRRings, sr_reattempts, srsgc_rounds
from gradcode.schemes.static import task_schedule

__all__ = ["SRSGC", "SRSGCRep", "srsgc_s"]


def srsgc_s(B: int, W: int, lam: int) -> int:
    """``s = ceil(B lambda / (W - 1 + B))`` (Sec. 3.2)."""
    return -(-B * lam // (W - 1 + B))


def check_srsgc(n, B, W, lam, *, rep=False):
    n, B, W, lam = check_params(n, B, W, lam)
    if B < 1:
        raise ValueError(f"SR-SGC needs B > 0 (Sec. 3.2); got B={B}")
    if W < B + 1 or (W - 1) % B:
        raise ValueError(
            f"SR-SGC needs B to divide W - 1, i.e. W = x B + 1 with x >= 1 (Sec. 3.2); got B={B}, W={W}"
        )
    if not 0 < lam <= n:
        raise ValueError(f"SR-SGC needs 0 < lam <= n = {n} (Sec. 3.2); got lam={lam}")
    s = srsgc_s(B, W, lam)
    if s > n - 1:
        raise ValueError(
            f"SR-SGC's base (n, s)-GC needs s = ceil(B lam / (W - 1 + B)) <= n - 1; got s={s} for n={n},"
            f" B={B}, W={W}, lam={lam}"
        )
    if rep and n % (s + 1):
        raise ValueError(
            f"sr-sgc-rep needs (s + 1) to divide n (App. G), s = ceil(B lam / (W - 1 + B)) = {s}; got n={n}"
        )
    return n, B, W, lam, s


class _Job:
    __slots__ = ("buf", "count", "fresh", "msgs", "recv", "u")

    def __init__(self, u, n):
        self.u = u
        self.buf = bytearray(n)  # written per message, read as the numpy view recv
        self.recv = np.frombuffer(self.buf, dtype=bool)  # l_i(u) received from worker i
        self.count = 0
        self.fresh = 0  # N(u): results received in round u
        self.msgs: dict[int, np.ndarray] | None = None

    def __getstate__(self):  # recv is a view of buf: travel as buf alone
        return {"u": self.u, "buf": bytes(self.buf), "count": self.count, "fresh": self.fresh, "msgs": self.msgs}

    def __setstate__(self, state):
        self.u, self.count, self.fresh, self.msgs = state["u"], state["count"], state["fresh"], state["msgs"]
        self.buf = bytearray(state["buf"])
        self.recv = np.frombuffer(self.buf, dtype=bool)


@SCHEMES.register("sr-sgc")
class SRSGC(SequentialScheme):
    """SR-SGC (module docstring): ``n`` workers, ``B``, ``W`` (``B | W - 1``), ``lam``
    (``0 < lam <= n``), delay ``T = B``, load ``(s + 1) / n``. ``seed``: the base CRC's random
    coefficients; ``jobs``: ``J`` (``None``: a new job every round); ``dim``: the gradient
    dimension to decode (default: the message length)."""

    summary = "SR-SGC (SGC Sec. 3.2): (n, s)-GC with selective re-attempts, s = ceil(B lam/(W-1+B)), T = B"
    _rep = False
    _batched_family = True
    _compiled_family = True

    def __init__(self, n: int, B: int, W: int, lam: int, *, seed=0, jobs: int | None = None,
                 dim: int | None = None):
        n, B, W, lam, s = check_srsgc(n, B, W, lam, rep=self._rep)
        self.B, self.W, self.lam, self.s = B, W, lam, s
        self._T = B
        self.gc = BaseGC(n, s, rep=self._rep, seed=seed)
        sizes = np.full(n, 1.0 / n)
        sizes.flags.writeable = False
        self.partition_sizes = sizes
        self._init_common(n, jobs, dim, [("bursty", B, W, lam), ("per-round", s)], max(lam, s))
        self._jobs: dict[int, _Job] = {}
        #: re-attempted tasks per round (Algorithm 1's deviations from the base GC), for inspection
        self.reattempts = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, B={self.B}, W={self.W}, lam={self.lam})"

    @property
    def load(self) -> float:
        """``(s + 1) / n`` (Sec. 3.2)."""
        return (self.s + 1) / self.n

    def stored_partitions(self, worker: int) -> tuple[int, ...]:
        return self.gc.partitions(self._check_worker(worker))

    def _job(self, u: int) -> _Job:
        job = self._jobs.get(u)
        if job is None:
            job = self._jobs[u] = _Job(u, self.n)
        return job

    # ----------------------------------------------------------- Algorithms 1 and 3
    def _new_round(self, t: int) -> _Round:
        """Algorithm 1 (3 for GC-Rep) as arrays: ``plan[i]`` is the job worker ``i`` computes
        ``l_i`` for in round ``t`` (``t``, or ``t - B`` for a re-attempt; ``-1``: idle); the
        re-attempts are :func:`~gradcode.schemes.sgc.rounds.sr_reattempts`, the compiled rounds'
        own."""
        n, gc = self.n, self.gc
        old = t - self.B
        job_of = np.full(n, t if self._job_range(t) else -1, dtype=np.int64)
        if job_of[0] >= 0:
            self._job(t)
        if self._job_range(old) and old not in self._finished:
            job = self._job(old)
            group = gc.group.astype(np.int64) if gc.rep else np.zeros(n, dtype=np.int64)
            self.reattempts += int(sr_reattempts(old, job.recv, job.fresh, n - self.s, gc.rep, group,
                                                 np.zeros(max(gc.groups or 0, 1), dtype=bool), job_of))
        planned = (job_of >= 0).astype(np.intp)
        return _Round(t, planned, job_of, int(job_of.max()))

    def _round_tasks(self, r: _Round) -> dict[int, tuple[Task, ...]]:
        gc = self.gc
        return {i: (Task(u, gc.partitions(i), gc.coefficients(i)),) for i, u in enumerate(r.plan.tolist()) if u >= 0}

    def _round_loads(self, r: _Round) -> np.ndarray:
        """A worker's task is the same for every job (its base-code result): timed once by
        :func:`~gradcode.schemes.static.task_schedule`."""
        return np.where(r.planned > 0, self._round_loads_prefix(), 0.0)[:, None]

    def _round_loads_prefix(self) -> np.ndarray:
        """``(n,)``: the prefix load of each worker's one message, timed once."""
        prefix = self.__dict__.get("_prefix")
        if prefix is None:
            gc, sizes = self.gc, self.partition_sizes
            prefix = self._prefix = np.array(
                [task_schedule([Task(0, gc.partitions(i), gc.coefficients(i))], sizes)[0][0] for i in range(self.n)])
        return prefix

    def _receive(self, r: _Round, w: int, index: int, payload) -> None:
        job = self._jobs[int(r.plan[w])]
        if job.buf[w]:
            return
        job.buf[w] = 1
        job.count += 1
        if job.u == r.t:
            job.fresh += 1
        if payload is not None:
            if job.msgs is None:
                job.msgs = {}
            job.msgs[w] = payload

    def _receive_batch(self, r: _Round, workers: np.ndarray, indices: np.ndarray) -> None:
        of = r.plan[workers]
        for u in (r.t, r.t - self.B):
            ws = workers[of == u]
            if ws.size:
                job = self._jobs[u]
                new = ws[~job.recv[ws]]
                job.recv[new] = True
                job.count += new.size
                if u == r.t:
                    job.fresh += new.size

    def _due_after(self, r: _Round, u: int, at: np.ndarray, never: int) -> int:
        """Job ``u = t - B`` decodes once its re-attempts in round ``t`` bring ``n - s``
        results (one per group for GC-Rep)."""
        job = self._jobs.get(u)
        if job is None:
            return never
        if self.gc.decodable(job.recv, job.count):
            return 0
        ws = np.flatnonzero((r.plan == u) & ~job.recv)
        pos = at[ws, 0]
        if not self._rep:
            x = self.gc.need - job.count
            return never if x > ws.size else int(np.partition(pos, x - 1)[x - 1])
        gc = self.gc
        first = np.full(gc.groups, never, dtype=np.intp)
        np.minimum.at(first, gc.group[ws], pos)
        covered = np.bincount(gc.group[job.recv], minlength=gc.groups) > 0
        return int(first[~covered].max())

    def _decodable(self, u: int) -> bool:
        job = self._jobs.get(u)
        return job is not None and self.gc.decodable(job.recv, job.count)

    def _decode(self, u: int) -> np.ndarray:
        msgs = self._jobs[u].msgs
        m_len = next(iter(msgs.values())).shape[-1]
        g = self.gc.decode(msgs, m_len)  # one message (an array or a Message) per worker
        return g[: self._check_dim(m_len)]

    def _forget(self, u: int) -> None:
        self._jobs.pop(u, None)

    # ----------------------------------------------------------- compiled rounds
    def _to_rings(self) -> tuple:
        """The state :func:`~gradcode.schemes.sgc.rounds.srsgc_rounds` works on: track flags
        by start ``mod W + 1``; jobs by ``u mod B + 2`` with ``recv``, ``count``, ``fresh``."""
        R = self.B + 2
        fl_id, fl_st, fl_val, jid, jfin = self._rings(R, self.W + 1, self._jobs)
        recv = np.zeros((R, self.n), dtype=bool)
        count = np.zeros(R, dtype=np.int64)
        fresh = np.zeros(R, dtype=np.int64)
        for u, job in self._jobs.items():
            x = u % R
            recv[x], count[x], fresh[x] = job.recv, job.count, job.fresh
        return fl_id, fl_st, fl_val, jid, recv, count, fresh, jfin

    def _from_rings(self, rings, info) -> None:
        fl_id, fl_st, fl_val, jid, recv, count, fresh, jfin = rings
        jobs = {}
        for u, x in self._unrings(fl_id, fl_st, fl_val, jid, jfin):
            job = jobs[u] = _Job(u, self.n)
            job.recv[:] = recv[x]
            job.count, job.fresh = int(count[x]), int(fresh[x])
        self._jobs = jobs
        self.reattempts += int(info[REATTEMPTS])

    def _kernel(self, first, timing, hist, rings, out) -> None:
        gc = self.gc
        group = gc.group if gc.rep else np.zeros(self.n, dtype=np.intp)
        self._round_loads_prefix()
        params = SRParams(self.B, self.W, self.lam, self.s, -1 if self.jobs is None else self.jobs, gc.rep,
                          group.astype(np.int64), gc.groups or 0, self._prefix)
        srsgc_rounds(first, timing, params, hist, SRRings(*rings), out)

    def _track_starts(self, t: int):
        return list(range(max(0, t - self.W + 1), t + 1))

    def _ending_tracks(self, t: int):
        return [t - self.W + 1]


@SCHEMES.register("sr-sgc-rep")
class SRSGCRep(SRSGC):
    """SR-SGC-Rep (App. G, Algorithm 3): SR-SGC on GC-Rep, ``(s + 1) | n``; same load, delay and
    wait-out rule as SR-SGC."""

    summary = "SR-SGC-Rep (SGC App. G, Algorithm 3): SR-SGC on GC-Rep, (s + 1) | n"
    _rep = True
