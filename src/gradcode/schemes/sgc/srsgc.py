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

from gradcode.schemes.base import SCHEMES, ProtocolError, Task
from gradcode.schemes.sgc.common import BaseGC, SequentialScheme, _Round, check_params
from gradcode.schemes.sgc.rounds import (
    REATTEMPTS,
    SRParams,
    SRRings,
    sr_decodable,
    sr_job,
    sr_reattempts,
    sr_receive,
    sr_receive_all,
    srsgc_rounds,
)
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
    """A job's state as checkpoints written before the rings kept it (read when one is resumed:
    :meth:`SRSGC.__setstate__`)."""

    def __setstate__(self, state):
        self.u, self.count, self.fresh, self.msgs = state["u"], state["count"], state["fresh"], state["msgs"]
        self.recv = np.frombuffer(bytearray(state["buf"]), dtype=bool)


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
        self._compiled()
        self._new_rings()
        #: re-attempted tasks per round (Algorithm 1's deviations from the base GC), for inspection
        self.reattempts = 0

    def _new_rings(self) -> None:
        """The jobs' state as the compiled rounds keep it, by ``u mod B + 2`` (:class:`SRRings`):
        the job or -1 (``_jid``), who returned it (``_recv``), how many (``_count``), ``N(u)``
        (``_fresh``); the received payloads by job (``_msgs``, the real runs')."""
        R, n = self.B + 2, self.n
        self._jid = np.full(R, -1, dtype=np.int64)
        self._recv = np.zeros((R, n), dtype=bool)
        self._count = np.zeros(R, dtype=np.int64)
        self._fresh = np.zeros(R, dtype=np.int64)
        self._msgs: dict[int, dict] = {}

    def __setstate__(self, state):
        jobs = state.pop("_jobs", None)
        self.__dict__.update(state)
        self._restored()
        self._compiled()
        if jobs is not None:  # a checkpoint written before the rings: its jobs moved into them
            self._new_rings()
            for u, job in jobs.items():
                x = self._job(u)
                self._recv[x], self._count[x], self._fresh[x] = job.recv, job.count, job.fresh
                if job.msgs:
                    self._msgs[u] = dict(job.msgs)

    def live_jobs(self) -> dict[int, dict]:
        """Each live job's state: ``recv`` (who returned it), ``count``, ``fresh`` (``N(u)``)."""
        return {int(u): {"recv": self._recv[x].copy(), "count": int(self._count[x]), "fresh": int(self._fresh[x])}
                for x, u in enumerate(self._jid.tolist()) if u >= 0}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, B={self.B}, W={self.W}, lam={self.lam})"

    @property
    def load(self) -> float:
        """``(s + 1) / n`` (Sec. 3.2)."""
        return (self.s + 1) / self.n

    def stored_partitions(self, worker: int) -> tuple[int, ...]:
        return self.gc.partitions(self._check_worker(worker))

    def _job(self, u: int) -> int:
        """Job ``u``'s ring slot, opened if new (:func:`~gradcode.schemes.sgc.rounds.sr_job`)."""
        if not sr_job(u, self._jid, self._recv, self._count, self._fresh, np.zeros(self._jid.size, dtype=bool)):
            raise ProtocolError(f"{type(self).__name__}: jobs {int(self._jid[u % self._jid.size])} and {u} are both"
                                " live; a job leaves the window T + 1 rounds after its own")
        return u % self._jid.size

    def _slot(self, u: int) -> int | None:
        x = u % self._jid.size
        return x if self._jid[x] == u else None

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
            x = self._job(old)
            self.reattempts += int(sr_reattempts(old, self._recv[x], self._fresh[x], n - self.s, gc.rep,
                                                 self._group, self._gseen, job_of))
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
        u = int(r.plan[w])
        new = sr_receive(u, w, u == r.t, u % self._jid.size, self._recv, self._count, self._fresh)
        if new and payload is not None:
            self._msgs.setdefault(u, {})[w] = payload
            self._file(u, w, w, r.t, index, payload)

    def _receive_batch(self, r: _Round, workers: np.ndarray, indices: np.ndarray) -> None:
        sr_receive_all(r.t, workers.astype(np.int64, copy=False), r.plan, self._recv, self._count, self._fresh)

    def _due_after(self, r: _Round, u: int, at: np.ndarray, never: int) -> int:
        """Job ``u = t - B`` decodes once its re-attempts in round ``t`` bring ``n - s``
        results (one per group for GC-Rep)."""
        x = self._slot(u)
        if x is None:
            return never
        if self._decodable(u):
            return 0
        recv = self._recv[x]
        ws = np.flatnonzero((r.plan == u) & ~recv)
        pos = at[ws, 0]
        if not self._rep:
            k = self.gc.need - int(self._count[x])
            return never if k > ws.size else int(np.partition(pos, k - 1)[k - 1])
        gc = self.gc
        first = np.full(gc.groups, never, dtype=np.intp)
        np.minimum.at(first, gc.group[ws], pos)
        covered = np.bincount(gc.group[recv], minlength=gc.groups) > 0
        return int(first[~covered].max())

    def _decodable(self, u: int) -> bool:
        x = self._slot(u)
        return x is not None and bool(sr_decodable(x, self._count, self._recv, self.n - self.s, self.gc.rep,
                                                   self._group, self.gc.groups or 1, self._gseen))

    def _compiled(self) -> None:
        """What the compiled functions take besides the rings: each worker's GC-Rep group
        (zeros for GC) and a scratch flag per group."""
        gc = self.gc
        self._group = gc.group.astype(np.int64) if gc.rep else np.zeros(self.n, dtype=np.int64)
        self._gseen = np.zeros(max(gc.groups or 0, 1), dtype=bool)

    def _decode(self, u: int) -> np.ndarray:
        msgs = self._msgs[u]
        m_len = next(iter(msgs.values())).shape[-1]
        g = self.gc.decode(msgs, m_len)  # one message (an array or a Message) per worker
        return g[: self._check_dim(m_len)]

    def _forget(self, u: int) -> None:
        x = self._slot(u)
        if x is not None:
            self._jid[x] = -1
        self._msgs.pop(u, None)
        self._where.pop(u, None)

    def _reduce_plans(self, u: int, reduced_by: int) -> list:
        """Job ``u``'s decode (:meth:`_decode`) as one plan: the base GC's over the results held."""
        notes = self._msgs[u]
        where = {w: (rnd, i) for w, (_, rnd, i) in self._where[u].items()}
        m_len = next(iter(notes.values())).length
        return [self.gc.reduce_plan(notes, where, m_len, reduced_by)]

    def _unreceive(self, u: int, key, rnd: int, t: int) -> None:
        """Worker ``key``'s result for job ``u`` is gone. Before the job's re-attempt round
        (``u + B``) Algorithm 1 asks for it again (it counts as not returned, in round ``u`` too);
        from then on, a job that no longer decodes without it cannot finish."""
        w = key
        self._msgs.get(u, {}).pop(w, None)
        x = self._slot(u)
        if x is None or not self._recv[x, w]:
            return
        self._recv[x, w] = False
        self._count[x] -= 1
        if rnd == u:
            self._fresh[x] -= 1
        if rnd < t and t >= u + self.B and not self._decodable(u):
            raise self._lost(u, w, rnd, "its result")

    # ----------------------------------------------------------- compiled rounds
    def _to_rings(self) -> tuple:
        """The state :func:`~gradcode.schemes.sgc.rounds.srsgc_rounds` works on: track flags
        by start ``mod W + 1``; copies of the jobs' rings (a block the kernel cannot finish leaves
        the scheme as it was)."""
        live = [u for u in self._jid.tolist() if u >= 0]
        fl_id, fl_st, fl_val, _, jfin = self._rings(self._jid.size, self.W + 1, live)
        return fl_id, fl_st, fl_val, self._jid.copy(), self._recv.copy(), self._count.copy(), self._fresh.copy(), jfin

    def _from_rings(self, rings, info) -> None:
        fl_id, fl_st, fl_val, self._jid, self._recv, self._count, self._fresh, jfin = rings
        self._unrings(fl_id, fl_st, fl_val, self._jid, jfin)
        self.reattempts += int(info[REATTEMPTS])

    def _kernel(self, first, timing, hist, rings, out) -> None:
        gc = self.gc
        self._round_loads_prefix()
        params = SRParams(self.B, self.W, self.lam, self.s, -1 if self.jobs is None else self.jobs, gc.rep,
                          self._group, gc.groups or 0, self._prefix)
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
