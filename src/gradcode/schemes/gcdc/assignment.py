"""GC-DC codeword distribution: the worker cluster assignment matrix of Sec. IV-B (eq. 13) and the
guarantee of Lemma 1 (eq. 19).

Buyukates, Ozfatura, Ulukus, Gunduz, *Gradient Coding with Dynamic Clustering*.

``K`` workers, ``P`` clusters of ``l = K / P`` codewords each (cluster ``p`` owns partitions
``p l .. p l + l - 1`` and the ``l`` codewords of a cyclic repetition code on them, exactly as in
GC-SC). Each worker is assigned to ``n_c`` distinct clusters (the paper's ``n``) and stores every
codeword of each, i.e. ``n_c l`` partitions (memory ``m = n_c l``).

Construction (Sec. IV-B). Workers are split by index into ``l`` groups of ``P``:
``G_g = (g P, ..., g P + P - 1)``. For each group, ``n_c`` shift amounts are drawn uniformly in
``{0, ..., P - 1}`` without replacement. Row ``j l + g`` of the ``(n_c l) x P`` matrix
``A_cluster`` is group ``G_g`` circularly shifted by its ``j``-th shift amount, and column ``p``
lists the workers of cluster ``p``.

Reading of "circular shift by s" (the one that reproduces eq. 13): ``numpy.roll(G_g, s)``, the entry
in column ``p`` being ``G_g[(p - s) mod P]``. With the paper's shifts ``(0, 1)`` for ``w1..w4``,
``(3, 2)`` for ``w5..w8`` and ``(0, 3)`` for ``w9..w12`` this gives eq. 13 row for row (rows 1-3 are
the static assignment of eq. 5, row 4 is ``w4 w1 w2 w3``, row 5 ``w7 w8 w5 w6``). Since the shifts
of one group are distinct, every worker lands in ``n_c`` distinct clusters, and every column holds
``n_c`` workers of each group, ``n_c l`` distinct workers in all.

Worker ids are 0-based in the API; :meth:`ClusterAssignment.__str__` prints the paper's 1-based
``w1 .. wK`` labels so the matrix can be compared with eq. 13 by eye.
"""

from __future__ import annotations

import numpy as np

from gradcode._validation import as_generator, check_int

__all__ = [
    "ClusterAssignment",
    "lemma1_bound",
    "lemma1_holds",
    "min_clusters_per_worker",
    "check_cluster_shape",
]


def check_cluster_shape(workers, clusters, clusters_per_worker=None) -> tuple[int, int, int | None]:
    """Validate ``K`` (workers), ``P`` (clusters) and ``n_c`` (clusters per worker).

    ``P`` must divide ``K`` (clusters have ``l = K / P`` codewords) and ``1 <= n_c <= P`` (a worker
    joins distinct clusters). Raises ``TypeError``/``ValueError`` naming the argument."""
    K = check_int("n", workers, minimum=1)
    P = check_int("clusters", clusters, minimum=1)
    if P > K:
        raise ValueError(f"clusters must be <= the number of workers n={K}; got clusters={P}")
    if K % P:
        raise ValueError(
            f"clusters must divide the number of workers n (clusters of n/clusters codewords);"
            f" got n={K}, clusters={P}"
        )
    if clusters_per_worker is None:
        return K, P, None
    nc = check_int("clusters_per_worker", clusters_per_worker, minimum=1)
    if nc > P:
        raise ValueError(
            f"clusters_per_worker must be <= clusters={P} (a worker joins distinct clusters);"
            f" got clusters_per_worker={nc}"
        )
    return K, P, nc


def lemma1_bound(workers: int, clusters: int) -> float:
    """The right-hand side of Lemma 1, eq. (19): ``P (K - 1) / (2 K)``.

    Lemma 1: if ``n_c > P (K - 1) / (2 K)`` every placement conflict left by Phase I of
    Algorithm 1 is resolved by a single swap. Proof sketch (Sec. V): cluster ``p`` lacks a worker,
    so at most ``l - 1`` of the ``n_c l`` workers of its column sit in it and at least
    ``n_c l - l + 1`` sit elsewhere; the ``P - n_c - 1`` clusters outside ``P_k`` and ``p`` hold at
    most ``(P - n_c - 1) l`` of them, so one sits in a cluster of ``P_k`` as soon as
    ``n_c l - l + 1 > (P - n_c - 1) l``, i.e. ``2 n_c l + 1 > P l``, i.e. eq. (19) with
    ``l = K / P``."""
    K, P, _ = check_cluster_shape(workers, clusters)
    return P * (K - 1) / (2 * K)


