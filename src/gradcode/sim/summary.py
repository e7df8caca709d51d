"""Running summaries of a simulated run, in memory that does not grow with the number of rounds.

Why: the simulator used to keep every round (the ``(rounds, workers)`` straggler, arrival and
finish tables and the per-round times: 2.2 GB for 1e7 rounds at n = 12) only to report a handful
of numbers. :func:`gradcode.simulate` now feeds each block of rounds to a :class:`RunStats` and
keeps the per-round tables only when asked (``records=True``; see :mod:`gradcode.sim.simulator`).

What is kept, and how exact it is:

* counts (rounds, stragglers, wait-outs, jobs decoded) and the extremes (min, max): exact;
* the total time: each block's sum (numpy's pairwise sum) added into an exact running sum
  (Shewchuk's partials, as :func:`math.fsum`), so it is never worse than one pairwise sum of a
  block; it may differ from ``round_times.sum()`` over the whole run in the last bits, and is the
  same whether or not records are kept (the blocks are the same);
* the variance (Chan et al.'s pairwise update over blocks) and a 95 % confidence interval for
  the mean round time by *batch means* (:data:`BATCHES` contiguous batches of rounds): round times
  are correlated under the Markov delay models, where the i.i.d. interval ``1.96 s / sqrt(N)``
  would be too narrow;
* quantiles (median, p95, any other) by :class:`QuantileSketch`: exact, and equal bit for bit to
  ``np.median`` / ``np.percentile``, while the run has at most :data:`EXACT_LIMIT` distinct round
  times (discrete delays: ``fixed``, ``partial``, ``bernoulli``; a short trace replayed; any run that
  short); past that, within relative error :data:`RELATIVE_ACCURACY` (log-spaced buckets).
"""

from __future__ import annotations

import math

import numpy as np

#: relative accuracy of the quantiles once a run has more than EXACT_LIMIT distinct round times
RELATIVE_ACCURACY = 1e-4
#: distinct values kept exactly (value, count) before switching to log-spaced buckets: enough for
#: any discrete delay model; kept below a block of rounds so that continuous times switch to
#: buckets after the first block instead of paying an O(limit) merge per block
EXACT_LIMIT = 4096
#: batches of the batch-means confidence interval for the mean
BATCHES = 32


# ---------------------------------------------------------------------------------- quantiles


