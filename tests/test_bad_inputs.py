"""Bad input gets a clear error, one rule for every command.

The table: each case through ``gradcode.cli.main`` with ``--json`` prints exactly one JSON
document with ``"error"`` on stdout and exits 2 (bad arguments or input, refused before any work)
with the expected text; nothing ends in a traceback."""

from __future__ import annotations

import json

import numpy as np
import pytest

import gradcode
from gradcode.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    np.savez(d / "ok.npz", X=np.random.default_rng(0).random((50, 3)), y=np.arange(50) % 2)
    raw = (d / "ok.npz").read_bytes()
    (d / "trunc.npz").write_bytes(raw[: len(raw) // 2])
    (d / "big.svm").write_text("1 1:0.5 4000000000:1\n0 2:0.3\n1 1:0.1\n0 3:1\n")
    (d / "latin.csv").write_bytes("a,b,label\n1,2,0\n3,4,1\n5,\xe9,0\n".encode("latin-1"))
    (d / "one.csv").write_text("a,b,label\n1,2,0\n")
    (d / "dup.csv").write_text("a,a,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n")
    (d / "single.csv").write_text("a,b,label\n1,2,0\n3,4,0\n5,6,0\n7,8,0\n")
    (d / "ragged.csv").write_text("1,2,x\n3,4\n")
    (d / "trace.npy").write_bytes(b"")
    (d / "huge.csv").write_text("a,b,label\n1,2,0\n3,1e308,1\n5,6,0\n7,8,1\n")
    (d / "negative.csv").write_text("0.1,0.2,0.3,0.4\n0.1,-0.5,0.3,0.4\n")
    (d / "raises.py").write_text("raise RuntimeError('boom')\n")
    (d / "loop1").symlink_to(d / "loop2")
    (d / "loop2").symlink_to(d / "loop1")
    (d / "a-folder").mkdir()
    np.save(d / "trace.npy", np.ones((20, 4)))
    return d


CASES = [
    # (name, argv with {d} for the files' folder, text the error must hold)
    ("truncated npz", ["train", "--data", "{d}/trunc.npz", "--rounds", "1"], "trunc.npz: not a readable .npz file"),
    ("svmlight index 4e9", ["train", "--data", "{d}/big.svm", "--rounds", "1"], "big.svm: not a valid LibSVM"),
    ("non-UTF-8 csv", ["train", "--data", "{d}/latin.csv", "--data-params", "target=label", "--rounds", "1"],
     "latin.csv: not UTF-8 text"),
    ("one-row csv", ["train", "--data", "{d}/one.csv", "--data-params", "target=label", "--rounds", "1"],
     "one.csv: 1 row"),
    ("duplicate columns", ["train", "--data", "{d}/dup.csv", "--data-params", "target=label", "--rounds", "1"],
     "'a' appear more than once"),
    ("a value of 1e308", ["train", "--data", "{d}/huge.csv", "--data-params", "target=label", "--rounds", "1"],
     "huge.csv: column 'b', data row 2 holds 1e+308, too large"),
    ("single class", ["train", "--data", "{d}/single.csv", "--data-params", "target=label", "--rounds", "1"],
     "at least two classes"),
    ("ragged trace", ["simulate", "-n", "4", "-s", "1", "--trace", "{d}/ragged.csv"], "line 1: 'x' is not a number"),
    ("negative trace time", ["simulate", "-n", "4", "-s", "1", "--trace", "{d}/negative.csv"],
     "negative delay -0.5 in round 1, worker 1"),
    ("a folder as data", ["train", "--data", "{d}/a-folder/", "--rounds", "1"], "a directory, not a file"),
    ("a symlink loop as data", ["train", "--data", "{d}/loop1", "--rounds", "1"], "a symbolic link loop"),
    ("2e9 rounds", ["train", "--rounds", "2000000000"], "needs"),
    ("a model file that raises", ["train", "--model", "{d}/raises.py:Net", "--engine", "inprocess", "--rounds", "1"],
     "raised RuntimeError: boom"),
    ("--scheduler with a bad value", ["train", "--model", "mlp", "--engine", "inprocess", "--rounds", "1",
                                      "--scheduler", "step:gamma=x"], "scheduler step:gamma=x"),
    ("trace and a model", ["simulate", "-s", "1", "--trace", "{d}/trace.npy", "-m", "fixed"],
     "--delay-model fixed would be ignored"),
    ("tune --top -1", ["tune", "--trace", "{d}/trace.npy", "-J", "5", "--top", "-1"], "--top"),
    ("10^13 rounds", ["simulate", "-n", "8", "-s", "2", "--rounds", "10000000000000"], "at most 1e+09"),
    ("crc n = 10^6", ["simulate", "-n", "1000000", "-s", "2", "--rounds", "1"], "TiB of memory"),
    ("unknown option", ["simulate", "--bogus"], "No such option: --bogus"),
    ("compare: bad scheme", ["compare", "--scheme", "nope"], "nope"),
    ("reproduce: unknown name", ["reproduce", "nothing"], "nothing"),
    ("models: unknown model", ["models", "nothing"], "nothing"),
]


@pytest.mark.parametrize("name, argv, text", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_json_error_and_exit_2(files, capsys, name, argv, text):
    with pytest.raises(SystemExit) as info:
        main([a.format(d=files) for a in argv] + ["--json"])
    assert info.value.code == 2, name
    out = capsys.readouterr().out
    doc = json.loads(out)  # exactly one document
    assert text in doc["error"], doc
    assert doc["exit_code"] == 2 and doc["error_type"]


def test_the_api_names_the_file_too(files):
    with pytest.raises(ValueError, match="latin.csv: not UTF-8"):
        gradcode.make_dataset(gradcode.DataSpec("file", {"path": str(files / "latin.csv"), "target": "label"}))
    with pytest.raises(ValueError, match="needs 29.1 TiB"):
        gradcode.make_code("crc", n=10**6, s=2)


def test_a_code_object_with_other_workers_is_refused():
    from gradcode.runtime import InProcessEngine, RunConfig, TrainSpec

    with pytest.raises(ValueError, match="workers=4 but the code <CRC n=6 s=1> has n=6"):
        gradcode.train(TrainSpec(scheme=gradcode.make_code("crc", n=6, s=1), workers=4), run=RunConfig(rounds=1),
                       engine=InProcessEngine())


def test_a_run_that_fails_after_starting_exits_1_with_its_records(tmp_path, capsys):
    """A runtime failure is exit 1, and the JSON holds the completed rounds: a torch model whose
    step size makes it diverge (in process, no Ray) stops when no worker's gradient is finite."""
    pytest.importorskip("torch")
    with pytest.raises(SystemExit) as info:
        main(["train", "--model", "mlp", "--engine", "inprocess", "--scheme", "uncoded", "--rounds", "6",
              "--optimizer-params", "lr=1e30", "--run-dir", str(tmp_path / "r"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert info.value.code == 1 and doc["exit_code"] == 1
    assert doc["error_type"] in ("RoundTimeoutError", "TrainingStopped") and doc["rounds"] >= 1


def test_sigint_during_train_prints_what_was_done_and_exits_130(tmp_path, capsys):
    """Ctrl-C during a run: exit 130 and, with --json, the records of the rounds completed."""
    pytest.importorskip("torch")
    (tmp_path / "net.py").write_text(
        "import torch\n"
        "calls = [0]\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(64, 10)\n"
        "    def forward(self, x):\n"
        "        calls[0] += 1\n"
        "        if calls[0] > 12:  # the probe, then 4 workers x 2 rounds and a bit: a Ctrl-C in round 2\n"
        "            raise KeyboardInterrupt\n"
        "        return self.fc(x.reshape(x.shape[0], -1))\n")
    with pytest.raises(SystemExit) as info:
        # a declared compute cost: no calibration's gradients before round 0, so the count above holds
        main(["train", "--model", f"{tmp_path / 'net.py'}:Net", "--engine", "inprocess", "--compute", "1e-4",
              "--scheme", "uncoded", "--rounds", "5", "--run-dir", str(tmp_path / "r"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert info.value.code == 130 and doc["exit_code"] == 130 and doc["error_type"] == "KeyboardInterrupt"
    assert doc["rounds"] >= 1


def test_auto_needs_a_torch_model(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--scheme", "auto", "--rounds", "3", "--json"])
    assert info.value.code == 2 and "--model" in json.loads(capsys.readouterr().out)["error"]


@pytest.mark.parametrize("code, params", [("uncoded", {}), ("crc", {"s": 0}), ("ignore", {"s": 1})])
def test_verify_without_redundancy_is_refused(code, params):
    """--verify with a code that has no spare results used to run unverified without a word."""
    from gradcode.runtime import build_scheme

    with pytest.raises(ValueError, match="verify needs spare results"):
        build_scheme(code, workers=4, scheme_params=params, verify=True)
    with pytest.raises(ValueError, match="verify needs spare results"):
        build_scheme(gradcode.make_code(code, n=4, **params), verify=True)
