"""A run's scalars as files: :func:`scalars` (what a practitioner watches, from a round record) and
:class:`ScalarLog`, a training callback writing them as CSV or JSON lines, beside the run dir's
``rounds.jsonl`` (every round's arrivals, messages and faults) and
:class:`~gradcode.torch.TensorBoard`, which writes the same scalars as event files.

The scalars of a round, by name: ``train/loss`` (the batch's mean loss), ``round/time_s`` (the
round's duration: plan to close), ``round/elapsed_s``, ``round/stragglers`` and ``round/overflows``
(float16 loss scaling's backward passes run again at a smaller scale); on evaluation
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

:class:`MLflowLog` logs the same scalars to an MLflow tracking store (the optional extra
``gradcode[mlflow]``, MLflow's client without its server), one MLflow run per gradcode run, with the
run's configuration as its parameters when the records carry it.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from pathlib import Path

__all__ = ["MLflowLog", "ScalarLog", "scalars"]


def scalars(record: dict) -> dict[str, float]:
    """The scalars of one round record (module docstring), by name; non-finite values stay
    (a diverging loss is worth seeing)."""
    losses = record["loss"] if isinstance(record["loss"], list) else [record["loss"]]
    several = len(losses) > 1
    out = {f"model{m}/train/loss" if several else "train/loss": float(loss) for m, loss in enumerate(losses)}
    out["round/time_s"] = float(record["time"])
    out["round/elapsed_s"] = float(record["elapsed"])
    out["round/stragglers"] = float(int(record["stragglers"]))
    if "overflows" in record:
        out["round/overflows"] = float(int(record["overflows"]))
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


class MLflowLog:
    """A training callback logging each round's :func:`scalars` to MLflow, at step = the round:
    ``tracking_uri`` (default: MLflow's own, ``$MLFLOW_TRACKING_URI``; e.g. ``"sqlite:///mlflow.db"``
    or a local folder's ``file://`` URI), ``experiment`` (made if missing), ``run_name``, and
    ``params`` logged once (e.g. the run's ``config``: nested values as JSON text). Uses an
    ``MlflowClient`` of its own, so it changes no global MLflow state (no active run); the MLflow
    run is ended (FINISHED) by :meth:`close`, or FAILED when the block it is the context manager of
    raises. Needs ``pip install gradcode[mlflow]``."""

    def __init__(self, tracking_uri: str | None = None, *, experiment: str = "gradcode", run_name: str | None = None,
                 params: dict | None = None):
        try:
            from mlflow.entities import Param
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise ImportError("MLflowLog needs MLflow's client: pip install 'gradcode[mlflow]'") from None
        self.client = MlflowClient(tracking_uri=tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found is not None else self.client.create_experiment(experiment)
        self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id
        if params:
            self.client.log_batch(self.run_id, params=[
                Param(str(k), v if isinstance(v, str) else json.dumps(v, default=str)) for k, v in params.items()])
        self._closed = False

    def __call__(self, record: dict) -> None:
        from mlflow.entities import Metric

        t, now = int(record["round"]), int(time.time() * 1000)  # MLflow's timestamps: wall-clock ms
        metrics = [Metric(name, value, now, t) for name, value in scalars(record).items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self, status: str = "FINISHED") -> None:
        if not self._closed:
            self.client.set_terminated(self.run_id, status=status)
            self._closed = True

    def __enter__(self) -> MLflowLog:
        return self

    def __exit__(self, kind, *exc) -> None:
        self.close("FAILED" if kind is not None else "FINISHED")
