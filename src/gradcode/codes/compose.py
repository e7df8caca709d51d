"""Codes built from codes: the direct sum of independent parts, and messages sent one code after
another. Each composite's decoder is built from its parts' decoders (sionna's pattern: decoders
from encoders), so a family written this way gets structured decoding, the answer check, caching,
its straggler rule and its decodability rule with no code of its own.

* :class:`DirectSumCode`: disjoint groups of workers, each running its own code on its own
  partitions (GC-SC clusters, group AGC/CGC, CommFR-GC's fractional-repetition groups). The master
  decodes every part and adds the parts' gradients: ``A = [A_1 | A_2 | ...]`` over the parts'
  rows. A pattern decodes iff every part's restriction does.
* :class:`SequentialCode`: the same workers send the messages of a first code, then those of a
  second code on other partitions (Tandon's partial-straggler scheme: the naive sum, then the inner
  code). Message ``r`` of worker ``w`` belongs to the first code while ``r < R1_w``. A pattern
  decodes iff the first code decodes from the leading messages and the second from the rest.

Both target the sum over *all* partitions, so stacking the parts' coefficients decodes the whole:
``[A_1 A_2] [[B_1, 0], [0, B_2]] = [T_1 T_2] = T``.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np

from gradcode.codes.base import LazyEncoders, LinearCode
from gradcode.codes.decoding import Decoding, Pattern
from gradcode.codes.rules import AllOf, DecodeRule, KOfN, PerGroup
from gradcode.errors import NotDecodableError

__all__ = ["DirectSumCode", "PerPart", "SequentialCode"]


class PerPart(DecodeRule):
    """Every part's rule on its own workers (``workers[p]``: global ids of part ``p``'s local
    workers); decode time is the latest of the parts'."""

    def __init__(self, rules: Sequence[DecodeRule], workers: Sequence[np.ndarray]):
        self.rules = tuple(rules)
        self.workers = tuple(np.asarray(w, dtype=np.intp) for w in workers)
        self.exact = all(r.exact for r in self.rules)

    def satisfied(self, counts):
        counts = np.asarray(counts)
        return all(r.satisfied(counts[w]) for r, w in zip(self.rules, self.workers))

    def decode_time(self, A):
        return np.max([r.decode_time(A[:, w]) for r, w in zip(self.rules, self.workers)], axis=0)

    def __repr__(self):
        return f"PerPart({len(self.rules)} parts)"


