"""Gradient coding with static clustering (GC-SC): Buyukates, Ozfatura, Ulukus, Gunduz,
*Gradient Coding with Dynamic Clustering*, Section II-B.

The ``n`` workers form ``P`` disjoint clusters of ``l = n / P`` workers (the ``l x P`` assignment
matrix ``A_cluster`` of eq. 5, one column per cluster). Cluster ``p`` owns partitions
``p l, ..., (p + 1) l - 1`` and runs its own cyclic repetition code tolerating ``s`` stragglers on
them (computation load ``r = s + 1`` partitions per worker). The full gradient is the sum of the
clusters' gradients, so the master decodes whenever no cluster has more than ``s`` stragglers:
``s`` in the worst case, up to ``P s`` when stragglers spread evenly.
"""

from __future__ import annotations

import numpy as np

from gradcode._validation import as_generator, check_int
from gradcode.codes.base import Decoding, LinearCode, register
from gradcode.codes.rules import PerGroup
from gradcode.codes.tandon import CRC
from gradcode.errors import NotDecodableError


@register("gc-sc")
class GCSC(LinearCode):
    """GC-SC: ``clusters`` clusters of ``n / clusters`` workers, each a CRC tolerating ``s``
    stragglers on its own partitions. ``assignment`` is the ``(n/clusters) x clusters`` worker
    assignment matrix of eq. 5 with 0-based worker ids (column ``p`` lists cluster ``p``'s workers,
    row ``i`` is the worker holding the cluster's ``i``-th cyclic codeword); by default cluster ``p``
    is workers ``p l, ..., p l + l - 1``."""

    summary = "GC with static clustering (GC-DC Sec. II-B): a CRC per cluster"

    def __init__(self, n: int, clusters: int, s: int, assignment=None, seed=0):
        n = check_int("n", n, minimum=1)
        P = check_int("clusters", clusters, minimum=1, maximum=n)
        if n % P:
            raise ValueError(f"clusters must divide n; got n={n}, clusters={P}")
        size = n // P
        s = check_int("s", s, minimum=0)
        if s >= size:
            raise ValueError(f"s must be < the cluster size n/clusters = {size}; got s={s}")
        if assignment is None:
            A = np.arange(n).reshape(P, size).T
        else:
            A = np.asarray(assignment)
            if A.shape != (size, P) or not np.issubdtype(A.dtype, np.integer):
                raise ValueError(
                    f"assignment must be an integer ({size}, {P}) matrix of worker ids; got shape {A.shape}"
                )
            if sorted(A.ravel().tolist()) != list(range(n)):
                raise ValueError(f"assignment must list every worker 0..{n - 1} exactly once")
        rng = as_generator(seed)
        self.assignment = A.copy()
        self.assignment.flags.writeable = False
        self.cluster_codes = self.subcodes = tuple(CRC(size, s, rng) for _ in range(P))
        self.cluster_of = np.empty(n, dtype=int)
        self.position = np.empty(n, dtype=int)
        placement = [None] * n
        encoders = [None] * n
        for p in range(P):
            for i in range(size):
                w = int(A[i, p])
                self.cluster_of[w], self.position[w] = p, i
                placement[w] = tuple(p * size + j for j in self.cluster_codes[p].placement[i])
                encoders[w] = self.cluster_codes[p].encoders[i]
        super().__init__(
            n=n,
            placement=placement,
            encoders=encoders,
            k=n,
            tolerance=s,
            params={"n": n, "clusters": P, "s": s, "seed": seed if not isinstance(seed, np.random.Generator) else None},
        )

    def _fast_solve(self, pattern):
        per_cluster = [dict() for _ in self.cluster_codes]
        for w, r in pattern:
            per_cluster[self.cluster_of[w]][int(self.position[w])] = r
        rows, coefs, cond = [], [], 1.0
        for p, (code, got) in enumerate(zip(self.cluster_codes, per_cluster)):
            try:
                sol = code.decoding(got)
            except NotDecodableError as exc:
                raise NotDecodableError(f"cluster {p}: {exc}") from None
            members = self.assignment[:, p]
            rows.extend((int(members[i]), r) for i, r in sol.rows)
            coefs.append(sol.coefficients)
            cond = max(cond, sol.condition)
        return Decoding(pattern, tuple(rows), np.concatenate(coefs, axis=1), cond, "gc-sc-clusters")

    def decode_rule(self):
        """Any ``l - s`` workers of every cluster."""
        return PerGroup(self.assignment.T, self.assignment.shape[0] - self.tolerance)
