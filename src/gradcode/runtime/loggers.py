"""A run's scalars as files: :func:`scalars` (what a practitioner watches, from a round record) and
:class:`ScalarLog`, a training callback writing them as CSV or JSON lines, beside the run dir's
``rounds.jsonl`` (every round's arrivals, messages and faults) and
:class:`~gradcode.torch.TensorBoard`, which writes the same scalars as event files.

The scalars of a round, by name: ``train/loss`` (the batch's mean loss), ``round/time_s`` (the
round's duration: plan to close), ``round/elapsed_s`` and ``round/stragglers``; on evaluation
rounds each held-out metric as ``eval/<name>`` (``eval/accuracy``, ``eval/loss``...). With several
models (``models=M``) the loss and the metrics are under ``model<m>/``. Use a log as the callback
of :func:`gradcode.train` or :func:`gradcode.torch.fit` (or call it from your own, or on
:attr:`gradcode.torch.Workers.history`'s records)::

    with ScalarLog("runs/crc.csv") as log:
        fit(net, data, spec, callback=log)

A ``.csv`` file is in long form, one row a scalar (``round,name,value``: the columns do not depend
on which metrics a run has; ``pandas.read_csv(...).pivot(index="round", columns="name")`` gives the
wide table); any other file gets JSON lines, one object a round (``{"round": t, "train/loss": ...}``).
Each round is flushed as it is written, so a run that is killed leaves every round it completed.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

__all__ = ["ScalarLog", "scalars"]


def scalars(record: dict) -> dict[str, float]:
    """The scalars of one round record (module docstring), by name; non-finite values stay
    (a diverging loss is worth seeing)."""
    losses = record["loss"] if isinstance(record["loss"], list) else [record["loss"]]
    several = len(losses) > 1
    out = {f"model{m}/train/loss" if several else "train/loss": float(loss) for m, loss in enumerate(losses)}
    out["round/time_s"] = float(record["time"])
    out["round/elapsed_s"] = float(record["elapsed"])
    out["round/stragglers"] = float(int(record["stragglers"]))
    for entry in record.get("metrics", ()):
        prefix = f"model{entry.get('model', 0)}/eval" if several else "eval"
        for name, value in entry.items():
            if name not in ("round", "elapsed", "model", "train_loss") and isinstance(value, (int, float)) \
                    and not isinstance(value, bool):
                out[f"{prefix}/{name}"] = float(value)
    return out


class ScalarLog:
    """A training callback writing each round's :func:`scalars` to ``path`` (module docstring:
    ``.csv`` in long form, else JSON lines). The file is made anew (its folder too); an existing
    file is refused unless ``overwrite``."""

    def __init__(self, path: str | os.PathLike, *, overwrite: bool = False):
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise FileExistsError(f"{self.path} exists; pass overwrite=True to replace it")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.csv = self.path.suffix.lower() == ".csv"
        self._fh = open(self.path, "w", newline="" if self.csv else None)
        self._rows = csv.writer(self._fh) if self.csv else None
        if self._rows is not None:
            self._rows.writerow(["round", "name", "value"])

    def __call__(self, record: dict) -> None:
        t = int(record["round"])
        values = scalars(record)
        if self._rows is not None:
            self._rows.writerows([t, name, repr(v) if math.isfinite(v) else str(v)] for name, v in values.items())
        else:
            clean = {k: (v if math.isfinite(v) else str(v)) for k, v in values.items()}  # strict JSON: "nan"
            self._fh.write(json.dumps({"round": t, **clean}) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> ScalarLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