def _distinct_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(a, axis=0, return_index=True, return_inverse=True)`` for a non-negative
    integer matrix (inverse flattened), through one integer key per row when the rows fit 63 bits
    (the messages of a group's workers do): one sort of integers instead of one of the rows as
    records, compared field by field (BENCHMARKS.md, "Decode at memory speed, the workers' scales,
    decoding as messages arrive (2026-11-26)", G-AGC's fresh decode)."""
    base = int(a.max(initial=0)) + 1
    if a.shape[1] * math.log2(base) > 62:
        distinct, first, inverse = np.unique(a, axis=0, return_index=True, return_inverse=True)
        return distinct, first, inverse.reshape(-1)
    key = a @ base ** np.arange(a.shape[1] - 1, -1, -1)  # first column most significant: numpy's order
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return a[first], first, inverse


def _part_encoder(parts, part_of, local, w: int) -> np.ndarray:
    """Worker ``w``'s encoder in a direct sum with a lazy part: its part's local one."""
    return parts[part_of[w]].encoders[int(local[w])]


class DirectSumCode(LinearCode):
    """A code made of independent parts (module docstring). Subclasses build their ``parts`` and
    call :meth:`_init_parts`, which builds placement and encoders and calls
    ``LinearCode.__init__``.

    ``workers[p][i]``: the global worker running local worker ``i`` of part ``p``;
    ``partitions[p][j]``: the global partition that is local partition ``j`` of part ``p``.
    Every worker belongs to exactly one part; partition sets are disjoint. Errors name the part
    with ``part_label`` ("cluster 2: ...").

    Parts that are the same code should be passed as the same object (CommFR's groups, G-AGC's and
    G-CGC's groups of one size): a fresh pattern then solves and checks each distinct local
    pattern once, in that code's cache, and every part showing it reuses the answer
    (:meth:`_fast_solve`). Distinct objects are never merged, even with equal encoders: a code's
    decoder may use more than its encoders (AGC's ``E`` and ``M``)."""

    part_label = "part"

    def _init_parts(self, *, parts, workers, partitions, n: int, k: int, **kwargs) -> None:
        parts = tuple(parts)
        workers = tuple(np.asarray(w, dtype=np.intp) for w in workers)
        partitions = tuple(np.asarray(p, dtype=np.intp) for p in partitions)
        if not (len(parts) == len(workers) == len(partitions)):
            raise ValueError("parts, workers and partitions must have one entry per part")
        part_of = np.full(n, -1, dtype=np.intp)
        local = np.empty(n, dtype=np.intp)
        placement: list = [None] * n
        encoders: list = [None] * n
        for p, (code, ws, ps) in enumerate(zip(parts, workers, partitions)):
            if ws.shape != (code.n,) or ps.shape != (code.k,):
                raise ValueError(f"part {p} has {code.n} workers and {code.k} partitions; got {ws.shape}, {ps.shape}")
            if (part_of[ws] >= 0).any():
                raise ValueError(f"worker(s) {sorted(ws[part_of[ws] >= 0].tolist())} belong to two parts")
            part_of[ws] = p
            local[ws] = np.arange(code.n)
            for i, w in enumerate(ws):
                placement[w] = tuple(int(ps[j]) for j in code.placement[i])
                encoders[w] = None if code.lazy else code.encoders[i]
        if (part_of < 0).any():
            raise ValueError(f"worker(s) {np.flatnonzero(part_of < 0).tolist()} belong to no part")
        if any(code.lazy for code in parts):  # each worker's encoder is its part's, built when asked
            encoders = LazyEncoders([parts[part_of[w]].messages_of(int(local[w])) for w in range(n)],
                                    functools.partial(_part_encoder, parts, part_of, local))
        self.parts = parts
        self.subcodes = tuple({id(c): c for c in parts}.values())  # a part may repeat (CommFR)
        self.part_workers = workers
        self.part_partitions = partitions
        self._part_of, self._local = part_of, local
        part_of.flags.writeable = local.flags.writeable = False
        LinearCode.__init__(self, n=n, placement=placement, encoders=encoders, k=k, **kwargs)
        self._derive()

    _DERIVED = ("_shared", "_row_pairs")

    def _derive(self) -> None:
        """What :meth:`_fast_solve` reads, derived from the parts (rebuilt, never pickled:
        :meth:`__setstate__`):

        * ``_shared``: the parts grouped by code object, in order of first appearance, as
          ``(code, ids, workers)``: ``ids`` the parts running ``code``, ``workers[t]`` the global
          workers of part ``ids[t]`` (one row per part);
        * ``_row_pairs``: the tuple ``(w, r)`` of every encoder row, by row index; the rows of a
          decoding are picked from it (building thousands of new pairs per fresh pattern cost
          more than the rest of the assembly)."""
        by_code: dict[int, tuple[LinearCode, list[int]]] = {}
        for p, code in enumerate(self.parts):
            by_code.setdefault(id(code), (code, []))[1].append(p)
        shared = []
        for code, ids in by_code.values():
            members = np.array(ids, dtype=np.intp)
            workers = np.stack([self.part_workers[p] for p in members])
            members.flags.writeable = workers.flags.writeable = False
            shared.append((code, members, workers))
        pairs = tuple((w, r) for w in range(self.n) for r in range(self.messages_of(w)))
        self.__dict__.update(_shared=tuple(shared), _row_pairs=pairs)  # the code may be frozen already

    def split(self, pattern: Pattern) -> list[dict[int, int]]:
        """The pattern restricted to each part, in the part's local worker ids."""
        out: list[dict[int, int]] = [{} for _ in self.parts]
        for w, r in pattern:
            out[self._part_of[w]][int(self._local[w])] = r
        return out

    def _fast_solve(self, pattern: Pattern) -> Decoding:
        """Decode every part from its restriction of ``pattern`` and stack the answers (module
        docstring), each distinct ``(part code, local pattern)`` once.

        Parts running one code object (:meth:`_derive`) whose local message counts are equal
        get that code's one :class:`Decoding` (solved and checked against its encoder rows, which
        are the whole code's rows of those workers, and cached by the code), re-indexed to their
        workers; with G-AGC's 250 groups of one AGC at n = 1000 a fresh pattern with a few
        stragglers is a handful of small solves instead of 250. The stacked answer is then checked
        against the whole code's encoder rows by :meth:`LinearCode._trusted_solve`, as any
        structured answer is, which also gives it its amplification, residual and row terms.
        The coefficients and rows are those of decoding every part on its own; the first part
        (in part order) that cannot decode is the one named."""
        counts = np.zeros(self.n, dtype=np.intp)
        flat = np.fromiter(itertools.chain.from_iterable(pattern), dtype=np.intp, count=2 * len(pattern))
        counts[flat[0::2]] = flat[1::2]
        todo = []  # (first part showing it, code, local counts, workers of each part showing it)
        for code, ids, workers in self._shared:
            local = counts[workers]  # (parts, local workers)
            if len(ids) == 1:
                todo.append((int(ids[0]), code, local[0], workers))
                continue
            distinct, first, inverse = _distinct_rows(local)
            todo.extend((int(ids[first[u]]), code, got, workers[inverse == u]) for u, got in enumerate(distinct))
        todo.sort(key=lambda t: t[0])
        ws, rs, coefs, cond, methods = [], [], [], 1.0, set()
        for p, code, got, showing in todo:
            try:
                sol = code.decoding(tuple((i, r) for i, r in enumerate(got.tolist()) if r))
            except NotDecodableError as exc:
                members = self.part_workers[p].tolist()
                raise NotDecodableError(f"{self.part_label} {p} (workers {members}): {exc}") from None
            local_w, local_r = np.array(sol.rows, dtype=np.intp).reshape(-1, 2).T
            ws.append(showing[:, local_w].ravel())  # part by part, each in its local rows' order
            rs.append(np.tile(local_r, len(showing)))
            coefs.append(np.tile(sol.coefficients, len(showing)))
            cond = max(cond, sol.condition)
            methods.add(sol.method)
        row_ids = self._sparse_rows()[1][np.concatenate(ws)] + np.concatenate(rs)  # sorts rows by (w, r)
        order = np.argsort(row_ids, kind="stable")  # a few sorted runs: timsort merges them
        row_ids = row_ids[order]
        rows = tuple([self._row_pairs[i] for i in row_ids.tolist()])
        A = np.concatenate(coefs, axis=1)[:, order]
        method = methods.pop() if len(methods) == 1 else f"{self.part_label}s: " + "; ".join(sorted(methods))
        return Decoding(pattern, rows, A, cond, method, row_ids=row_ids)

    def straggling(self, counts) -> np.ndarray:
        """Each part's straggler rule on its own workers."""
        counts = self._check_counts(counts)
        out = np.empty(counts.shape, dtype=bool)
        for code, ws in zip(self.parts, self.part_workers):
            out[..., ws] = code.straggling(counts[..., ws])
        return out

    def decode_rule(self) -> DecodeRule:
        """Every part's rule on its workers; one vectorized :class:`PerGroup` when every part is
        "any ``need`` of my equally many workers" (GC-SC clusters, CommFR MDS groups)."""
        rules = [code.decode_rule() for code in self.parts]
        first = rules[0]
        if (all(type(r) is KOfN and (r.need, r.msg) == (first.need, first.msg) for r in rules)
                and len({len(w) for w in self.part_workers}) == 1):
            return PerGroup(np.stack(self.part_workers), first.need, first.msg)
        return PerPart(rules, self.part_workers)

    def clear_cache(self) -> None:
        super().clear_cache()
        for code in self.subcodes:
            code.clear_cache()

    def __getstate__(self):
        state = super().__getstate__()
        for name in self._DERIVED:
            state.pop(name, None)
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        # a checkpoint (runtime/safe_state.py) restores every reference to a part as its own
        # object: ``subcodes`` are made the parts again, so that clear_cache and max_condition
        # reach the codes that decode (parts that shared one object stay separate copies: still
        # correct, each solving its own patterns)
        self.__dict__["subcodes"] = tuple({id(c): c for c in self.parts}.values())
        self._derive()  # also for codes saved before it existed


class SequentialCode(LinearCode):
    """Worker ``w`` sends the ``R1_w`` messages of ``first``, then those of ``second`` (module
    docstring). Both codes have the same ``n`` and chunks; ``second``'s partitions are numbered
    after ``first``'s. Subclasses call :meth:`_init_sequence`."""

    def _init_sequence(self, *, first: LinearCode, second: LinearCode, partitions=None, **kwargs) -> None:
        """``partitions``: optional ``(first_map, second_map)``, the global partition of each
        local partition of either code (default: ``first``'s, then ``second``'s)."""
        if first.n != second.n or first.chunks != second.chunks:
            raise ValueError("sequential parts must have the same workers and chunks")
        n, L = first.n, first.chunks
        if partitions is None:
            partitions = (np.arange(first.k), first.k + np.arange(second.k))
        map1, map2 = (np.asarray(p, dtype=np.intp) for p in partitions)
        placement, encoders = [], []
        for w in range(n):
            p1 = tuple(int(map1[j]) for j in first.placement[w])
            p2 = tuple(int(map2[j]) for j in second.placement[w])
            E1, E2 = first.encoders[w], second.encoders[w]
            E = np.zeros((E1.shape[0] + E2.shape[0], len(p1) + len(p2), L))
            E[: E1.shape[0], : len(p1)] = E1
            E[E1.shape[0] :, len(p1) :] = E2
            placement.append(p1 + p2)
            encoders.append(E)
        self.first, self.second = first, second
        self.subcodes = (first, second)
        self._lead = np.array([first.messages_of(w) for w in range(n)], dtype=np.intp)
        LinearCode.__init__(self, n=n, placement=placement, encoders=encoders, k=first.k + second.k,
                            chunks=L, **kwargs)

    def _fast_solve(self, pattern: Pattern) -> Decoding:
        head = {w: min(r, int(self._lead[w])) for w, r in pattern}
        tail = {w: r - int(self._lead[w]) for w, r in pattern if r > self._lead[w]}
        try:
            a = self.first.decoding(head)
        except NotDecodableError as exc:
            raise NotDecodableError(f"{type(self).__name__}: the leading messages: {exc}") from None
        if not tail:
            raise NotDecodableError(f"{type(self).__name__}: no message of the second code received")
        try:
            b = self.second.decoding(tail)
        except NotDecodableError as exc:
            raise NotDecodableError(f"{type(self).__name__}: the second messages: {exc}") from None
        rows = a.rows + tuple((w, int(self._lead[w]) + r) for w, r in b.rows)
        A = np.concatenate([a.coefficients, b.coefficients], axis=1)
        order = sorted(range(len(rows)), key=rows.__getitem__)
        return Decoding(pattern, tuple(rows[i] for i in order), A[:, order],
                        max(a.condition, b.condition), f"{a.method}+{b.method}")

    def decode_rule(self) -> DecodeRule:
        """The first code's rule, and the second's on the message after the first's (when every
        worker sends the same number of first messages; else the generic rule)."""
        lead = set(self._lead.tolist())
        if len(lead) == 1:
            try:
                return AllOf(self.first.decode_rule(), self.second.decode_rule().on_message(lead.pop()))
            except TypeError:  # a rule with no shifted form
                pass
        return super().decode_rule()

    def clear_cache(self) -> None:
        super().clear_cache()
        self.first.clear_cache()
        self.second.clear_cache()
