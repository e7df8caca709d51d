"""Decodability of a code as a rule on message prefixes: what the simulator's vectorized path and
:meth:`gradcode.schemes.StaticScheme.ready` evaluate instead of a decoding solve.

A code gives its own rule (:meth:`gradcode.codes.LinearCode.decode_rule`): any ``n - s`` workers
for CRC, one worker per data group for FRC, ``l - s`` per cluster for GC-SC, every naive message
and the inner code's rule on the second message for the partial-straggler scheme; codes without a
closed rule get :class:`GenericRule` (``can_decode`` on growing prefixes). Exact rules agree with
``can_decode`` on every pattern where the decoder's condition is below ``max_condition``
(tests check them exhaustively on small codes).
"""

from __future__ import annotations

import numpy as np

__all__ = ["AllOf", "DecodeRule", "GenericRule", "KOfN", "PerGroup"]


class DecodeRule:
    """Decodability of a static code as a rule on message prefixes.

    ``satisfied(counts)``: ``counts[w]`` leading messages of worker ``w`` are held; are they
    enough? ``decode_time(A)``: ``A`` is ``(rounds, n, R)`` arrival times of each message (``inf``
    past a worker's last message, times non-decreasing along the last axis); the earliest time
    ``T`` per round at which the messages arrived by ``T`` (ties included) decode, ``inf`` if never.
    ``exact`` rules agree with ``code.can_decode`` on every pattern (for CRC and GC-SC with
    probability one over the code's random draw; tests check this exhaustively on small codes).
    """

    exact = True

    def on_message(self, msg: int) -> DecodeRule:
        """The same rule applied to message ``msg`` of every worker instead of message 0 (a code
        sent after ``msg`` messages of another, as in the partial-straggler scheme)."""
        raise TypeError(f"{type(self).__name__} has no single-message form to shift")

    def satisfied(self, counts: np.ndarray) -> bool:
        raise NotImplementedError

    def decode_time(self, A: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class KOfN(DecodeRule):
    """Any ``need`` workers with message ``msg`` (MDS-like codes: CRC, ignore, uncoded)."""

    def __init__(self, need: int, msg: int = 0):
        self.need, self.msg = need, msg

    def on_message(self, msg: int) -> KOfN:
        return KOfN(self.need, msg)

    def satisfied(self, counts):
        return int(np.count_nonzero(counts > self.msg)) >= self.need

    def decode_time(self, A):
        col = A[:, :, self.msg]
        return np.partition(col, self.need - 1, axis=1)[:, self.need - 1]

    def __repr__(self):
        return f"KOfN(need={self.need}, msg={self.msg})"


class PerGroup(DecodeRule):
    """At least ``need`` workers with message ``msg`` in every group (``groups``: a
    ``(G, size)`` array of worker ids): FRC data groups (need 1), GC-SC clusters (need l - s)."""

    def __init__(self, groups: np.ndarray, need: int, msg: int = 0):
        self.groups = np.asarray(groups, dtype=np.intp)
        self.need, self.msg = need, msg

    def on_message(self, msg: int) -> PerGroup:
        return PerGroup(self.groups, self.need, msg)

    def satisfied(self, counts):
        return bool(((counts[self.groups] > self.msg).sum(axis=1) >= self.need).all())

    def decode_time(self, A):
        col = A[:, :, self.msg][:, self.groups]  # (rounds, G, size)
        return np.partition(col, self.need - 1, axis=2)[:, :, self.need - 1].max(axis=1)

    def __repr__(self):
        return f"PerGroup(groups={self.groups.shape[0]}, need={self.need}, msg={self.msg})"


class AllOf(DecodeRule):
    """Every sub-rule holds (the partial-straggler scheme: message 0 of every worker and the inner
    code on message 1)."""

    def __init__(self, *rules: DecodeRule):
        self.rules = rules

    def satisfied(self, counts):
        return all(r.satisfied(counts) for r in self.rules)

    def decode_time(self, A):
        return np.max([r.decode_time(A) for r in self.rules], axis=0)

    def __repr__(self):
        return f"AllOf{self.rules!r}"


class GenericRule(DecodeRule):
    """Any code: ``code.can_decode`` decides. ``decode_time`` sorts a round's messages by arrival
    and binary-searches the shortest decodable prefix (decodability only grows with more messages),
    so a round costs ``O(log(n R))`` calls, each cached per pattern by the code."""

    exact = True

    def __init__(self, code):
        self.code = code

    def satisfied(self, counts):
        return self.code.can_decode({w: int(c) for w, c in enumerate(counts) if c})

    def decode_time(self, A):
        rounds, n, R = A.shape
        out = np.full(rounds, np.inf)
        w_idx = np.repeat(np.arange(n), R)
        for t in range(rounds):
            times = A[t].ravel()
            order = np.lexsort((np.tile(np.arange(R), n), w_idx, times))
            order = order[np.isfinite(times[order])]
            st = times[order]
            wk = w_idx[order]

            def ok(length):
                # the first `length` arrivals; ties need no special care: the shortest decodable
                # prefix ends at time T, every shorter prefix (so every earlier instant) fails,
                # and the tie-inclusive set at T contains the prefix, so it decodes too
                return self.satisfied(np.bincount(wk[:length], minlength=n))

            if not order.size or not ok(order.size):
                continue
            lo, hi = 1, order.size  # smallest decodable prefix length in [lo, hi]
            while lo < hi:
                mid = (lo + hi) // 2
                if ok(mid):
                    hi = mid
                else:
                    lo = mid + 1
            out[t] = st[lo - 1]
        return out

    def __repr__(self):
        return f"GenericRule({self.code!r})"
