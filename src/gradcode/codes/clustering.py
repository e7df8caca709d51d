"""Gradient coding with static clustering (GC-SC): Buyukates, Ozfatura, Ulukus, Gunduz,
*Gradient Coding with Dynamic Clustering*, Section II-B.

The ``n`` workers form ``P`` disjoint clusters of ``l = n / P`` workers (the ``l x P`` assignment
matrix ``A_cluster`` of eq. 5, one column per cluster). Cluster ``p`` owns partitions
``p l, ..., (p + 1) l - 1`` and runs its own cyclic repetition code tolerating ``s`` stragglers on
them (computation load ``r = s + 1`` partitions per worker). The full gradient is the sum of the
clusters' gradients, so the master decodes whenever no cluster has more than ``s`` stragglers:
``s`` in the worst case, up to ``P s`` when stragglers spread evenly. The code is the direct sum
of the clusters' CRCs (:class:`~gradcode.codes.compose.DirectSumCode`), which gives it its
per-cluster decoder and its decodability rule (any ``l - s`` workers of every cluster).
"""

from __future__ import annotations

import numpy as np

from gradcode._validation import as_generator, check_int
from gradcode.codes.base import register
from gradcode.codes.compose import DirectSumCode
from gradcode.codes.tandon import CRC


@register("gc-sc")
class GCSC(DirectSumCode):
    """GC-SC: ``clusters`` clusters of ``n / clusters`` workers, each a CRC tolerating ``s``
    stragglers on its own partitions. ``assignment`` is the ``(n/clusters) x clusters`` worker
    assignment matrix of eq. 5 with 0-based worker ids (column ``p`` lists cluster ``p``'s workers,
    row ``i`` is the worker holding the cluster's ``i``-th cyclic codeword); by default cluster ``p``
    is workers ``p l, ..., p l + l - 1``."""

    examples = (dict(n=4, clusters=2, s=1), dict(n=6, clusters=2, s=1), dict(n=8, clusters=2, s=2, seed=4))

    summary = "GC with static clustering (GC-DC Sec. II-B): a CRC per cluster"
    part_label = "cluster"

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
        self.cluster_codes = tuple(CRC(size, s, rng) for _ in range(P))
        self._init_parts(
            parts=self.cluster_codes,
            workers=[A[:, p] for p in range(P)],
            partitions=[p * size + np.arange(size) for p in range(P)],
            n=n,
            k=n,
            tolerance=s,
            params={"n": n, "clusters": P, "s": s, "seed": seed if not isinstance(seed, np.random.Generator) else None},
        )
