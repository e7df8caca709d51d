"""GC-DC dynamic clustering: Algorithm 1 of Buyukates et al. (Sec. V) as a pure function.

:func:`dynamic_clustering` maps an assignment ``A_cluster`` (:class:`ClusterAssignment`) and the
straggler states used for a round (or the workers' rates, Sec. VI-B) to a :class:`ClusterPlacement`:
which worker serves which codeword ``c_{p,i}`` of which cluster ``p`` in that round. Every cluster
gets exactly ``l`` workers from its column of ``A_cluster``, every worker exactly one cluster.

Algorithm 1, as implemented (worker ids 0-based; ``F`` non-stragglers, ``S`` stragglers):

1. **Preference order inside a column** (eq. 16): ascending worker index (homogeneous workers);
   with rates (Sec. VI-B) fastest first, ties by index.
2. **Class order** (lines 6-9): the larger class is placed first; ``|F| >= |S|`` places ``F`` first.
3. **Turn order** (eq. 17, line 13): for the class ``C`` being placed, ``|K^p_C|`` counts the
   workers of ``C`` in column ``p``; clusters take turns in increasing ``|K^p_C|``, ties by cluster
   index (the paper's ``O_f = [3, 4, 1, 2]`` and ``O_s = [1, 2, 3, 4]`` in the worked example).
4. **Phase I** (lines 15-25): in turn, a cluster with room takes the first worker of the class in
   its column that is not placed yet. Each class is placed up to its *uniform share*,
   ``ceil(|C| / P)`` workers per cluster: first the first class, then the second; then the
   leftovers of the first class and then of the second fill the clusters still open, in the same
   turns. The turns of a class stop when a full round of ``P`` turns places nobody (the paper's
   "``M`` attempts": no further placement is possible).
5. **Phase II** (lines 26-35): a worker ``k`` still unplaced is *conflicted*: every cluster of
   ``P_k`` is full while some cluster ``p`` lacks a worker. Scan ``P_k`` in increasing cluster
   index and each of its clusters in slot order for the first worker ``k'`` that may join ``p``;
   move ``k'`` to ``p`` and give ``k`` the codeword ``k'`` served. Repeat until no conflict is left.

**Reading of Phase I (the share limit).** Taken literally, lines 16-23 let each class fill
clusters up to ``l``. In the worked example (eq. 18, ``S = [1,1,0,1,0,0,0,0,1,1,1,1]``) cluster 3
then takes ``w2``, ``w11`` and ``w12`` on its first three turns, the stragglers leave ``w5``
unplaced, and the swap ends with ``(1, 2, 0, 2)`` stragglers per cluster, not Fig. 3. The paper's
Phase I ends with ``w12`` unplaced while cluster 3 still had room on its third turn, so the first
class must stop before ``l``; stopping it at the uniform share ``ceil(7 / 4) = 2`` per cluster
(the point of the algorithm: "distribute the stragglers as uniformly as possible") reproduces
Fig. 3 exactly: Phase I ``{w1, w6}``, ``{w10, w7, w8}``, ``{w2, w11, w3}``, ``{w4, w9, w5}`` with
``w12`` conflicted, the swap of ``w12`` with ``w4`` (cluster 3 has no worker of column 1, cluster
4 has ``w4``), and ``(1, 2, 1, 1)`` stragglers. The stragglers are then placed by "a similar
procedure", so they get the same limit, ``ceil(5 / 4) = 2`` in the example (where it does not
bind); without it, when the first class's share is ``l`` (few stragglers) a cluster that found
few non-stragglers in its column would take all the stragglers. (A cap on the number of turn
rounds instead of workers reproduces the example too; the share limit also lets a cluster that
found no worker on an early turn catch up later.) Leftovers that can still be placed directly
(their clusters not full) are placed in Phase I, not treated as conflicts: the paper calls a
worker conflicted only when all ``n_c`` of its clusters are full.

**Phase II guarantee and fallback.** Lemma 1 (eq. 19): with ``n_c > P (K - 1) / (2 K)`` the scan
always finds ``k'``. Its proof holds for every conflict in turn, not only a single one: when a
conflict is handled, no unplaced worker belongs to the open cluster's column (it would have been
placed in Phase I, and swaps never open a cluster), so at least ``n_c l - l + 1`` workers of that
column sit in other clusters. Without (19) the scan can fail; the paper does not say what to do
then (its loop would not end). We then move workers along the shortest *chain* of clusters
``P_k -> ... -> p`` found by breadth-first search (an augmenting path), which always exists because
a complete placement exists (the first shift block of ``A_cluster``). ``ClusterPlacement.chains``
records such resolutions; under (19) there are none (tested).

**Codewords.** A cluster's ``l`` codewords are assigned to its workers in slot order: the ``i``-th
worker placed in cluster ``p`` serves ``c_{p,i}``, a swap hands ``k`` the slot (codeword) of the
worker it displaces, and a moved worker takes the next free slot of its new cluster. Any
bijection works for decoding: a cluster's cyclic repetition code decodes from any ``l - r + 1``
of its codewords.

**Heterogeneous workers** (Sec. VI-B): with ``rates`` and a threshold ``tau`` a worker is a
straggler iff ``rate < tau`` and columns are scanned fastest first. If every worker falls on the
same side of ``tau`` in a round there is one class: Phase I then places all workers by rate
(fastest first), no share limit applies (the uniform share of one class over ``P`` clusters of
``l`` is ``l``), and the placement is still valid; it is not an error (a round with no straggler
is normal), but ``ClusterPlacement.stragglers`` then reads 0 or ``K``.

Cost: each cluster keeps a pointer into its column's candidates of each class, so Phase I is
``O(n_c K)`` steps (``O(K)`` with ``n_c = P``, where the clusters share one list), compiled
(numba) with the classes, candidate lists and turn orders in one kernel, so that Algorithm 1 is a
small part of a planned round even at K = 1000 (``benchmarks/bench_gcdc.py``; BENCHMARKS.md, "GC-DC:
Algorithm 1 per round and the simulator", Algorithm 1 compiled).
"""

