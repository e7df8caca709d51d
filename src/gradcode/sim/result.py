"""The outcome of one simulated run: running summaries always, per-round tables when kept."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from gradcode.errors import GradcodeError
from gradcode.sim.summary import QuantileSketch, RunStats


class NoRecordsError(GradcodeError):
    """A per-round table (``round_times``, ``arrivals``, ...) was asked of a run that kept only
    summaries; run it again with ``simulate(..., records=True)``."""


@dataclass(frozen=True, eq=False)
class RoundRecords:
    """The per-round tables of a run (kept with ``simulate(..., records=True)``); see
    :class:`SimulationResult` for what each holds."""

    round_times: np.ndarray
    stragglers: np.ndarray
    arrivals: np.ndarray
    waitout_rounds: np.ndarray
    job_done_round: np.ndarray
    finish_times: np.ndarray

    def nbytes(self) -> int:
        return sum(getattr(self, f.name).nbytes for f in fields(self))


def records_nbytes(rounds: int, n: int) -> int:
    """Bytes the per-round tables of a ``rounds`` x ``n`` run take: per round, one float64 time,
    job-done index and ``2 n`` float64 arrivals and finish times, ``n + 1`` booleans."""
    return rounds * (17 * n + 17)


@dataclass(frozen=True, eq=False)
class SimulationResult:
    """One run of :func:`gradcode.simulate`.

    Always kept (memory independent of the number of rounds): ``rounds``, ``n``, ``total_time``,
    ``waitouts``, :meth:`summary`, :meth:`quantile`, and ``stats`` (the running
    :class:`~gradcode.sim.summary.RunStats` behind them).

    Kept only when the run kept its per-round records (``simulate(..., records=True)``, or by
    default while they fit in :data:`gradcode.sim.simulator.AUTO_RECORDS_BYTES`; ``has_records``
    says which); without them these raise :class:`NoRecordsError`:

    * ``round_times[t]``: seconds round ``t`` lasted (rounds run back to back: round ``t`` starts
      when round ``t - 1`` ends); ``total_time`` is their sum.
    * ``stragglers[t, w]``: worker ``w`` was a straggler of round ``t``, judged from the messages
      it had delivered when the round closed by the code's rule (``LinearCode.straggling``): by
      default it had not delivered its whole task result; for AGC it held fewer than the ``r_s``
      messages the active workers need (its pending work was cancelled either way).
    * ``arrivals[t, w]``: seconds after the round started at which the last message ``w`` delivered
      by the close arrived, ``-1`` for a straggler (and for a worker given no task); the same table
      the Ray runtime records, usable as a trace (``save_arrivals``).
    * ``waitout_rounds[t]``: under the mu-rule, round ``t`` could not decode at its deadline and
      the master waited until it could; ``waitouts`` counts them.
    * ``job_done_round[j]``: the round in which job ``j`` was decoded, ``-1`` if not yet.
    * ``finish_times[t, w]``: when ``w``'s whole task result would have arrived had the round not
      been closed (stragglers included; 0 for a worker given no task): a complete trace of the
      run at the scheme's loads (``save_trace``), where ``arrivals`` marks stragglers with -1.
    * ``round_starts``, :meth:`to_records`, :meth:`to_csv`, :meth:`save_trace`,
      :meth:`save_arrivals` are built from them.
    """

    scheme: str
    model: str
    close: str | float
    seed: object
    method: str
    stats: RunStats
    round_records: RoundRecords | None = None
    extra: dict = field(default_factory=dict)
    #: how the messages reached the master, with the link parameters of a collective run
    #: (``simulate``'s ``transport``)
    transport: str = "star"

    # ------------------------------------------------------------------ always available
    @property
    def rounds(self) -> int:
        return self.stats.rounds

    @property
    def n(self) -> int:
        return self.stats.n

    @property
    def has_records(self) -> bool:
        """True when the per-round tables were kept (``records=True``, or small enough)."""
        return self.round_records is not None

    @property
    def total_time(self) -> float:
        return self.stats.times.total

    @property
    def waitouts(self) -> int:
        """Number of rounds that needed a wait-out (mu-rule only; 0 under ``close="decodable"``)."""
        return self.stats.waitouts

    @property
    def quantile_rel_error(self) -> float:
        """Bound on the relative error of :meth:`quantile` (and of the median and p95 of
        :meth:`summary`): 0.0 when they are exact (records kept, or few distinct round times)."""
        return 0.0 if self.has_records else self.stats.times.sketch.error

    def quantile(self, q: float) -> float:
        """The ``q``-quantile of the round times (``np.quantile``'s default method), from the
        records when kept, else from the running sketch (see :attr:`quantile_rel_error`)."""
        if self.has_records:
            return float(np.quantile(self.round_records.round_times, q))
        return self.stats.times.sketch.quantile(q)

    def summary(self) -> dict:
        """Scalar statistics of the run (seconds), the same with or without records except for
        the median and p95 of a run with many distinct round times and no records, which come
        from the sketch (``quantile_rel_error`` says how close: 0.0 when exact).

        ``std`` is the sample standard deviation of the round times and ``mean_ci95`` the
        half-width of a 95 % confidence interval of the mean round time by batch means (valid
        under the correlated rounds of Markov delay models); both ``None`` for a single round."""
        t = self.stats.times
        if self.has_records:
            rt = self.round_records.round_times
            median, p95 = float(np.median(rt)), float(np.percentile(rt, 95))
        else:
            median, p95 = t.sketch.median(), t.sketch.percentile(95)
        return {
            "scheme": self.scheme,
            "model": self.model,
            "close": self.close,
            "transport": self.transport,
            "rounds": self.rounds,
            "workers": self.n,
            "total_time": self.total_time,
            "mean": t.mean,
            "median": median,
            "p95": p95,
            "max": t.max,
            "min": t.min,
            "std": _defined(t.std),
            "mean_ci95": _defined(t.mean_ci95),
            "stragglers_per_round": self.stats.stragglers_per_round,
            "waitouts": self.waitouts,
            "jobs_done": self.stats.jobs_done,
            "quantile_rel_error": self.quantile_rel_error,
        }

    def nbytes(self) -> int:
        """Bytes of numpy data the result holds: the running summaries, plus the records if kept."""
        return self.stats.nbytes() + (self.round_records.nbytes() if self.has_records else 0)

    # ------------------------------------------------------------------ per-round records
    def _records(self, what: str) -> RoundRecords:
        if self.round_records is None:
            raise NoRecordsError(
                f"{what} needs the per-round records, which this run of {self.rounds} rounds did not keep"
                f" (they would take {records_nbytes(self.rounds, self.n) / 2**20:.0f} MiB; by default"
                " only runs whose records fit in AUTO_RECORDS_BYTES keep them): run"
                " gradcode.simulate(..., records=True) to keep them, or use summary() / quantile()"
            )
        return self.round_records

    @property
    def round_times(self) -> np.ndarray:
        return self._records("round_times").round_times

    @property
    def stragglers(self) -> np.ndarray:
        return self._records("stragglers").stragglers

    @property
    def arrivals(self) -> np.ndarray:
        return self._records("arrivals").arrivals

    @property
    def waitout_rounds(self) -> np.ndarray:
        return self._records("waitout_rounds").waitout_rounds

    @property
    def job_done_round(self) -> np.ndarray:
        return self._records("job_done_round").job_done_round

    @property
    def finish_times(self) -> np.ndarray:
        return self._records("finish_times").finish_times

    @property
    def round_starts(self) -> np.ndarray:
        rt = self._records("round_starts").round_times
        return np.concatenate([[0.0], np.cumsum(rt)[:-1]])

    def to_records(self) -> list[dict]:
        """One tidy record per round: round, start, time, stragglers (count), waitout, jobs
        (the jobs decoded in that round). Needs the per-round records."""
        rec = self._records("to_records()")
        starts = self.round_starts
        done = rec.job_done_round
        jobs_by_round: dict[int, list[int]] = {}
        for j in np.flatnonzero(done >= 0):
            jobs_by_round.setdefault(int(done[j]), []).append(int(j))
        nstrag = rec.stragglers.sum(axis=1)
        return [
            {
                "scheme": self.scheme,
                "round": t,
                "start": float(starts[t]),
                "time": float(rec.round_times[t]),
                "stragglers": int(nstrag[t]),
                "waitout": bool(rec.waitout_rounds[t]),
                "jobs": jobs_by_round.get(t, []),
            }
            for t in range(self.rounds)
        ]

    def to_dict(self) -> dict:
        """The summary, seed and method; with records, also the per-round records and the
        straggler and arrival tables (``records_kept`` says which)."""
        doc = {
            "summary": self.summary(),
            "seed": self.seed if isinstance(self.seed, (int, type(None))) else repr(self.seed),
            "method": self.method,
            "records_kept": self.has_records,
        }
        if self.has_records:
            doc.update(
                records=self.to_records(),
                stragglers=self.stragglers.astype(int).tolist(),
                arrivals=self.arrivals.tolist(),
            )
        return doc

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict())
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    def to_csv(self, path: str | Path | None = None) -> str:
        """The per-round records as CSV (``jobs`` joined by ``;``). Needs the per-round records."""
        buf = io.StringIO()
        records = self.to_records()
        writer = csv.DictWriter(buf, fieldnames=list(records[0]) if records else ["round"])
        writer.writeheader()
        for r in records:
            writer.writerow({**r, "jobs": ";".join(map(str, r["jobs"]))})
        text = buf.getvalue()
        if path is not None:
            Path(path).write_text(text)
        return text

    def save_trace(self, path: str | Path) -> None:
        """Write ``finish_times`` as a ``(rounds, workers)`` trace (``.npy`` or ``.csv``) that
        :func:`gradcode.load_trace` reads back. Needs the per-round records."""
        _save_table(path, self._records("save_trace()").finish_times)

    def save_arrivals(self, path: str | Path) -> None:
        """Write ``arrivals`` (``-1`` for stragglers) as a ``(rounds, workers)`` table (``.npy`` or
        ``.csv``), the format of the Ray runtime's ``arrivals.npy``. Needs the per-round records."""
        _save_table(path, self._records("save_arrivals()").arrivals)


def _defined(x: float) -> float | None:
    """NaN (a statistic undefined for one round) as None, so that summaries stay valid JSON."""
    return None if math.isnan(x) else x


def pooled_stats(results) -> dict:
    """Mean, median and p95 of the round times of several runs pooled together (the repeats of
    ``gradcode simulate`` / ``compare``), and ``quantile_rel_error``: exact (numpy on the
    concatenated round times) when every run kept its records, else from the merged sketches
    (exact too while the pooled runs have few distinct round times)."""
    results = list(results)
    if not results:
        raise ValueError("pooled_stats needs at least one result")
    total = math.fsum(r.total_time for r in results)
    count = sum(r.rounds for r in results)
    if all(r.has_records for r in results):
        times = np.concatenate([r.round_times for r in results])
        return {"mean": total / count, "median": float(np.median(times)),
                "p95": float(np.percentile(times, 95)), "quantile_rel_error": 0.0}
    sketch = QuantileSketch()
    for r in results:
        sketch.merge(r.stats.times.sketch)
    return {"mean": total / count, "median": sketch.median(), "p95": sketch.percentile(95),
            "quantile_rel_error": sketch.error}


def _save_table(path, table: np.ndarray) -> None:
    path = Path(path)
    if path.suffix == ".npy":
        np.save(path, table)
    elif path.suffix == ".csv":
        np.savetxt(path, table, delimiter=",", fmt="%.17g")
    else:
        raise ValueError(f"path must end in .npy or .csv, got {str(path)!r}")