class QuantileSketch:
    """Quantiles of a stream of non-negative numbers (round times) in bounded memory.

    *Exact mode*: the sorted distinct values and their counts, while there are at most
    ``exact_limit`` of them. Quantiles are then computed as numpy computes them on the whole
    array (``np.percentile``'s ``linear`` method, ``np.median``), bit for bit: only the two order
    statistics around the quantile's position are needed, and the histogram gives them exactly.

    *Bucket mode* (past ``exact_limit`` distinct values): the DDSketch construction. A value
    ``x > 0`` goes to bucket ``i = ceil(log(x) / log(gamma))``, ``gamma = (1 + a) / (1 - a)``,
    whose representative ``2 gamma^i / (gamma + 1)`` is within relative error ``a`` of every value
    in it (up to the rounding of the logarithm); zeros are counted apart. An order statistic is
    the representative of the bucket that holds it, clamped to the exact minimum and maximum
    (so the 0th and 100th percentiles stay exact). The counts are a dense array over the occupied
    bucket range: ``log(max / min_positive) / log(gamma)`` entries, about 12,000 per decade of
    spread at ``a = 1e-4`` (under 1 MiB for times spanning 10 decades), whatever the number of
    values.

    ``merge`` adds another sketch's values (pooling repeats), exactly when both are exact and
    their union stays under the limit.
    """

    def __init__(self, relative_accuracy: float = RELATIVE_ACCURACY, exact_limit: int = EXACT_LIMIT):
        if not 0 < relative_accuracy < 1:
            raise ValueError(f"relative_accuracy must be in (0, 1), got {relative_accuracy!r}")
        self.relative_accuracy = float(relative_accuracy)
        self.exact_limit = int(exact_limit)
        self.count = 0
        self.min = math.inf
        self.max = -math.inf
        # exact mode
        self._values: np.ndarray | None = np.zeros(0)
        self._counts: np.ndarray | None = np.zeros(0, dtype=np.int64)
        # bucket mode
        self._log_gamma = math.log((1 + self.relative_accuracy) / (1 - self.relative_accuracy))
        self._zeros = 0
        self._lo = 0  # bucket index of _buckets[0]
        self._buckets: np.ndarray | None = None

    @property
    def exact(self) -> bool:
        """True while quantiles are exact (at most ``exact_limit`` distinct values so far)."""
        return self._values is not None

    @property
    def error(self) -> float:
        """Bound on the relative error of :meth:`quantile`: 0 while exact."""
        return 0.0 if self.exact else self.relative_accuracy

    def nbytes(self) -> int:
        arrays = (self._values, self._counts, self._buckets)
        return sum(a.nbytes for a in arrays if a is not None)

    # ------------------------------------------------------------------ adding
    def add(self, values) -> None:
        """Add a 1-D array of finite values >= 0."""
        x = np.asarray(values, dtype=np.float64).ravel()
        if x.size == 0:
            return
        lo, hi = float(x.min()), float(x.max())
        if not (lo >= 0 and math.isfinite(hi)):
            raise ValueError("QuantileSketch takes finite values >= 0")
        self.count += x.size
        self.min, self.max = min(self.min, lo), max(self.max, hi)
        if self._values is not None:
            u, c = np.unique(x, return_counts=True)
            self._add_exact(u, c)
        else:
            self._add_buckets(x)

    def _add_exact(self, u: np.ndarray, c: np.ndarray) -> None:
        pos = np.searchsorted(self._values, u)
        known = pos < self._values.size
        known[known] = self._values[pos[known]] == u[known]
        if known.all():  # the common case for discrete times: only counts change
            self._counts[pos] += c  # u is unique, so pos is too
            return
        counts = self._counts.copy()
        counts[pos[known]] += c[known]
        values = np.concatenate([self._values, u[~known]])
        counts = np.concatenate([counts, c[~known]])
        order = np.argsort(values, kind="stable")
        self._values, self._counts = values[order], counts[order]
        if self._values.size > self.exact_limit:
            self._to_buckets()

    def _to_buckets(self) -> None:
        values, counts = self._values, self._counts
        self._values = self._counts = None
        self._buckets = np.zeros(0, dtype=np.int64)
        self._add_buckets(values, counts)

    def _index(self, x: np.ndarray) -> np.ndarray:
        """Bucket indices ``ceil(log(x) / log(gamma))`` of values ``x > 0`` (in place, no extra
        temporaries: this runs on every block of rounds)."""
        v = np.log(x)
        v *= 1.0 / self._log_gamma
        np.ceil(v, out=v)
        return v.astype(np.int64)

    def _add_buckets(self, x: np.ndarray, weights: np.ndarray | None = None) -> None:
        if x.size and x.min() > 0:  # the usual case: no zeros to set apart
            w = weights
        else:
            pos = x > 0
            self._zeros += int(x.size - np.count_nonzero(pos)) if weights is None else int(weights[~pos].sum())
            x, w = x[pos], None if weights is None else weights[pos]
        if x.size == 0:
            return
        idx = self._index(x)
        lo = int(idx.min())
        idx -= lo
        counts = np.bincount(idx) if w is None else np.bincount(idx, weights=w).astype(np.int64)
        self._add_dense(lo, counts)

    def _add_dense(self, lo: int, counts: np.ndarray) -> None:
        if self._buckets.size == 0:
            self._lo, self._buckets = lo, counts.astype(np.int64, copy=True)
            return
        new_lo = min(self._lo, lo)
        new_hi = max(self._lo + self._buckets.size, lo + counts.size)
        if new_lo != self._lo or new_hi != self._lo + self._buckets.size:
            grown = np.zeros(new_hi - new_lo, dtype=np.int64)
            grown[self._lo - new_lo : self._lo - new_lo + self._buckets.size] = self._buckets
            self._lo, self._buckets = new_lo, grown
        self._buckets[lo - self._lo : lo - self._lo + counts.size] += counts

    def merge(self, other: QuantileSketch) -> None:
        """Add every value ``other`` holds (same relative accuracy required)."""
        if other.relative_accuracy != self.relative_accuracy:
            raise ValueError("cannot merge sketches of different relative accuracy")
        if other.count == 0:
            return
        self.count += other.count
        self.min, self.max = min(self.min, other.min), max(self.max, other.max)
        if other.exact:
            if self.exact:
                self._add_exact(other._values, other._counts)
            else:
                self._add_buckets(other._values, other._counts)
            return
        if self.exact:
            self._to_buckets()
        self._zeros += other._zeros
        if other._buckets.size:
            self._add_dense(other._lo, other._buckets)

    # ------------------------------------------------------------------ querying
    def _order_statistic(self, k: int) -> float:
        """The ``k``-th smallest value (0-based): exact in exact mode, else the representative
        of its bucket clamped to [min, max]."""
        if k <= 0:
            return self.min
        if k >= self.count - 1:
            return self.max
        if self._values is not None:
            cum = np.cumsum(self._counts)
            return float(self._values[np.searchsorted(cum, k, side="right")])
        if k < self._zeros:
            return 0.0
        cum = np.cumsum(self._buckets)
        i = int(np.searchsorted(cum, k - self._zeros, side="right")) + self._lo
        return min(max(float(self._representative(np.array(i))), self.min), self.max)

    def _representative(self, i: np.ndarray) -> np.ndarray:
        """``2 gamma^i / (gamma + 1)``: within relative error ``a`` of every value of bucket ``i``,
        ``(gamma^(i-1), gamma^i]``."""
        gamma = math.exp(self._log_gamma)
        return 2.0 * np.exp(i * self._log_gamma) / (gamma + 1.0)

    def quantile(self, q: float) -> float:
        """The ``q``-quantile, ``0 <= q <= 1``, by numpy's default ``linear`` method:
        ``np.quantile(values, q)`` exactly while :attr:`exact`."""
        if not 0 <= q <= 1:
            raise ValueError(f"q must be in [0, 1], got {q!r}")
        if self.count == 0:
            return math.nan
        h = (self.count - 1) * q  # numpy's virtual index for the linear method
        if h >= self.count - 1:
            return self._order_statistic(self.count - 1)
        prev = math.floor(h)
        a, b = self._order_statistic(prev), self._order_statistic(prev + 1)
        return _lerp(a, b, h - prev)

    def percentile(self, p: float) -> float:
        """``np.percentile(values, p)`` (``p`` in percent; the same ``p / 100`` numpy uses)."""
        return self.quantile(p / 100)

    def median(self) -> float:
        """``np.median(values)``: the middle value, or the mean of the two middle ones."""
        if self.count == 0:
            return math.nan
        half = self.count // 2
        if self.count % 2:
            return self._order_statistic(half)
        return (self._order_statistic(half - 1) + self._order_statistic(half)) / 2.0

    def cdf(self) -> tuple[np.ndarray, np.ndarray]:
        """``(values, P[X <= value])`` at each distinct value (exact mode) or bucket
        representative (bucket mode), for plotting a CDF without the per-round times."""
        if self._values is not None:
            return self._values.copy(), np.cumsum(self._counts) / self.count
        occupied = np.flatnonzero(self._buckets)
        reps = self._representative(occupied + self._lo)
        reps = np.clip(reps, self.min, self.max)
        counts = self._buckets[occupied]
        if self._zeros:
            reps, counts = np.concatenate([[0.0], reps]), np.concatenate([[self._zeros], counts])
        return reps, np.cumsum(counts) / self.count


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's ``_lerp`` for scalars (``a + (b - a) t``, or ``b - (b - a)(1 - t)`` for ``t >= 0.5``),
    so that exact-mode quantiles equal ``np.percentile``'s bit for bit."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