from __future__ import annotations

import numbers
from collections import deque
from dataclasses import dataclass

import numpy as np
from numba import njit

from gradcode._validation import check_real
from gradcode.errors import GradcodeError
from gradcode.schemes.gcdc.assignment import ClusterAssignment

__all__ = ["ClusterPlacement", "Swap", "dynamic_clustering", "check_states", "check_rates", "check_tau"]


@dataclass(frozen=True)
class Swap:
    """A Phase II resolution (Algorithm 1, lines 26-35): the conflicted ``worker`` takes the place
    (codeword ``slot``) of ``displaced`` in ``cluster`` (a cluster of ``P_worker``), and
    ``displaced`` moves to ``open_cluster``, the cluster that lacked a worker."""

    worker: int
    displaced: int
    cluster: int
    slot: int
    open_cluster: int


@dataclass(frozen=True, eq=False)
class ClusterPlacement:
    """Result of Algorithm 1 for one round.

    * ``members``: ``(P, l)``; ``members[p, i]`` is the worker that computes codeword ``c_{p,i}``;
    * ``cluster_of``, ``slot_of``: ``(K,)``; the cluster and codeword index of each worker, so
      ``members[cluster_of[k], slot_of[k]] == k``;
    * ``straggling``: ``(K,)`` the straggler states the placement was planned with;
    * ``stragglers``: ``(P,)`` number of those stragglers placed in each cluster;
    * ``first_placed``: ``"non-stragglers"`` or ``"stragglers"`` (lines 6-9);
    * ``nonstraggler_order`` / ``straggler_order``: the clusters' turn order for each class, 0-based
      (eq. 17; add 1 for the paper's notation);
    * ``phase1``: each cluster's workers in slot order at the end of Phase I;
    * ``conflicted``: workers left unplaced by Phase I, in the order Phase II handled them;
    * ``swaps``: the single swaps of Phase II (:class:`Swap`);
    * ``chains``: conflicts no single swap could resolve (only possible when Lemma 1's condition
      fails), each as the list of ``(worker, from_cluster, to_cluster)`` moves, the conflicted
      worker's own move (from -1) last.
    """

    members: np.ndarray
    cluster_of: np.ndarray
    slot_of: np.ndarray
    straggling: np.ndarray
    stragglers: np.ndarray
    first_placed: str
    nonstraggler_order: np.ndarray
    straggler_order: np.ndarray
    phase1: tuple[tuple[int, ...], ...]
    conflicted: tuple[int, ...]
    swaps: tuple[Swap, ...]
    chains: tuple[tuple[tuple[int, int, int], ...], ...]

    @property
    def clusters(self) -> int:
        return int(self.members.shape[0])

    @property
    def cluster_size(self) -> int:
        return int(self.members.shape[1])

    def codeword_ids(self) -> np.ndarray:
        """``(K,)``: codeword ``c_{p,i}`` of each worker as the flat id ``p l + i``, which is the
        worker id of that codeword in the static GC-SC code with contiguous clusters."""
        return self.cluster_of * self.cluster_size + self.slot_of

    def __repr__(self) -> str:
        return (
            f"<ClusterPlacement clusters={self.clusters} cluster_size={self.cluster_size}"
            f" stragglers per cluster={self.stragglers.tolist()} swaps={len(self.swaps)}"
            f" chains={len(self.chains)}>"
        )

    def __str__(self) -> str:
        lines = [repr(self)]
        for p in range(self.clusters):
            names = " ".join(
                f"w{int(w) + 1}{'*' if self.straggling[w] else ''}" for w in self.members[p]
            )
            lines.append(f"cluster {p + 1}: {names}")
        lines.append("(* straggler; codeword c_{p,i} is the i-th worker listed)")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------- validation


