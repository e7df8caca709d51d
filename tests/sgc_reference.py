"""The per-track vectorized replay of SR-SGC and M-SGC that ``tune`` used before its compiled
replay (:mod:`gradcode.schemes.sgc.replay`): every live track checked every round, as SGC Sec. 2
states the models, ``K`` parameter sets at once. Kept as the oracle the compiled replay must equal
bit for bit (``tests/test_tune_search.py``)."""

import numpy as np

from gradcode.schemes.sgc.tune import _clip


def _popcount(words: np.ndarray) -> np.ndarray:
    """Set bits per row of packed words (last axis)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(words).sum(axis=-1, dtype=np.intp)
    return _POP8[words.view(np.uint8)].sum(axis=-1, dtype=np.intp)


_POP8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


class _Batch:
    """A batch of ``K`` replays of one family on the same profile, differing in their constant
    shift ``c`` (the load adjustment) and their model parameters (``lam``, ``s``): the effective
    straggler rows and the per-track flags.

    Rows are kept bit-packed (``n`` workers in ``ceil(n / 64)`` words), so the unions, overlaps and
    counts of the straggler model's checks cost a few words a replay instead of ``n`` booleans; the
    union of a track's past rounds comes from one suffix-OR over the last ``W`` rounds per round
    (not one OR per track), and a worker's straggling rounds in a span from running counts."""

    def __init__(self, family, n, rounds, B, W, lam, s, jobs):
        self.family, self.n, self.B, self.W, self.J = family, n, B, W, jobs
        self.lam = np.asarray(lam)
        self.s = np.asarray(s)
        K = self.lam.size
        self.words = -(-n // 64)
        self.H = np.zeros((K, rounds, self.words), dtype=np.uint64)  # packed straggler rows
        self.T = (W - 2 + B) if family == "m-sgc" else B
        if family == "m-sgc" and B > 1:  # straggling rounds per worker up to each round
            # a ring of the last T + 2 counts: the tracks of round t start at t - T at the earliest
            # (the whole table was K (rounds + 1) n int32, 126 MB at n = 256, J = 480)
            self._ring = self.T + 2
            self.C = np.zeros((K, self._ring, n), dtype=np.int32)
        self.flags: dict[int, np.ndarray] = {}  # track start -> (K, models) flags
        self.K = K

    def pack(self, rows: np.ndarray) -> np.ndarray:
        """``(K', n)`` booleans as ``(K', words)`` packed words."""
        bits = np.packbits(rows, axis=-1, bitorder="little")
        pad = 8 * self.words - bits.shape[-1]
        if pad:
            bits = np.concatenate([bits, np.zeros(bits.shape[:-1] + (pad,), dtype=np.uint8)], axis=-1)
        return bits.view(np.uint64)

    def tracks(self, t):
        if self.family == "m-sgc":
            return [u for u in range(max(0, t - self.T), t + 1) if u < self.J]
        return list(range(max(0, t - self.W + 1), t + 1))

    def _suffix_or(self, lo: int, hi: int) -> np.ndarray:
        """``out[j] = OR(H[:, lo + j : hi])`` for ``j = 0 .. hi - lo`` (the last one empty)."""
        out = np.zeros((hi - lo + 1, self.K, self.words), dtype=np.uint64)
        if hi > lo:
            out[:-1] = np.bitwise_or.accumulate(self.H[:, lo:hi][:, ::-1], axis=1)[:, ::-1].transpose(1, 0, 2)
        return out

    def begin(self, t):
        """Gather, for every live track of round ``t``, the unions and counts its checks need
        (stacked ``(tracks, K, words)``), and its flags so far."""
        B, W = self.B, self.W
        self._t = t
        self._tracks = tracks = self.tracks(t)
        if not tracks:
            return
        first = max(min(tracks[0], t - W + 1), 0)
        upto_t = self._suffix_or(first, t)                 # OR(H[j:t]) from j = first
        hi = t - B + 1
        upto_hi = self._suffix_or(first, max(hi, first))  # OR(H[j:hi])
        lo = np.maximum(np.asarray(tracks), t - W + 1) - first
        self._Db = upto_t[lo]
        self._Fb = np.where((hi > lo + first)[:, None, None], upto_hi[np.minimum(lo, upto_hi.shape[0] - 1)], 0)
        if self.family == "m-sgc":  # arbitrary (B, W + B - 1, lam) on the job's span
            self._Da = upto_t[np.asarray(tracks) - first]
            if B == 1:  # one straggling round in the span is a burst of B
                self._Ca = self._Da
            else:  # workers with B straggling rounds in the track's span so far
                ring = self._ring
                now, starts = self.C[:, t % ring], self.C[:, np.asarray(tracks) % ring]
                self._Ca = self.pack(now[None] - starts.transpose(1, 0, 2) >= B)
        ones = np.ones((self.K, 2), dtype=bool)
        self._prev = np.stack([self.flags.get(a, ones) for a in tracks])

    def _per_track(self, cur, idx=None):
        """Flags ``(tracks, K', 2)`` for stragglers ``cur`` ``(K', n)`` (rows ``idx`` of the batch)."""
        sel = slice(None) if idx is None else idx
        lam = self.lam[sel]
        packed = self.pack(cur)[None]
        b = (_popcount(self._Db[:, sel] | packed) <= lam) & ~(self._Fb[:, sel] & packed).any(axis=2)
        if self.family == "m-sgc":
            o = (_popcount(self._Da[:, sel] | packed) <= lam) & ~(self._Ca[:, sel] & packed).any(axis=2)
        else:  # SR-SGC: at most s stragglers in the round
            o = np.broadcast_to(np.count_nonzero(cur, axis=1) <= self.s[sel], b.shape)
        return np.stack([b, o], axis=2) & self._prev[:, sel]

    def ok(self, cur, idx=None):
        if not self._tracks:
            return np.ones(cur.shape[0], dtype=bool)
        return self._per_track(cur, idx).any(axis=2).all(axis=0)

    def commit(self, rows):
        t = self._t
        self.H[:, t] = self.pack(rows)
        if hasattr(self, "C"):
            self.C[:, (t + 1) % self._ring] = self.C[:, t % self._ring] + rows
        if self._tracks:
            for a, f in zip(self._tracks, self._per_track(rows)):
                self.flags[a] = f
        end = (t - self.T) if self.family == "m-sgc" else (t - self.W + 1)
        self.flags.pop(end, None)


def _scan(family, X, shift, B, W, lam, s, jobs, mu, waitout):
    """Replay ``X + shift[k]`` (``K`` replays) for SR-SGC / M-SGC: total times and wait-outs."""
    R, n = X.shape
    batch = _Batch(family, n, R, B, W, lam, s, jobs)
    rounds = jobs + batch.T
    K = shift.size
    total = np.zeros(K)
    waits = np.zeros(K, dtype=np.intp)
    order = np.argsort(X[:rounds], axis=1, kind="stable")
    xs = np.take_along_axis(X[:rounds], order, axis=1)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(n)[None, :].repeat(rounds, axis=0), axis=1)
    work = _SRSGCWork(K, rounds, n, B, np.asarray(s), jobs) if family == "sr-sgc" else None
    for t in range(rounds):
        x = X[t]
        kappa, top = xs[t, 0], xs[t, -1]
        cutoff = np.minimum((1.0 + mu) * _clip(kappa + shift), _clip(top + shift))
        cur = _clip(x[None, :] + shift[:, None]) > cutoff[:, None]
        active = work.active(t) if work is not None else None
        if active is not None:  # a final round: only the re-attempting workers compute
            xa = _clip(np.where(active, x[None, :], np.nan) + shift[:, None])
            some = active.any(axis=1)
            filled = np.where(some[:, None], xa, 0.0)  # an idle replay: any finite row
            kap, hi = np.nanmin(filled, axis=1), np.nanmax(filled, axis=1)
            cutoff = np.where(some, np.minimum((1.0 + mu) * kap, hi), 0.0)  # nothing to compute: no time
            late = np.where(some, hi, 0.0)
            cur = active & (xa > cutoff[:, None])
        else:
            late = _clip(top + shift)
        batch.begin(t)
        ok = batch.ok(cur)
        total += np.where(ok, cutoff, late)
        rows = np.where(ok[:, None], cur, False)
        bad = np.flatnonzero(~ok)
        waits[bad] += 1
        # a final round left unresolved waits for its last active worker (both rules: an upper bound
        # of the decodable one, whose bisection below ranks every worker)
        if bad.size and waitout == "decodable" and active is None:
            # largest k such that the k slowest workers as stragglers conform: bisection on k
            hi_k = cur[bad].sum(axis=1)  # not ok
            lo_k = np.zeros(bad.size, dtype=np.intp)  # ok (no stragglers)
            while True:
                open_ = hi_k - lo_k > 1
                if not open_.any():
                    break
                mid = (lo_k + hi_k) // 2
                cand = rank[t][None, :] >= (n - mid)[:, None]
                good = batch.ok(cand, bad)
                lo_k = np.where(open_ & good, mid, lo_k)
                hi_k = np.where(open_ & ~good, mid, hi_k)
            k = lo_k
            end = _clip(xs[t, n - 1 - k] + shift[bad])
            total[bad] += end - late[bad]
            rows[bad] = rank[t][None, :] >= (n - k)[:, None]
        batch.commit(rows)
        if work is not None:
            work.commit(t, rows)
    return total, waits


