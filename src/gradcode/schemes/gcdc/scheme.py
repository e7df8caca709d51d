"""The GC-DC scheme: dynamic clustering run round by round behind the :class:`Scheme` protocol.

Buyukates, Ozfatura, Ulukus, Gunduz, *Gradient Coding with Dynamic Clustering*, Secs. IV-VI.

Construction (done once):

* **codeword construction** (Sec. IV-A): the ``K`` codewords of GC-SC with contiguous clusters,
  i.e. :class:`~gradcode.codes.clustering.GCSC` ``(n=K, clusters=P, s=r-1)``: cluster ``p`` owns
  partitions ``p l .. p l + l - 1`` and its ``l`` codewords ``c_{p,i}`` form a cyclic repetition
  code (each a combination of ``r`` partial gradients) decodable from any ``l - r + 1`` of them.
  Codeword ``c_{p,i}`` is "worker" ``p l + i`` of that code (its placement and encoder);
* **codeword distribution** (Sec. IV-B): a :class:`ClusterAssignment` gives each worker ``n_c``
  clusters and stores their ``n_c l`` partitions (``stored_partitions``).

Each round ``t`` (dynamic clustering, Sec. IV-C and V): ``plan(t)`` runs Algorithm 1
(:func:`dynamic_clustering`) on the straggler information for round ``t`` and gives worker ``w`` a
Task with the codeword ``c_{p,i}`` it serves: its ``r`` partitions and encoder coefficients. Each
worker computes ``r`` partial gradients and sends one message, as in GC and GC-SC (no extra
computation or communication per round). The round decodes once every cluster has ``l - r + 1``
of its codewords; ``ready``/``close`` decode with the round's placement through the GC-SC code
(the per-cluster structured decoder, checked against the encoder rows), so a round that its
placement cannot absorb stays not ready and ``close`` raises :class:`NotDecodableError` rather
than return a wrong gradient.

Straggler state information (SSI, Sec. VI):

* ``ssi="perfect"``: the master knows round ``t``'s states before planning it. A driver calls
  ``observe_states(t, straggling, rates)`` (the delay model's ``Draw.straggling[t]``, ``True`` =
  straggler, and, for the heterogeneous variant, ``Draw.rates[t]``) before ``plan(t)``;
  ``plan(t)`` without them raises :class:`ProtocolError`.
* ``ssi="imperfect"``: round ``t`` is planned with round ``t - 1``'s information, as the paper's
  master does when ``p <= 0.5`` ("each worker continues with the same straggling behavior"): the
  states (or rates) observed for round ``t - 1`` when the driver reports them (workers report
  their state at the end of each iteration); otherwise the scheme's own straggler history, row
  ``t - 1`` (the workers that had not delivered when round ``t - 1`` closed); for the first round
  nothing, i.e. every worker is taken as a non-straggler (the placement of the first class alone).
  Caveat: a round closes as soon as it decodes, so the history also marks fast workers that were
  simply not needed; it is a much weaker signal than the reported state, and drivers that can
  report states should.

Heterogeneous workers (Sec. VI-B): with ``tau`` the scheme plans with rates (a worker is a
straggler iff its rate is below ``tau``; clusters take the fastest available worker first).
Without reported rates the imperfect variant falls back to the reported states, then to the
history, scanned by index; the perfect variant requires the round's rates.

Message rules (stale, duplicate, out-of-order, non-finite payloads) are those of
:class:`~gradcode.schemes.static.StaticScheme`, which this scheme runs underneath on the codewords:
message ``index`` 0 of worker ``w`` in round ``t`` is the message of codeword ``c_{p,i}`` that
``w`` serves in round ``t``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gradcode._validation import as_generator, check_choice, check_int
from gradcode.codes.clustering import GCSC
from gradcode.errors import NotDecodableError
from gradcode.schemes.base import (
    SCHEMES,
    ClosedRounds,
    PlayedRounds,
    ProtocolError,
    RoundLoads,
    Scheme,
    Task,
    check_round,
)
from gradcode.schemes.compiled import Timing
from gradcode.schemes.gcdc.assignment import ClusterAssignment, check_cluster_shape, min_clusters_per_worker
from gradcode.schemes.gcdc.clustering import (
    ClusterPlacement,
    check_rates,
    check_states,
    check_tau,
    dynamic_clustering,
)
from gradcode.schemes.gcdc.rounds import Layout, Plans, Tables, gcdc_rounds
from gradcode.schemes.static import StaticScheme, code_loads

__all__ = ["GCDC", "RoundPlan"]


@dataclass(frozen=True, eq=False)
class RoundPlan:
    """What ``plan(t)`` decided: the Algorithm 1 ``placement``, the information it was planned
    with (``source``, e.g. ``"states of round 4"``), and ``codeword``: ``(K,)`` the flat codeword
    id ``p l + i`` each worker serves (a worker id of the underlying GC-SC code)."""

    round: int
    placement: ClusterPlacement
    source: str
    codeword: np.ndarray


@SCHEMES.register("gc-dc")
class GCDC(Scheme):
    """GC-DC (gradient coding with dynamic clustering) as a round-by-round scheme.

    Parameters: ``n`` workers (``K``); ``clusters`` (``P``, divides ``n``); ``r`` partitions per
    codeword, i.e. each worker's computation load per round (``1 <= r <= l = n / P``; the
    clusters' codes tolerate ``r - 1`` stragglers each); ``clusters_per_worker`` (``n_c``, the
    paper's ``n``: ``1 <= n_c <= P``; default: the smallest meeting Lemma 1's condition (19), see
    :func:`min_clusters_per_worker`); ``ssi`` (``"perfect"`` or ``"imperfect"``, default
    ``"imperfect"``); ``tau`` (heterogeneous workers, Sec. VI-B: plan with rates, straggler iff
    rate < tau; a finite ``tau > 0``, since rates are positive and ``tau <= 0`` would never mark a
    straggler; a round whose workers all fall on one side of ``tau`` is planned as a single class,
    by rate, which is valid, see :mod:`~gradcode.schemes.gcdc.clustering`); ``seed`` (the random
    shifts of the assignment and the codes' random matrices);
    ``assignment`` (a :class:`ClusterAssignment` to use instead of a random one); ``dim`` (the
    gradient dimension to decode, default the message length).

    See the module docstring for the protocol and the SSI variants.
    """

    delay = 0
    chunks = 1
    #: constructor parameters only the Python API sets (an object; the drivers' dimension): the
    #: command line neither lists nor accepts them
    api_only_params = ("assignment", "dim")

    def __init__(
        self,
        n: int,
        clusters: int,
        r: int,
        *,
        clusters_per_worker: int | None = None,
        ssi: str = "imperfect",
        tau: float | None = None,
        seed=0,
        assignment: ClusterAssignment | None = None,
        dim: int | None = None,
    ):
        K, P, nc = check_cluster_shape(n, clusters, clusters_per_worker)
        ell = K // P
        r = check_int("r", r)
        if not 1 <= r <= ell:
            raise ValueError(
                f"r (partitions per codeword) must be between 1 and the cluster size n/clusters = {ell};"
                f" got r={r}"
            )
        self.ssi = check_choice("ssi", ssi, ("perfect", "imperfect"))
        self.tau = None if tau is None else check_tau(tau)
        rng = as_generator(seed)
        if assignment is None:
            nc = nc if nc is not None else min_clusters_per_worker(K, P)
            assignment = ClusterAssignment.random(K, P, nc, rng)
        elif not isinstance(assignment, ClusterAssignment):
            raise TypeError(f"assignment must be a ClusterAssignment, got {type(assignment).__name__}")
        elif (assignment.workers, assignment.clusters) != (K, P) or nc not in (None, assignment.clusters_per_worker):
            raise ValueError(
                f"assignment is for n={assignment.workers}, clusters={assignment.clusters},"
                f" clusters_per_worker={assignment.clusters_per_worker}; the scheme has n={K},"
                f" clusters={P}" + (f", clusters_per_worker={nc}" if nc is not None else "")
            )
        self.assignment = assignment
        self.r = r
        self.code = GCSC(K, P, r - 1, seed=rng)
        self._static = StaticScheme(self.code, dim=dim)
        self.n = K
        self.partition_sizes = self.code.partition_sizes
        self._plans: dict[int, RoundPlan] = {}
        self._received: dict[int, np.ndarray] = {}
        self._closed = ClosedRounds()
        self._states: dict[int, np.ndarray] = {}
        self._rates: dict[int, np.ndarray] = {}
        self._history = np.zeros((0, K), dtype=bool)
        self._history_rounds = 0
        self.last_plan: RoundPlan | None = None
        self.stale_messages = 0

    # -------------------------------------------------------------- description
    clusters = property(lambda self: self.assignment.clusters, doc="P: number of clusters.")
    cluster_size = property(lambda self: self.assignment.cluster_size, doc="l = n / P.")
    clusters_per_worker = property(lambda self: self.assignment.clusters_per_worker, doc="n_c.")
    memory = property(lambda self: self.assignment.memory, doc="Partitions stored per worker: n_c l.")

    @property
    def tolerance(self) -> int:
        """Stragglers always tolerated (worst case, as GC-SC and GC): ``r - 1``."""
        return self.r - 1

    @property
    def load(self) -> float:
        """Data fraction each worker computes per round: ``r / K`` (``r`` of the ``K`` equal
        partitions, as in GC and GC-SC; the ``n_c l`` stored partitions are memory, not
        computation, Sec. IV-B)."""
        return self.r / self.n

    @property
    def needed_per_cluster(self) -> int:
        """Results each cluster needs to decode: ``l - r + 1``."""
        return self.cluster_size - self.r + 1

    @property
    def duplicate_messages(self) -> int:
        return self._static.duplicate_messages

    def stored_partitions(self, worker: int) -> tuple[int, ...]:
        """The ``n_c l`` partitions worker ``worker`` stores (Sec. IV-B, eq. 12 with equality)."""
        return self.assignment.stored_partitions(worker)

    def __repr__(self) -> str:
        tau = f", tau={self.tau:g}" if self.tau is not None else ""
        return (
            f"GCDC(n={self.n}, clusters={self.clusters}, r={self.r},"
            f" clusters_per_worker={self.clusters_per_worker}, ssi={self.ssi!r}{tau})"
        )

    # -------------------------------------------------------------- straggler state information
    def _observe_states(self, t: int, straggling: np.ndarray, rates: np.ndarray | None) -> None:
        """Hook of :meth:`Scheme.observe_states`: the straggler states of round ``t`` (``(n,)``
        booleans, ``True`` = straggler) and, for the heterogeneous variant, the rates ``mu_k``
        (``Draw.rates[t]``), handed over before ``plan(t)``. Perfect SSI plans round ``t`` with
        them, imperfect SSI round ``t + 1``."""
        self._states[t] = check_states(straggling, self.n).copy()
        _forget_before(self._states, t - 1)
        if rates is not None:
            self._rates[t] = check_rates(rates, self.n).copy()
            _forget_before(self._rates, t - 1)

    def _information(self, t: int) -> tuple[dict, str]:
        """The keyword arguments of :func:`dynamic_clustering` for round ``t`` and their source."""
        if self.ssi == "perfect":
            if self.tau is not None:
                if t not in self._rates:
                    raise ProtocolError(
                        f"ssi='perfect' with tau plans round {t} with that round's rates: call"
                        f" observe_states({t}, straggling, rates) before plan({t})"
                    )
                return {"rates": self._rates[t], "tau": self.tau}, f"rates of round {t}"
            if t not in self._states:
                raise ProtocolError(
                    f"ssi='perfect' plans round {t} with that round's straggler states: call"
                    f" observe_states({t}, straggling) before plan({t})"
                )
            return {"straggling": self._states[t]}, f"states of round {t}"
        prev = t - 1
        if self.tau is not None and prev in self._rates:
            return {"rates": self._rates[prev], "tau": self.tau}, f"rates of round {prev}"
        if prev in self._states:
            return {"straggling": self._states[prev]}, f"states of round {prev}"
        if 0 <= prev < self._history_rounds and prev in self._closed:
            return {"straggling": self._history[prev].copy()}, f"straggler history of round {prev}"
        return {"straggling": np.zeros(self.n, dtype=bool)}, "none (every worker taken as a non-straggler)"

    # -------------------------------------------------------------- protocol hooks
    def _open(self, t: int) -> RoundPlan:
        if t in self._closed:
            raise ProtocolError(f"round {t} is already closed; it cannot be planned again")
        plan = self._plans.get(t)
        if plan is None:
            plan = self.plan_placement(t)
            self._plans[t] = plan
            self._received[t] = np.zeros(self.n, dtype=bool)
            self.last_plan = plan
        return plan

    def _plan(self, t: int) -> dict[int, tuple[Task, ...]]:
        plan = self._open(t)
        tasks = self._static.plan(t)
        cw = plan.codeword.tolist()
        return {w: tasks[cw[w]] for w in range(self.n)}

    # -------------------------------------------------------------- batched rounds
    _batched_family = True

    def plan_loads(self, t: int) -> RoundLoads:
        """Each worker timed by the codeword it serves (the GC-SC code's loads, re-indexed)."""
        cw = self._open(check_round(t)).codeword
        loads = self._static.plan_loads(t)
        return RoundLoads(loads.loads[cw], loads.messages[cw], t)

    def ready_after(self, t: int, workers: np.ndarray, indices: np.ndarray) -> int | None:
        plan = self._plans.get(check_round(t))
        return None if plan is None else self._static.ready_after(t, plan.codeword[workers], indices)

    def on_results(self, t: int, workers: np.ndarray, indices: np.ndarray, times: np.ndarray) -> None:
        t = check_round(t)
        plan = self._plans.get(t)
        if plan is None:
            if t in self._closed:
                self.stale_messages += len(workers)
                return
            raise ProtocolError(f"message for round {t}, which was never planned")
        workers = np.asarray(workers, dtype=np.intp)
        if ((workers < 0) | (workers >= self.n)).any():
            raise ProtocolError(f"unknown worker id in round {t}: workers are 0..{self.n - 1}")
        self._static.on_results(t, plan.codeword[workers], indices, times)
        self._received[t][workers] = True

    # -------------------------------------------------------------- compiled rounds
    _compiled_family = True

    def play_rounds(self, first, intercept, slope, message_time, mu, wait_all, records, straggling=None,
                    rates=None) -> PlayedRounds:
        """:meth:`Scheme.play_rounds` by :func:`~gradcode.schemes.gcdc.rounds.gcdc_rounds`, with
        ``straggling``/``rates`` the states (and rates) a driver hands to :meth:`observe_states`
        before each round. A round whose conflicts need Algorithm 1's augmenting chains is placed
        by :func:`dynamic_clustering` in Python and the kernel goes on. Plays fewer rounds
        (possibly none) only where the protocol would refuse the information: without states,
        without the rates perfect SSI with ``tau`` needs, or up to the first round with invalid
        rates; the driver then plays that round through the protocol, which raises."""
        first = check_round(first)
        intercept = np.ascontiguousarray(intercept, dtype=np.float64)
        slope = np.ascontiguousarray(slope, dtype=np.float64)
        m, K = intercept.shape
        if K != self.n or slope.shape != (m, K):
            raise ValueError(f"intercept and slope must be (rounds, {self.n}); got {intercept.shape}, {slope.shape}")
        if self._plans:
            raise ProtocolError(f"play_rounds({first}): round(s) {sorted(self._plans)} are open; close them first")
        if not self._closed.isdisjoint(range(first, first + m)):
            raise ProtocolError(f"play_rounds({first}): rounds {first}..{first + m - 1} include a closed round")
        if straggling is None or not m:
            return _played(first, 0, K, records)
        straggling = np.ascontiguousarray(straggling)
        if straggling.shape != (m, K) or straggling.dtype != bool:
            raise ValueError(f"straggling must be ({m}, {K}) booleans, got {straggling.dtype} {straggling.shape}")
        if rates is not None:
            rates = np.asarray(rates, dtype=np.float64)
            if rates.shape != (m, K):
                raise ValueError(f"rates must have shape ({m}, {K}), got {rates.shape}")
            bad = ~(np.isfinite(rates) & (rates >= 0)).all(axis=1)
            if bad.any():  # play up to the first round whose rates the protocol refuses
                m = int(np.argmax(bad))
                intercept, slope, straggling, rates = intercept[:m], slope[:m], straggling[:m], rates[:m]
                if not m:
                    return _played(first, 0, K, records)
        planning = self._planning(first, straggling, rates)
        if planning is None:
            return _played(first, 0, K, records)  # the protocol's ProtocolError: no rates
        plan_states, plan_rates, by_rates = planning
        if self.__dict__.get("_codeword_loads") is None:
            self._codeword_loads = np.ascontiguousarray(code_loads(self.code)[0][:, 0])
        a = self.assignment
        hist = self._history_rows(first + m)
        out = _played(first, m, K, records)
        cw_rows = np.zeros((m, K), dtype=bool)
        placed = np.full((m, K), -1, dtype=np.int64)
        columns = np.ascontiguousarray(a.columns, dtype=np.int64)
        clusters_of = np.ascontiguousarray(a.clusters_of, dtype=np.int64)
        no_table = np.empty((0, 0))
        layout = Layout(columns, clusters_of, a.membership, self.cluster_size, a.clusters_per_worker == a.clusters,
                        self._codeword_loads, self.needed_per_cluster)
        played = 0
        while played < m:
            info = np.zeros(2, dtype=np.int64)
            k = played
            gcdc_rounds(first + k,
                        Timing(intercept[k:], slope[k:], float(message_time), -1.0 if mu is None else float(mu),
                               bool(wait_all)),
                        Plans(plan_states[k:], plan_rates[k:], by_rates[k:], float(self.tau or 0.0), placed[k:]),
                        layout,
                        Tables(hist, cw_rows[k:], bool(records), out.end[k:], out.waitout[k:], out.stragglers[k:],
                               out.arrivals[k:] if records else no_table, out.finish[k:] if records else no_table,
                               info))
            played = k + int(info[0])
            if info[1]:  # round `played` needs Algorithm 1's augmenting chains: Python places it
                info_k = ({"rates": plan_rates[played], "tau": self.tau} if by_rates[played]
                          else {"straggling": plan_states[played]})
                placed[played] = dynamic_clustering(a, **info_k).members.reshape(-1)
        if played:
            self._static.close_rounds(first, cw_rows[:played])
            self._history_rounds = max(self._history_rounds, first + played)
            self._closed.update(range(first, first + played))
            for k in range(max(0, played - 2), played):
                self._observe_states(first + k, straggling[k], None if rates is None else rates[k])
            self.last_plan = self.plan_placement(first + played - 1)
        return _played(first, played, K, records, out)

    def _planning(self, first: int, straggling: np.ndarray, rates: np.ndarray | None):
        """What Algorithm 1 plans each of rounds ``first ..`` with, as ``_information`` gives it
        round by round: ``(states, rates, by_rates)``, ``(m, K)``, ``(m, K)`` and ``(m,)``
        (``by_rates[k]``: plan round ``k`` with ``rates[k]`` and ``tau``). Perfect SSI plans round
        ``t`` with the round's own states (or rates); imperfect SSI with round ``t - 1``'s, the
        first with the scheme's own. ``None`` where perfect SSI with ``tau`` has no rates."""
        m, K = straggling.shape
        use_rates = self.tau is not None and rates is not None
        plan_rates = np.ascontiguousarray(rates, dtype=np.float64) if use_rates else np.zeros((m, K))
        if self.ssi == "perfect":
            if self.tau is not None and not use_rates:
                return None
            return straggling, plan_rates, np.full(m, use_rates)
        kwargs, _ = self._information(first)
        plan_states = np.empty((m, K), dtype=bool)
        plan_states[1:] = straggling[:-1]
        plan_rates = np.concatenate([np.zeros((1, K)), plan_rates[:-1]])
        by_rates = np.full(m, use_rates)
        by_rates[0] = "rates" in kwargs
        if by_rates[0]:
            plan_rates[0] = kwargs["rates"]
        else:
            plan_states[0] = kwargs["straggling"]
        return plan_states, plan_rates, by_rates

    def plan_placement(self, t: int) -> RoundPlan:
        """The placement ``plan(t)`` uses (Algorithm 1 on the information for round ``t``, see
        the module docstring), without opening the round; an open round's own plan."""
        t = check_round(t)
        plan = self._plans.get(t)
        if plan is not None:
            return plan
        kwargs, source = self._information(t)
        placement = dynamic_clustering(self.assignment, **kwargs)
        return RoundPlan(t, placement, source, placement.codeword_ids())

    def round_plan(self, t: int) -> RoundPlan:
        """The plan of open round ``t`` (or of the last round planned, ``last_plan``)."""
        plan = self._plans.get(t)
        if plan is None:
            if self.last_plan is not None and self.last_plan.round == t:
                return self.last_plan
            raise KeyError(f"round {t} is not open (plan it first; closed rounds keep only last_plan)")
        return plan

    def _on_result(self, t: int, w: int, index: int, payload, time: float) -> None:
        plan = self._plans.get(t)
        if plan is None:
            if t in self._closed:
                self.stale_messages += 1
                return
            raise ProtocolError(f"message for round {t}, which was never planned")
        if index >= 1:
            raise ProtocolError(f"worker {w} sends 1 message per round; got index {index} in round {t}")
        q = int(plan.codeword[w])
        try:
            self._static.on_result(t, q, index, payload, time)
        except ProtocolError as exc:
            p, i = divmod(q, self.cluster_size)
            raise ProtocolError(
                f"worker {w} (serving codeword c_{{{p},{i}}}, worker {q} of the GC-SC code) in round {t}: {exc}"
            ) from None
        self._received[t][w] = True

    def _ready(self, t: int) -> bool:
        return t in self._plans and self._static.ready(t)

    def _close(self, t: int, arrived: frozenset[int]) -> list[tuple[int, np.ndarray | None]]:
        if t in self._closed:
            raise ProtocolError(f"round {t} is already closed")
        plan = self._plans.get(t)
        if plan is None:
            raise ProtocolError(f"round {t} was never planned")
        cw = plan.codeword
        try:
            out = self._static.close(t, frozenset(int(cw[w]) for w in arrived))
        except NotDecodableError as exc:
            raise NotDecodableError(f"round {t}: {self._shortfall(t)}; GC-SC decoder: {exc}") from None
        row = self._static.straggler_history[t][cw]  # codeword rows -> the workers serving them
        self._record(t, row)
        del self._plans[t]
        del self._received[t]
        self._closed.add(t)
        return out

    # -------------------------------------------------------------- the collective path
    def collective_support(self) -> str | None:
        """GC-DC's decode is the GC-SC code's (fixed coefficients per round's placement): the
        collective path runs it, the codewords' weights going to the workers serving them."""
        return self._static.collective_support()

    def reduce_plans(self, t: int, arrived, reduced_by: int | None = None) -> list[tuple[int, object]]:
        """:meth:`Scheme.reduce_plans`: the GC-SC code's plan over the codewords the workers in
        ``arrived`` served in round ``t``, each codeword's weights given to the worker serving it
        (the workers' parts are keyed by worker)."""
        t = check_round(t)
        plan = self._plans.get(t)
        if plan is None:
            raise ProtocolError(f"round {t} is not open" if t in self._closed else f"round {t} was never planned")
        cw = plan.codeword
        arrived = frozenset(arrived)
        k = len(arrived) if reduced_by is None else int(reduced_by)
        try:
            plans = self._static.reduce_plans(t, frozenset(int(cw[w]) for w in arrived), reduced_by=max(k, 1))
        except NotDecodableError as exc:
            raise NotDecodableError(f"round {t}: {self._shortfall(t)}; GC-SC decoder: {exc}") from None
        serving = {int(q): w for w, q in enumerate(cw.tolist())}  # a permutation: one codeword a worker
        return [(job, replace(rp, weights={serving[q]: a for q, a in rp.weights.items()})) for job, rp in plans]

    def forget_results(self, t: int, worker: int) -> None:
        """``worker``'s message of round ``t`` is gone: its codeword's is."""
        plan = self._plans.get(check_round(t))
        w = self._check_worker(worker)
        if plan is not None:
            self._static.forget_results(t, int(plan.codeword[w]))
            self._received[t][w] = False

    def _shortfall(self, t: int) -> str:
        plan = self._plans[t]
        got = self._received[t][plan.placement.members].sum(axis=1)
        need = self.needed_per_cluster
        short = [f"cluster {p} has {int(g)} of {need}" for p, g in enumerate(got) if g < need]
        if not short:
            return f"every cluster has its {need} results, but the decode was refused"
        return f"results needed per cluster: {need} (l - r + 1); " + ", ".join(short)



def _played(first: int, m: int, K: int, records: bool, out: PlayedRounds | None = None) -> PlayedRounds:
    """``m`` rounds from ``first``: new arrays to fill, or the first ``m`` rows of ``out``."""
    if out is None:
        return PlayedRounds(np.empty(m), np.zeros(m, dtype=bool), np.zeros((m, K), dtype=bool),
                            np.empty((m, K)) if records else None, np.empty((m, K)) if records else None,
                            np.arange(first, first + m), np.arange(first, first + m), first + m - 1 if m else -1)
    return PlayedRounds(out.end[:m], out.waitout[:m], out.stragglers[:m],
                        None if out.arrivals is None else out.arrivals[:m],
                        None if out.finish is None else out.finish[:m],
                        out.jobs[:m], out.job_rounds[:m], first + m - 1 if m else -1)


def _forget_before(observed: dict, t: int) -> None:
    """Drop observations of rounds before ``t``: planning never looks further back than the
    previous round."""
    if len(observed) > 2:
        for old in [s for s in observed if s < t]:
            del observed[old]