def check_states(straggling, workers: int, name: str = "straggling") -> np.ndarray:
    """``straggling`` as a read-only ``(K,)`` boolean array; ``True`` marks a straggler.

    Only booleans are accepted: the paper's ``S`` uses 1 for a *non*-straggler, so a 0/1 vector is
    ambiguous (pass ``S == 0``)."""
    arr = np.asarray(straggling)
    if arr.dtype != np.bool_:
        raise TypeError(
            f"{name} must be a boolean array (True = straggler), got dtype {arr.dtype}; the paper's"
            " S marks non-stragglers with 1, so pass S == 0"
        )
    if arr.shape != (workers,):
        raise ValueError(f"{name} must have shape ({workers},), one state per worker; got shape {arr.shape}")
    return arr


def check_rates(rates, workers: int, name: str = "rates") -> np.ndarray:
    """``rates`` as a float ``(K,)`` array of finite computation rates ``mu_k >= 0`` (eq. 20)."""
    arr = np.asarray(rates)
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"{name} must be real numbers (computation rates mu_k), got dtype {arr.dtype}")
    if arr.shape != (workers,):
        raise ValueError(f"{name} must have shape ({workers},), one rate per worker; got shape {arr.shape}")
    arr = arr.astype(np.float64, copy=False)
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError(f"{name} must be finite rates >= 0; got {arr[~np.isfinite(arr) | (arr < 0)][:5].tolist()}...")
    return arr


def check_tau(tau) -> float:
    """The straggling threshold of Sec. VI-B: a finite ``tau > 0``. Rates are positive, so with
    ``tau <= 0`` no worker could ever be a straggler; a finite ``tau`` larger than every rate makes
    every worker one in that round, which Algorithm 1 handles as a single class (see the module
    docstring)."""
    if isinstance(tau, bool) or not isinstance(tau, numbers.Real):
        raise TypeError(f"tau must be a real number (the straggling threshold on rates), got {tau!r}")
    if not np.isfinite(float(tau)):
        raise ValueError(f"tau must be finite (with tau = inf every worker is always a straggler); got {tau}")
    return check_real("tau", tau, minimum=0.0, strict_min=True)


# ---------------------------------------------------------------------------------- Algorithm 1