class _SRSGCWork:
    """Which of SR-SGC's final rounds have work, by Algorithm 1 (SGC Sec. 3.2), for ``K`` replays.

    In round ``t`` the workers that did not return job ``t - B``'s result in round ``t - B`` re-attempt
    it, as many as job ``t - B`` still lacks (``n - s - N(t - B)``, first by worker index), and the
    others attempt job ``t``. The final ``B`` rounds ``t = J .. J + B - 1`` have no job ``t`` (the
    paper's trivial tasks, "which do not incur any computation", Sec. 3.3.1), so a final round
    whose job ``t - B`` was finished in its own round (``N(t - B) >= n - s``) computes nothing: it
    costs no time and has no stragglers, as in the authors' own simulator. In a final round with
    re-attempts left only the re-attempting workers compute, so only they are timed."""

    def __init__(self, K, rounds, n, B, s, jobs):
        self.B, self.J, self.n = B, jobs, n
        self.need = (n - np.broadcast_to(s, (K,))).astype(np.intp)
        self.returned = np.zeros((rounds, K, n), dtype=bool)  # returned job t's result in round t
        self.count = np.zeros((rounds, K), dtype=np.intp)  # N(t)
        self._reattempt = np.zeros((K, n), dtype=bool)

    def active(self, t):
        """Plan round ``t``'s re-attempts; ``(K, n)``: the workers computing in it if it is a final
        round (none: it costs nothing), else None."""
        old = t - self.B
        if old < 0:
            self._reattempt = np.zeros_like(self._reattempt)
        else:
            lack = np.maximum(self.need - self.count[old], 0)
            cand = ~self.returned[old]
            self._reattempt = cand & (np.cumsum(cand, axis=1) <= lack[:, None])
        return self._reattempt if t >= self.J else None

    def commit(self, t, stragglers):
        if t < self.J:
            self.returned[t] = ~self._reattempt & ~stragglers
            self.count[t] = self.returned[t].sum(axis=1)
