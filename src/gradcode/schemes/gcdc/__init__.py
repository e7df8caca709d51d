"""GC-DC: gradient coding with dynamic clustering.

Buyukates, Ozfatura, Ulukus, Gunduz, *Gradient Coding with Dynamic Clustering* (Secs. III-VI).
GC-DC keeps GC-SC's codes (``P`` clusters, each a cyclic repetition code over its ``l = K / P``
partitions, every codeword a combination of ``r`` partial gradients) but gives each worker the
codewords of ``n_c`` clusters (memory ``n_c l`` partitions, computation still ``r`` per round) and
re-forms the clusters every round so that the stragglers spread over them as evenly as possible.

* :mod:`~gradcode.schemes.gcdc.assignment`: codeword distribution, the ``A_cluster`` matrix of
  eq. 13 (:class:`ClusterAssignment`), and Lemma 1's condition (19);
* :mod:`~gradcode.schemes.gcdc.clustering`: Algorithm 1 as a pure function,
  :func:`dynamic_clustering` -> :class:`ClusterPlacement`;
* :mod:`~gradcode.schemes.gcdc.scheme`: :class:`GCDC`, the round-by-round scheme (perfect and
  imperfect straggler state information, the heterogeneous rate-ordered variant);

The paper's Monte Carlo experiments (Table I, Figs. 4-12) are drivers that know about time, so they
live in the experiments layer: :mod:`gradcode.experiments.gcdc_table1` and
:mod:`gradcode.experiments.gcdc_figures` (``gradcode reproduce gcdc-table1`` / ``gcdc-figs``).

Example (the paper's running example, eqs. 13 and 18, Fig. 3)::

    >>> import numpy as np
    >>> from gradcode.schemes.gcdc import ClusterAssignment, dynamic_clustering
    >>> A = ClusterAssignment.from_shifts(12, 4, [[0, 1], [3, 2], [0, 3]])
    >>> S = np.array([1, 1, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1])   # the paper's S: 1 = non-straggler
    >>> dynamic_clustering(A, S == 0).stragglers.tolist()
    [1, 2, 1, 1]
"""

from gradcode.schemes.gcdc.assignment import (
    ClusterAssignment,
    lemma1_bound,
    lemma1_holds,
    min_clusters_per_worker,
)
from gradcode.schemes.gcdc.clustering import ClusterPlacement, Swap, dynamic_clustering
from gradcode.schemes.gcdc.scheme import GCDC, RoundPlan

__all__ = [
    "GCDC",
    "ClusterAssignment",
    "ClusterPlacement",
    "RoundPlan",
    "Swap",
    "dynamic_clustering",
    "lemma1_bound",
    "lemma1_holds",
    "min_clusters_per_worker",
]