def dynamic_clustering(
    assignment: ClusterAssignment,
    straggling=None,
    *,
    rates=None,
    tau: float | None = None,
) -> ClusterPlacement:
    """Algorithm 1: place the ``K`` workers into the ``P`` clusters for one round.

    Give either ``straggling`` (``(K,)`` booleans, ``True`` = straggler: the states the master
    plans with, homogeneous workers, columns scanned by index, eq. 16) or ``rates`` with ``tau``
    (Sec. VI-B: straggler iff ``rate < tau``, columns scanned fastest first). Returns a
    :class:`ClusterPlacement`. Pure: the same input gives the same placement. See the module
    docstring for the reading of the paper.
    """
    if not isinstance(assignment, ClusterAssignment):
        raise TypeError(f"assignment must be a ClusterAssignment, got {type(assignment).__name__}")
    K, P, ell = assignment.workers, assignment.clusters, assignment.cluster_size
    strag, columns = _states_and_columns(assignment, straggling, rates, tau)
    first_fast, turn_orders, members, cluster_of = _phase_one(assignment, strag, columns)
    phase1 = tuple(tuple(m) for m in members)
    conflicted, swaps, chains = _resolve_conflicts(assignment, members, cluster_of)

    M = np.array(members, dtype=np.intp).reshape(P, ell)
    cl = np.empty(K, dtype=np.intp)
    sl = np.empty(K, dtype=np.intp)
    cl[M] = np.arange(P)[:, None]
    sl[M] = np.arange(ell)[None, :]
    orders = [np.array(o, dtype=np.intp) for o in turn_orders]
    nonstraggler_order, straggler_order = orders if first_fast else orders[::-1]
    result = ClusterPlacement(
        members=M,
        cluster_of=cl,
        slot_of=sl,
        straggling=strag,
        stragglers=strag[M].sum(axis=1),
        first_placed="non-stragglers" if first_fast else "stragglers",
        nonstraggler_order=nonstraggler_order,
        straggler_order=straggler_order,
        phase1=phase1,
        conflicted=tuple(conflicted),
        swaps=tuple(swaps),
        chains=tuple(chains),
    )
    for a in (M, cl, sl, result.stragglers, nonstraggler_order, straggler_order):
        a.flags.writeable = False
    return result


def _phase_one(assignment: ClusterAssignment, strag: np.ndarray, columns: np.ndarray):
    """Phase I (lines 1-25): the larger class (non-stragglers on a tie) is placed first; clusters
    take turns in the order of eq. 17 (fewest candidates of the class in their columns first, ties
    by cluster index), each taking its first unplaced candidate of the class. Each class goes up
    to its uniform share ``ceil(|C| / P)`` per cluster, then its leftovers where they fit
    (:func:`_turns`, compiled).

    Returns ``(first_fast, turn_orders, members, cluster_of)``: whether non-stragglers went first,
    the turn order of each class (first-placed class first), each cluster's members in placement
    order, and each worker's cluster (``-1``: a conflict left for Phase II).
    """
    # with n_c = P every column holds every worker, so the clusters share one candidate list
    first_fast, orders, members, counts, cluster_of = _turns(
        strag, np.ascontiguousarray(columns, dtype=np.int64), assignment.cluster_size,
        assignment.clusters_per_worker == assignment.clusters)
    return (bool(first_fast), orders.tolist(), [m[:c].tolist() for m, c in zip(members, counts)],
            cluster_of.tolist())


