"""Algorithm 1's Phase I as it was written in Python before it was compiled
(``gradcode.schemes.gcdc.clustering._turns``): kept as the oracle the compiled turns must equal
placement for placement (``tests/test_gcdc.py``)."""

import numpy as np


def _phase_one(assignment, strag: np.ndarray, columns: np.ndarray):
    """Phase I (lines 1-25): the larger class (non-stragglers on a tie) is placed first; clusters
    take turns in the order of eq. 17 (fewest candidates of the class in their columns first, ties
    by cluster index), each taking its first unplaced candidate of the class. Each class goes up
    to its uniform share ``ceil(|C| / P)`` per cluster, then its leftovers where they fit.

    Returns ``(first_fast, turn_orders, members, cluster_of)``: whether non-stragglers went first,
    the turn order of each class (first-placed class first), each cluster's members in placement
    order, and each worker's cluster (``-1``: a conflict left for Phase II).
    """
    K, P, ell = assignment.workers, assignment.clusters, assignment.cluster_size
    fast = ~strag
    n_fast = int(fast.sum())
    first_fast = n_fast >= K - n_fast
    masks = (fast, strag) if first_fast else (strag, fast)

    col_class = [m[columns] for m in masks]  # (P, n_c l) booleans
    turn_orders = [np.argsort(c.sum(axis=1), kind="stable").tolist() for c in col_class]
    # each cluster's candidates of a class, in preference order; with n_c = P every column holds
    # every worker, so the clusters share one list and one pointer into it
    shared = assignment.clusters_per_worker == P
    list_of = [0] * P if shared else list(range(P))
    candidates = [
        [columns[0][c[0]].tolist()] if shared else [columns[p][c[p]].tolist() for p in range(P)]
        for c in col_class
    ]

    taken = bytearray(K)  # 1 once a worker is placed
    cluster_of = [-1] * K
    members: list[list[int]] = [[] for _ in range(P)]
    counts = [[0] * P, [0] * P]  # workers of each class per cluster
    pointers = [[0] * len(candidates[0]), [0] * len(candidates[1])]
    sizes = [int(m.sum()) for m in masks]
    placed = [0, 0]

    def turns(c: int, cap: int) -> None:
        """Clusters take turns (order of class c) taking their first unplaced candidate of class c,
        while they hold fewer than ``cap`` workers of it and fewer than ``l`` in all. A pointer
        per candidate list only moves forward past placed workers: O(list length) per class."""
        order = turn_orders[c]
        cand, ptr, cnt = candidates[c], pointers[c], counts[c]
        while placed[c] < sizes[c]:
            progress = False
            for p in order:
                if cnt[p] >= cap or len(members[p]) >= ell:
                    continue
                j = list_of[p]
                lst = cand[j]
                i, end = ptr[j], len(lst)
                while i < end and taken[lst[i]]:
                    i += 1
                if i < end:
                    w = lst[i]
                    taken[w] = 1
                    cluster_of[w] = p
                    members[p].append(w)
                    cnt[p] += 1
                    placed[c] += 1
                    progress = True
                    i += 1
                ptr[j] = i
            if not progress:
                break

    turns(0, min(-(-sizes[0] // P), ell))
    turns(1, min(-(-sizes[1] // P), ell))
    turns(0, ell)
    turns(1, ell)
    return first_fast, turn_orders, members, cluster_of
