"""The scalar logs: what a round's record gives (``scalars``), written as CSV (long form) or JSON
lines by ``ScalarLog`` as a training callback, each round flushed as it is written."""

from __future__ import annotations

import csv
import json
import math

import pytest

from gradcode.problems import DataSpec
from gradcode.runtime import RunConfig, ScalarLog, TrainSpec, train
from gradcode.runtime.loggers import scalars


def _train(callback, tmp_path, **kw):
    spec = TrainSpec("crc", workers=4, stragglers=1, data=DataSpec("tandon-synthetic", {"n_samples": 200}), **kw)
    return train(spec, run=RunConfig(rounds=4, eval_every=2, run_dir=tmp_path / "run"), engine="inprocess", callback=callback)


def test_a_round_records_scalars_by_name():
    record = {"round": 3, "loss": [0.5, float("nan")], "time": 0.25, "elapsed": 1.0, "stragglers": 1,
              "metrics": [{"round": 3, "model": 1, "accuracy": 0.75, "elapsed": 1.0, "train_loss": 0.4}]}
    got = scalars(record)
    assert got["model0/train/loss"] == 0.5 and math.isnan(got["model1/train/loss"])
    assert got["round/time_s"] == 0.25 and got["round/elapsed_s"] == 1.0 and got["round/stragglers"] == 1.0
    assert got["model1/eval/accuracy"] == 0.75 and not any("train_loss" in k or k.endswith("/elapsed") for k in got)
    one = scalars({"round": 0, "loss": 0.7, "time": 0.1, "elapsed": 0.1, "stragglers": 0})
    assert set(one) == {"train/loss", "round/time_s", "round/elapsed_s", "round/stragglers"}


def test_a_csv_log_holds_every_round_in_long_form(tmp_path):
    with ScalarLog(tmp_path / "log" / "crc.csv") as log:
        result = _train(log, tmp_path)
    rows = list(csv.DictReader(open(tmp_path / "log" / "crc.csv", newline="")))
    assert {r["name"] for r in rows} >= {"train/loss", "round/time_s", "round/stragglers", "eval/accuracy"}
    losses = [float(r["value"]) for r in rows if r["name"] == "train/loss"]
    assert losses == pytest.approx(list(result.losses[:, 0]))
    assert sorted({int(r["round"]) for r in rows if r["name"].startswith("eval/")}) == [1, 3]
    with pytest.raises(FileExistsError, match="overwrite=True"):
        ScalarLog(tmp_path / "log" / "crc.csv")


def test_a_json_lines_log_has_one_object_a_round_and_strict_json(tmp_path):
    seen = []

    def stop_after_two(record):  # each line is on disk as soon as its round is
        log(record)
        seen.append(len((tmp_path / "crc.jsonl").read_text().splitlines()))

    with ScalarLog(tmp_path / "crc.jsonl") as log:
        result = _train(stop_after_two, tmp_path, models=2)
    lines = [json.loads(line) for line in (tmp_path / "crc.jsonl").read_text().splitlines()]
    assert seen == [1, 2, 3, 4] and [line["round"] for line in lines] == [0, 1, 2, 3]
    assert [line["model1/train/loss"] for line in lines] == pytest.approx(list(result.losses[:, 1]))


def test_an_mlflow_log_holds_every_rounds_scalars_at_its_step(tmp_path, monkeypatch):
    """MLflowLog, on a local tracking store: one MLflow run per training run, each scalar's history
    at steps = the rounds, the configuration as parameters, FINISHED when the block ends and
    FAILED when it raises; no global MLflow state (no active run) is touched."""
    mlflow = pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from gradcode.runtime import MLflowLog

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # a folder, as a user's local store
    uri = (tmp_path / "mlruns").as_uri()
    with MLflowLog(uri, experiment="tests", run_name="crc", params={"scheme": "crc", "workers": 4}) as log:
        result = _train(log, tmp_path)
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(log.run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"scheme": "crc", "workers": "4"}
    history = client.get_metric_history(log.run_id, "train/loss")
    assert [m.step for m in history] == [0, 1, 2, 3]
    assert [m.value for m in history] == pytest.approx(list(result.losses[:, 0]))
    assert sorted(m.step for m in client.get_metric_history(log.run_id, "eval/accuracy")) == [1, 3]
    assert mlflow.active_run() is None
    with pytest.raises(RuntimeError):
        with MLflowLog(uri, experiment="tests") as failed:
            raise RuntimeError("the loop broke")
    assert client.get_run(failed.run_id).info.status == "FAILED"
