"""Your own data from a file (problems/files.py, the ``file`` dataset, ``gradcode train --data
FILE``): CSV with a target column and one-hot categorical columns, NPZ, LibSVM; clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from gradcode.cli import app
from gradcode.problems import DataSpec, make_dataset

CSV = "age,income,city,bought\n31,2.5,paris,1\n45,3.1,lyon,0\n22,1.9,paris,1\n38,4.0,nice,0\n51,2.2,lyon,1\n29,3.3,nice,0\n"


def build(**params):
    return make_dataset(DataSpec("file", params, seed=0, test_fraction=0.34))


def test_csv_with_target_and_categorical(tmp_path):
    path = tmp_path / "people.csv"
    path.write_text(CSV)
    ds = build(path=str(path), target="bought", categorical="city", standardize=False)
    assert ds.task == "binary" and ds.n_features == 5 and ds.n_train + ds.n_test == 6
    assert ds.info["columns"] == ["age", "income", "city=lyon", "city=nice", "city=paris"]
    X = np.vstack([ds.X_train, ds.X_test])
    assert set(map(tuple, X[:, 2:])) <= {(1, 0, 0), (0, 1, 0), (0, 0, 1)}  # one-hot rows
    assert sorted(X[:, 0]) == [22, 29, 31, 38, 45, 51]


def test_file_features_are_standardized_with_the_training_split_only(tmp_path):
    """On by default: each training column has mean 0 and deviation 1 (constant columns stay
    0), and the held-out rows are mapped with the training rows' statistics, not their own."""
    path = tmp_path / "people.csv"
    path.write_text(CSV)
    raw = build(path=str(path), target="bought", categorical="city", standardize=False)
    ds = build(path=str(path), target="bought", categorical="city")
    assert ds.info["standardized"] and not raw.info["standardized"]
    mean, std = raw.X_train.mean(axis=0), raw.X_train.std(axis=0)
    scale = np.where(std > 0, std, 1.0)
    np.testing.assert_allclose(ds.X_train, (raw.X_train - mean) / scale, atol=1e-12)
    np.testing.assert_allclose(ds.X_test, (raw.X_test - mean) / scale, atol=1e-12)
    np.testing.assert_allclose(ds.X_train.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_array_equal(ds.y_train, raw.y_train)


def test_npz_and_svmlight(tmp_path):
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", X=rng.standard_normal((20, 3)), y=rng.integers(0, 3, 20))
    ds = build(path=str(tmp_path / "d.npz"))
    assert ds.task == "multiclass" and ds.n_features == 3 and ds.y_train.dtype == np.int64
    X = rng.random((30, 6)) * (rng.random((30, 6)) > 0.6)
    dump_svmlight_file(X, np.arange(30) % 2, str(tmp_path / "d.svm"))
    sv = build(path=str(tmp_path / "d.svm"))
    assert sv.sparse and sv.task == "binary" and sv.n_features == 6


@pytest.mark.parametrize("content,params,message", [
    (CSV, dict(target="price"), "no column 'price' \\(target\\); the columns are age, income, city, bought"),
    (CSV, dict(target="bought"), "column 'city' line 2 holds 'paris', not a number"),
    (CSV, dict(target="bought", categorical="town"), "no column\\(s\\) 'town'"),
    ("", dict(target="bought"), "the file is empty"),
    ("a,b\n", dict(target="b"), "a header but no rows"),
    ("a,b\n1,2\n3\n", dict(target="b"), "line\\(s\\) \\[3\\] do not have 2 fields"),
    ("a,b\n1,nan\n", dict(target="b"), "line 2 holds 'nan' \\(not finite\\)"),
    (CSV, {}, "needs target=COLUMN"),
])
def test_csv_errors_name_the_problem(tmp_path, content, params, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        build(path=str(path), **params)


def test_other_file_errors(tmp_path):
    with pytest.raises(ValueError, match="no file at"):
        build(path=str(tmp_path / "nope.csv"), target="y")
    np.savez(tmp_path / "w.npz", features=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="lacks X, y"):
        build(path=str(tmp_path / "w.npz"))
    (tmp_path / "x.dat").write_text("1 2 3")
    with pytest.raises(ValueError, match="cannot tell the format"):
        build(path=str(tmp_path / "x.dat"))


def test_cli_target_without_a_file_is_refused(tmp_path):
    res = CliRunner().invoke(app, ["train", "--data-params", "target=y", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "does not take 'target'" in " ".join(res.output.split())
    res = CliRunner().invoke(app, ["train", "--data", str(tmp_path / "none.csv"), "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "no such file" in " ".join(res.output.split())


@pytest.mark.ray
def test_cli_trains_on_a_csv_file(ray_session, tmp_path):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((120, 3))
    y = (X @ [1.0, -2.0, 0.5] + 0.3 * rng.standard_normal(120) > 0).astype(int)
    colour = rng.choice(["red", "blue"], 120)
    lines = ["x1,x2,x3,colour,label"] + [f"{a},{b},{c},{k},{t}" for (a, b, c), k, t in zip(X, colour, y)]
    (tmp_path / "mine.csv").write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(app, ["train", "--scheme", "crc", "--workers", "3", "--stragglers", "1",
                                   "--data", str(tmp_path / "mine.csv"), "--data-params", "target=label",
                                   "--data-params", "categorical=colour", "--rounds", "3",
                                   "--run-dir", str(tmp_path / "run"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert np.load(doc["files"]["params"]).shape == (1, 6)  # 3 numeric + 2 one-hot + intercept
    assert doc["losses"][-1][0] < doc["losses"][0][0]


def test_a_data_file_by_path_in_the_api_as_on_the_command_line(tmp_path):
    """TrainSpec(data="people.csv", data_params={"target": ...}) names the same data as the CLI's
    --data people.csv --target ...: the file dataset, standardised, recorded in the config."""
    from gradcode.runtime import InProcessEngine, RunConfig, TrainSpec, train

    path = tmp_path / "people.csv"
    path.write_text(CSV + "".join(CSV.splitlines(keepends=True)[1:]) * 3)
    res = train(TrainSpec("crc", workers=3, stragglers=1, data=str(path),
                          data_params={"target": "bought", "categorical": "city"}),
                run=RunConfig(rounds=2, run_dir=tmp_path / "run", eval_every=0), engine=InProcessEngine())
    assert res.config["data"] == "file" and res.config["data_params"]["path"] == str(path)
    with pytest.raises(ValueError, match="no such file"):
        train(TrainSpec("crc", data=str(tmp_path / "missing.csv")), run=RunConfig(rounds=1, run_dir=tmp_path / "r2"),
              engine=InProcessEngine())


def test_standardized_file_data_without_held_out_rows(tmp_path):
    path = tmp_path / "people.csv"
    path.write_text(CSV)
    ds = make_dataset(DataSpec("file", {"path": str(path), "target": "bought", "categorical": "city"}, seed=0,
                               test_fraction=0.0))
    assert ds.n_test == 0 and ds.n_train == 6
    np.testing.assert_allclose(ds.X_train.mean(axis=0), 0.0, atol=1e-12)