# ---------------------------------------------------------------------------------- round times


class _ExactSum:
    """Shewchuk's exactly rounded running sum (the algorithm behind :func:`math.fsum`): a few
    non-overlapping partials whatever the number of terms."""

    __slots__ = ("partials",)

    def __init__(self):
        self.partials: list[float] = []

    def add(self, x: float) -> None:
        i = 0
        for y in self.partials:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo:
                self.partials[i] = lo
                i += 1
            x = hi
        self.partials[i:] = [x]

    def value(self) -> float:
        return math.fsum(self.partials)


class TimeStats:
    """Running statistics of the round times of one run of ``rounds`` rounds, fed in order,
    block by block (see the module docstring for what is exact)."""

    def __init__(self, rounds: int, batches: int = BATCHES):
        self.rounds = int(rounds)
        self.count = 0
        self._total = _ExactSum()
        self._mean = 0.0  # Chan's running mean and sum of squared deviations
        self._m2 = 0.0
        self.sketch = QuantileSketch()
        # batch means: round t belongs to batch t * B // rounds (B contiguous, nearly equal batches)
        self._B = max(1, min(int(batches), self.rounds))
        self._batch_start = -(-np.arange(self._B + 1) * self.rounds // self._B)  # ceil(k rounds / B)
        self._batch_sums = np.zeros(self._B)

    def add(self, times: np.ndarray) -> None:
        """The times of the next ``len(times)`` rounds."""
        x = np.asarray(times, dtype=np.float64)
        m = x.size
        if m == 0:
            return
        a = self.count
        if a + m > self.rounds:
            raise ValueError(f"TimeStats was made for {self.rounds} rounds; got {a + m}")
        sum_b = float(x.sum())
        self._total.add(sum_b)
        mean_b = sum_b / m
        d = x - mean_b
        m2_b = float(d @ d)
        total = a + m
        delta = mean_b - self._mean
        self._mean += delta * m / total
        self._m2 += m2_b + delta * delta * a * m / total
        first = int(np.searchsorted(self._batch_start, a, side="right")) - 1
        last = int(np.searchsorted(self._batch_start, a + m - 1, side="right")) - 1
        cuts = np.maximum(self._batch_start[first : last + 1], a) - a
        self._batch_sums[first : last + 1] += np.add.reduceat(x, cuts)
        self.sketch.add(x)
        self.count = total

    @property
    def total(self) -> float:
        return self._total.value()

    @property
    def min(self) -> float:
        return self.sketch.min if self.count else math.nan

    @property
    def max(self) -> float:
        return self.sketch.max if self.count else math.nan

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    @property
    def std(self) -> float:
        """Sample standard deviation (``ddof=1``) of the round times."""
        return math.sqrt(self._m2 / (self.count - 1)) if self.count > 1 else math.nan

    @property
    def mean_ci95(self) -> float:
        """Half-width of the 95 % confidence interval of the mean round time, by batch means
        (Student t with B - 1 degrees of freedom over the B batch means); NaN under 2 rounds.
        Only complete runs are batched as designed (every batch full)."""
        if self.count < 2 or self._B < 2 or self.count != self.rounds:
            return math.nan
        from scipy.special import stdtrit

        sizes = np.diff(self._batch_start)
        means = self._batch_sums / sizes
        return float(stdtrit(self._B - 1, 0.975) * means.std(ddof=1) / math.sqrt(self._B))

    def nbytes(self) -> int:
        return self.sketch.nbytes() + self._batch_sums.nbytes + self._batch_start.nbytes


class RunStats:
    """Everything :meth:`SimulationResult.summary` reports, accumulated block by block:
    round times (:class:`TimeStats`), the number of straggler-rounds, of wait-outs and of jobs
    decoded. Its size depends on the number of workers and batches, not on the rounds."""

    def __init__(self, rounds: int, n: int):
        self.rounds = int(rounds)
        self.n = int(n)
        self.times = TimeStats(rounds)
        self.straggler_count = 0  # sum over rounds of the stragglers of the round
        self.waitouts = 0
        self.jobs_done = 0

    def add_block(self, round_times: np.ndarray, stragglers: np.ndarray, waitout: np.ndarray | None) -> None:
        """The next rounds: their times, ``(rounds, n)`` straggler flags and wait-out flags
        (``None``: no wait-outs, the ``"decodable"`` rule)."""
        self.times.add(round_times)
        self.straggler_count += int(np.count_nonzero(stragglers))
        if waitout is not None:
            self.waitouts += int(np.count_nonzero(waitout))

    @property
    def stragglers_per_round(self) -> float:
        return self.straggler_count / self.rounds

    def nbytes(self) -> int:
        return self.times.nbytes()