@njit(cache=True)
def _turns(strag, columns, ell, shared):
    """Phase I on the round's states: the classes (the larger first), each column's candidates of
    each class in column order (one list when ``shared``), the turn orders (stable, by the number
    of candidates), then the turns: each class up to its share ``ceil(|C| / P)`` (at most ``l``)
    per cluster, then each class's leftovers up to ``l``. In a class's turns, clusters take their
    first unplaced candidate of the class while they hold fewer than the cap of it and fewer than
    ``l`` in all; the turns stop when a whole round of them places nobody. A pointer per candidate
    list only moves forward past placed workers. Returns ``(first_fast, orders (2, P), members (P,
    l), counts, cluster_of)``."""
    K = strag.size
    P, m = columns.shape
    n_strag = 0
    for w in range(K):
        n_strag += strag[w]
    first_fast = K - n_strag >= n_strag
    cls = np.empty(K, dtype=np.int64)  # 0: the class placed first
    for w in range(K):
        cls[w] = 0 if strag[w] != first_fast else 1
    sizes = np.array([K - n_strag, n_strag]) if first_fast else np.array([n_strag, K - n_strag])
    rows = 1 if shared else P
    candidates = np.empty((2, rows, m), dtype=np.int64)
    lengths = np.zeros((2, rows), dtype=np.int64)
    in_column = np.zeros((2, P), dtype=np.int64)
    for p in range(P):
        for j in range(m):
            w = columns[p, j]
            c = cls[w]
            in_column[c, p] += 1
            if p < rows:
                candidates[c, p, lengths[c, p]] = w
                lengths[c, p] += 1
    orders = np.empty((2, P), dtype=np.int64)
    for c in range(2):
        orders[c] = np.argsort(in_column[c], kind="mergesort")
    members = np.full((P, ell), -1, dtype=np.int64)
    count = np.zeros(P, dtype=np.int64)
    of_class = np.zeros((2, P), dtype=np.int64)
    cluster_of = np.full(K, -1, dtype=np.int64)
    taken = np.zeros(K, dtype=np.bool_)
    pointers = np.zeros((2, rows), dtype=np.int64)
    placed = np.zeros(2, dtype=np.int64)
    for step in range(4):
        c = step % 2
        cap = min(-(-sizes[c] // P), ell) if step < 2 else ell
        while placed[c] < sizes[c]:
            progress = False
            for q in range(P):
                p = orders[c, q]
                if of_class[c, p] >= cap or count[p] >= ell:
                    continue
                r = 0 if shared else p
                i, end = pointers[c, r], lengths[c, r]
                while i < end and taken[candidates[c, r, i]]:
                    i += 1
                if i < end:
                    w = candidates[c, r, i]
                    taken[w] = True
                    cluster_of[w] = p
                    members[p, count[p]] = w
                    count[p] += 1
                    of_class[c, p] += 1
                    placed[c] += 1
                    progress = True
                    i += 1
                pointers[c, r] = i
            if not progress:
                break
    return first_fast, orders, members, count, cluster_of


def _resolve_conflicts(assignment: ClusterAssignment, members: list[list[int]], cluster_of: list[int]):
    """Phase II (lines 26-35 and the augmenting chains): place each worker Phase I left out, by a
    single swap when one exists (:func:`_single_swap`), else along the shortest chain of clusters
    (:func:`_augment`). Updates ``members`` and ``cluster_of`` in place; returns
    ``(conflicted, swaps, chains)``."""
    ell = assignment.cluster_size
    conflicted = [w for w in range(assignment.workers) if cluster_of[w] < 0]
    swaps: list[Swap] = []
    chains: list[tuple[tuple[int, int, int], ...]] = []
    clusters_of = assignment.clusters_of
    for k in conflicted:
        swap = _single_swap(k, members, assignment)
        if swap is not None:
            members[swap.cluster][swap.slot] = k
            cluster_of[k] = swap.cluster
            members[swap.open_cluster].append(swap.displaced)
            cluster_of[swap.displaced] = swap.open_cluster
            swaps.append(swap)
        else:
            chains.append(_augment(k, members, cluster_of, clusters_of, ell))
    return conflicted, swaps, chains


def _states_and_columns(assignment, straggling, rates, tau):
    """The round's straggler states (read-only booleans) and the assignment's columns in the
    order clusters scan them: by worker index for states (eq. 16), fastest first for rates with
    the threshold ``tau`` (Sec. VI-B; a stable sort of the index-sorted columns breaks ties by
    index)."""
    K = assignment.workers
    columns = assignment.columns  # (P, n_c l), ascending worker index
    if rates is not None:
        if straggling is not None:
            raise TypeError("give either straggling (homogeneous workers) or rates with tau, not both")
        if tau is None:
            raise TypeError("rates need the straggling threshold tau (a worker is a straggler iff rate < tau)")
        tau = check_tau(tau)
        mu = check_rates(rates, K)
        strag = mu < tau
        # every worker once, fastest first (ties by index), dealt into the columns it is in: each
        # column in that order, as a stable sort of each (index-sorted) column by rate
        columns = _dealt(np.argsort(-mu, kind="stable"), assignment.clusters_of, *columns.shape)
    else:
        if tau is not None:
            raise TypeError("tau applies to rates; with straggling states give no tau")
        if straggling is None:
            raise TypeError("dynamic_clustering needs straggling states or rates")
        strag = check_states(straggling, K)
    strag = strag.copy()
    strag.flags.writeable = False
    return strag, columns


@njit(cache=True)
def _dealt(order, clusters_of, P, m):
    """``(P, m)``: the workers of each cluster's column in the order ``order`` lists them."""
    out = np.empty((P, m), dtype=np.int64)
    fill = np.zeros(P, dtype=np.int64)
    for w in order:
        for j in range(clusters_of.shape[1]):
            p = clusters_of[w, j]
            out[p, fill[p]] = w
            fill[p] += 1
    return out


def _single_swap(k, members: list[list[int]], assignment: ClusterAssignment) -> Swap | None:
    """Lines 26-35 for conflict ``k`` (:func:`_swap_for`, which the compiled rounds run too) on
    the members as lists; ``None`` if no single swap resolves it."""
    P, ell = assignment.clusters, assignment.cluster_size
    table = np.full((P, ell), -1, dtype=np.int64)
    count = np.array([len(m) for m in members], dtype=np.int64)
    for p, m in enumerate(members):
        table[p, :len(m)] = m
    p, q, slot = _swap_for(k, table, count, assignment.clusters_of, assignment.membership, ell)
    if p < 0:
        return None
    return Swap(worker=k, displaced=int(table[q, slot]), cluster=int(q), slot=int(slot), open_cluster=int(p))


@njit(cache=True)
def _swap_for(k, members, count, clusters_of, membership, ell):
    """Lines 26-35: ``(p, q, slot)``: the first open cluster ``p`` (ascending; fewer than ``ell``
    members) and the first cluster ``q`` of ``P_k`` (in ``clusters_of[k]``'s order) whose member
    in ``slot`` may join ``p`` (it moves to ``p``, ``k`` takes its slot); ``(-1, -1, -1)`` if
    there is none (an augmenting chain is needed). ``members[q, :count[q]]``: cluster ``q``'s
    members in slot order."""
    for p in range(members.shape[0]):
        if count[p] >= ell:
            continue
        for j in range(clusters_of.shape[1]):
            q = clusters_of[k, j]
            for slot in range(count[q]):
                if membership[members[q, slot], p]:
                    return p, q, slot
    return -1, -1, -1


def _augment(k, members, cluster_of, clusters_of, ell) -> tuple[tuple[int, int, int], ...]:
    """Resolve conflict ``k`` along the shortest chain of clusters (breadth-first search over
    clusters: ``a -> b`` when a worker of ``a`` may join ``b``) from ``P_k`` to a cluster with
    room; each worker on the chain moves one cluster on. Returns the moves ``(worker, from, to)``
    from the open end back to ``k``'s own move (from ``-1``)."""
    start = clusters_of[k].tolist()
    parent: dict[int, tuple[int, int] | None] = {p: None for p in start}
    queue = deque(start)
    target = None
    while queue and target is None:
        a = queue.popleft()
        for w in members[a]:
            for b in clusters_of[w].tolist():
                if b in parent:
                    continue
                parent[b] = (a, w)
                if len(members[b]) < ell:
                    target = b
                    break
                queue.append(b)
            if target is not None:
                break
    if target is None:  # impossible: the first shift block of A_cluster is a complete placement
        raise GradcodeError(f"dynamic clustering found no way to place worker {k}: internal error")
    moves = []
    node = target
    while parent[node] is not None:
        a, w = parent[node]
        moves.append((w, a, node))
        node = a
    # apply from the open end: each mover frees its slot for the next one back, k takes the last
    free = (target, None)
    for w, a, b in moves:
        cluster, slot = free
        if slot is None:
            members[cluster].append(w)
        else:
            members[cluster][slot] = w
        cluster_of[w] = b
        free = (a, members[a].index(w))  # w still sits in its old slot of a
    cluster, slot = free
    if slot is None:
        members[cluster].append(k)
    else:
        members[cluster][slot] = k
    cluster_of[k] = cluster
    return tuple(moves) + ((k, -1, cluster),)