def lemma1_holds(workers: int, clusters: int, clusters_per_worker: int) -> bool:
    """Whether ``n_c`` meets Lemma 1's condition (19), ``n_c > P (K - 1) / (2 K)``, in exact
    integer arithmetic (``2 K n_c > P (K - 1)``)."""
    K, P, nc = check_cluster_shape(workers, clusters, clusters_per_worker)
    return 2 * K * nc > P * (K - 1)


def min_clusters_per_worker(workers: int, clusters: int) -> int:
    """The smallest ``n_c`` meeting eq. (19): ``floor(P (K - 1) / (2 K)) + 1`` (at most ``P``).

    E.g. 2 for the running example (K = 12, P = 4: 11/6), 3 for K = 20, P = 5 (Fig. 4), 5 for
    K = 100, P = 10 (Fig. 6 uses 6)."""
    K, P, _ = check_cluster_shape(workers, clusters)
    return min(P, P * (K - 1) // (2 * K) + 1)


class ClusterAssignment:
    """The worker cluster assignment matrix ``A_cluster`` of GC-DC (Sec. IV-B, eq. 13).

    Build it with :meth:`random` (the paper's random circular shifts) or :meth:`from_shifts`
    (given shift amounts, e.g. eq. 13's). Attributes (0-based worker and cluster ids, read-only):

    * ``matrix``: ``(n_c l, P)``; column ``p`` lists the workers of cluster ``p`` (eq. 13's layout);
    * ``columns``: ``(P, n_c l)``; row ``p`` is column ``p`` sorted by worker index (eq. 16/18);
    * ``clusters_of``: ``(K, n_c)``; the clusters of each worker, ascending (the paper's ``P_k``);
    * ``membership``: ``(K, P)`` booleans, ``membership[k, p]`` iff worker ``k`` may join ``p``;
    * ``shifts``: ``(l, n_c)`` shift amounts, row ``g`` for group ``G_g``.

    ``workers`` (``K``), ``clusters`` (``P``), ``cluster_size`` (``l``), ``clusters_per_worker``
    (``n_c``) and ``memory`` (``n_c l``, partitions stored per worker) describe its shape.
    """

    def __init__(self, workers: int, clusters: int, shifts):
        K, P, _ = check_cluster_shape(workers, clusters)
        ell = K // P
        S = np.array(shifts)
        if S.ndim != 2 or S.shape[0] != ell or S.shape[1] < 1:
            raise ValueError(
                f"shifts must be an (n/clusters, clusters_per_worker) = ({ell}, n_c) integer array,"
                f" one row of shift amounts per group of {P} workers; got shape {S.shape}"
            )
        if S.size and not np.issubdtype(S.dtype, np.integer):
            raise TypeError(f"shifts must hold integers, got dtype {S.dtype}")
        nc = S.shape[1]
        check_cluster_shape(K, P, nc)
        if (S < 0).any() or (S >= P).any():
            raise ValueError(f"shift amounts must lie in 0..clusters-1 = 0..{P - 1}; got {S.tolist()}")
        if any(len(set(row)) != nc for row in S.tolist()):
            raise ValueError(
                "the shift amounts of a group must be distinct (drawn without replacement), or a worker"
                f" would join the same cluster twice; got {S.tolist()}"
            )
        self._K, self._P, self._ell, self._nc = K, P, ell, nc
        self._shifts = S.astype(np.intp)
        groups = np.arange(K).reshape(ell, P)  # G_g = row g
        cols = np.arange(P)
        # row j l + g: roll(G_g, s) -> entry in column p is G_g[(p - s) mod P]
        blocks = [groups[np.arange(ell)[:, None], (cols[None, :] - self._shifts[:, j : j + 1]) % P] for j in range(nc)]
        matrix = np.concatenate(blocks, axis=0)
        membership = np.zeros((K, P), dtype=bool)
        membership[matrix, cols[None, :]] = True
        columns = np.sort(matrix.T, axis=1)
        clusters_of = np.nonzero(membership)[1].reshape(K, nc)
        for a in (matrix, membership, columns, clusters_of, self._shifts):
            a.flags.writeable = False
        self._matrix, self._membership, self._columns, self._clusters_of = matrix, membership, columns, clusters_of

    # -------------------------------------------------------------- constructors
    @classmethod
    def random(cls, workers: int, clusters: int, clusters_per_worker: int, seed=None) -> ClusterAssignment:
        """The paper's random construction: for each group of ``P`` workers, ``n_c`` shift amounts
        drawn uniformly from ``{0..P-1}`` without replacement (``seed``: int, SeedSequence or
        Generator)."""
        K, P, nc = check_cluster_shape(workers, clusters, clusters_per_worker)
        rng = as_generator(seed)
        # the first n_c entries of a uniform random permutation of 0..P-1, one per group
        keys = rng.random((K // P, P))
        shifts = np.argsort(keys, axis=1)[:, :nc]
        return cls(K, P, shifts)

    @classmethod
    def from_shifts(cls, workers: int, clusters: int, shifts) -> ClusterAssignment:
        """The assignment with the given ``(l, n_c)`` shift amounts (row ``g`` for workers
        ``g P .. g P + P - 1``); ``from_shifts(12, 4, [[0, 1], [3, 2], [0, 3]])`` is eq. 13."""
        return cls(workers, clusters, shifts)

    # -------------------------------------------------------------- shape
    workers = property(lambda self: self._K, doc="K: number of workers (= number of codewords).")
    clusters = property(lambda self: self._P, doc="P: number of clusters.")
    cluster_size = property(lambda self: self._ell, doc="l = K / P: codewords (and workers) per cluster.")
    clusters_per_worker = property(lambda self: self._nc, doc="n_c: clusters each worker may join.")
    memory = property(lambda self: self._nc * self._ell, doc="m = n_c l: partitions stored per worker.")
    shifts = property(lambda self: self._shifts, doc="(l, n_c) shift amounts, row g for group g.")
    matrix = property(lambda self: self._matrix, doc="(n_c l, P) A_cluster in eq. 13's layout.")
    columns = property(lambda self: self._columns, doc="(P, n_c l) column p sorted by worker index.")
    membership = property(lambda self: self._membership, doc="(K, P) booleans: worker k may join p.")
    clusters_of = property(lambda self: self._clusters_of, doc="(K, n_c) clusters of each worker, ascending.")

    @property
    def lemma1(self) -> bool:
        """Whether this assignment meets Lemma 1's condition (19) (single swaps always suffice)."""
        return lemma1_holds(self._K, self._P, self._nc)

    def static_clusters(self) -> np.ndarray:
        """The ``(l, P)`` GC-SC assignment of the first shift block (rows ``0 .. l-1`` of
        ``matrix``; eq. 5 in the running example): a valid placement of every worker."""
        return self._matrix[: self._ell].copy()

    def stored_partitions(self, worker: int) -> tuple[int, ...]:
        """Partitions worker ``worker`` stores: every partition of each of its clusters
        (``p l .. p l + l - 1`` for ``p`` in ``P_k``), ``memory`` of them, ascending. This meets
        the data-assignment constraint (12) with equality for any ``r >= 1``."""
        k = check_int("worker", worker, minimum=0, maximum=self._K - 1)
        ell = self._ell
        return tuple(int(p) * ell + i for p in self._clusters_of[k] for i in range(ell))

    # -------------------------------------------------------------- display
    def __eq__(self, other):
        if not isinstance(other, ClusterAssignment):
            return NotImplemented
        return self._K == other._K and self._P == other._P and np.array_equal(self._matrix, other._matrix)

    def __hash__(self):
        return hash((self._K, self._P, self._matrix.tobytes()))

    def __repr__(self) -> str:
        return (
            f"<ClusterAssignment n={self._K} clusters={self._P} cluster_size={self._ell}"
            f" clusters_per_worker={self._nc} memory={self.memory}>"
        )

    def format(self, *, sorted_columns: bool = False) -> str:
        """``A_cluster`` as text with the paper's 1-based ``w1 .. wK`` labels, one row per line under
        a header of cluster numbers ``1 .. P``. ``sorted_columns=True`` sorts each column by worker
        index, as eq. (18) does before Algorithm 1 (eq. 16)."""
        M = self._columns.T if sorted_columns else self._matrix
        labels = [[f"w{int(w) + 1}" for w in row] for row in M]
        width = max(len(f"w{self._K}"), len(str(self._P)))
        head = " ".join(f"{p + 1:>{width}}" for p in range(self._P))
        body = "\n".join(" ".join(f"{x:>{width}}" for x in row) for row in labels)
        return f"{head}\n{'-' * len(head)}\n{body}"

    def __str__(self) -> str:
        return f"{self!r}\n{self.format()}"
