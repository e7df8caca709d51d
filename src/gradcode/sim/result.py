"""The outcome of one simulated run: per-round times, stragglers, arrivals and tidy records."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass(frozen=True, eq=False)
class SimulationResult:
    """One run of :func:`gradcode.simulate`.

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
    """

    scheme: str
    model: str
    close: str | float
    seed: object
    method: str
    round_times: np.ndarray
    stragglers: np.ndarray
    arrivals: np.ndarray
    waitout_rounds: np.ndarray
    job_done_round: np.ndarray
    finish_times: np.ndarray
    extra: dict = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return int(self.round_times.shape[0])

    @property
    def n(self) -> int:
        return int(self.stragglers.shape[1])

    @property
    def total_time(self) -> float:
        return float(self.round_times.sum())

    @property
    def waitouts(self) -> int:
        """Number of rounds that needed a wait-out (mu-rule only; 0 under ``close="decodable"``)."""
        return int(np.count_nonzero(self.waitout_rounds))

    @property
    def round_starts(self) -> np.ndarray:
        return np.concatenate([[0.0], np.cumsum(self.round_times)[:-1]])

    def summary(self) -> dict:
        """Scalar statistics of the run (seconds)."""
        rt = self.round_times
        return {
            "scheme": self.scheme,
            "model": self.model,
            "close": self.close,
            "rounds": self.rounds,
            "workers": self.n,
            "total_time": self.total_time,
            "mean": float(rt.mean()),
            "median": float(np.median(rt)),
            "p95": float(np.percentile(rt, 95)),
            "max": float(rt.max()),
            "stragglers_per_round": float(self.stragglers.sum(axis=1).mean()),
            "waitouts": self.waitouts,
            "jobs_done": int(np.count_nonzero(self.job_done_round >= 0)),
        }

    def to_records(self) -> list[dict]:
        """One tidy record per round: round, start, time, stragglers (count), waitout, jobs
        (the jobs decoded in that round)."""
        starts = self.round_starts
        done = self.job_done_round
        jobs_by_round: dict[int, list[int]] = {}
        for j in np.flatnonzero(done >= 0):
            jobs_by_round.setdefault(int(done[j]), []).append(int(j))
        nstrag = self.stragglers.sum(axis=1)
        return [
            {
                "scheme": self.scheme,
                "round": t,
                "start": float(starts[t]),
                "time": float(self.round_times[t]),
                "stragglers": int(nstrag[t]),
                "waitout": bool(self.waitout_rounds[t]),
                "jobs": jobs_by_round.get(t, []),
            }
            for t in range(self.rounds)
        ]

    def to_dict(self) -> dict:
        return {
            "summary": self.summary(),
            "seed": self.seed if isinstance(self.seed, (int, type(None))) else repr(self.seed),
            "method": self.method,
            "records": self.to_records(),
            "stragglers": self.stragglers.astype(int).tolist(),
            "arrivals": self.arrivals.tolist(),
        }

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict())
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    def to_csv(self, path: str | Path | None = None) -> str:
        """The per-round records as CSV (``jobs`` joined by ``;``)."""
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
        :func:`gradcode.load_trace` reads back."""
        _save_table(path, self.finish_times)

    def save_arrivals(self, path: str | Path) -> None:
        """Write ``arrivals`` (``-1`` for stragglers) as a ``(rounds, workers)`` table (``.npy`` or
        ``.csv``), the format of the Ray runtime's ``arrivals.npy``."""
        _save_table(path, self.arrivals)


def _save_table(path, table: np.ndarray) -> None:
    path = Path(path)
    if path.suffix == ".npy":
        np.save(path, table)
    elif path.suffix == ".csv":
        np.savetxt(path, table, delimiter=",", fmt="%.17g")
    else:
        raise ValueError(f"path must end in .npy or .csv, got {str(path)!r}")
