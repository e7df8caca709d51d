"""``gradcode train`` end to end on the shared Ray session: --json, --plot, errors."""

import json

import numpy as np
from typer.testing import CliRunner

from gradcode.cli import app


def test_train_json_and_plots(ray_session, tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, [
        "train", "--scheme", "crc", "--workers", "4", "--stragglers", "1", "--delay", "0.1",
        "--data-params", "n_samples=400", "--data-params", "n_features=5",
        "--rounds", "4", "--seed", "0", "--run-dir", str(tmp_path / "run"), "--plot", str(tmp_path / "plots"),
        "--json",
    ])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert len(doc["round_times"]) == 4 and len(doc["arrivals"]) == 4 and len(doc["arrivals"][0]) == 4
    assert isinstance(doc["final_loss"], float) and len(doc["final_params_checksum"]) == 16
    assert np.load(doc["files"]["params"]).shape == (1, 6) and "final_params" not in doc  # 5 features + intercept
    assert (tmp_path / "plots" / "loss_auc_vs_time.png").stat().st_size > 0
    # one fixed --delay: every round's injected delay is the same, so time against delay is not drawn
    assert not (tmp_path / "plots" / "round_time_vs_delay.png").exists()


def test_train_bad_arguments_exit_2_with_a_message(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["train", "--scheme", "nope", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "unknown code" in res.output
    res = runner.invoke(app, ["train", "--fail", "x", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "W@R" in res.output
    res = runner.invoke(app, ["train", "--resume"])
    assert res.exit_code == 2 and "resume=True needs run_dir" in res.output


def test_sgd_with_lr_is_refused_naming_its_parameters(tmp_path):
    res = CliRunner().invoke(app, ["train", "--optimizer", "sgd", "--optimizer-params", "lr=0.1",
                                   "--data-params", "n_samples=200",
                                   "--data-params", "n_features=4", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "'sgd' does not take 'lr'; its parameters are c1, c2" in res.output


def test_a_second_run_in_the_same_run_dir_needs_resume_or_overwrite(ray_session, tmp_path):
    """Restarting in the same --run-dir without --resume used to overwrite the checkpoint: now it is
    refused with what to do, and --overwrite replaces the run."""
    args = ["train", "--scheme", "crc", "--workers", "4", "--stragglers", "1",
            "--data-params", "n_samples=200", "--data-params", "n_features=4", "--rounds", "2",
            "--checkpoint-every", "2", "--run-dir", str(tmp_path / "run")]
    runner = CliRunner()
    assert runner.invoke(app, args).exit_code == 0
    before = (tmp_path / "run" / "checkpoint.json").read_bytes()
    again = runner.invoke(app, args)
    said = " ".join(again.output.split())  # rich wraps long lines
    assert again.exit_code != 0 and "already holds a run" in said and "--overwrite" in said
    assert (tmp_path / "run" / "checkpoint.json").read_bytes() == before
    assert runner.invoke(app, args + ["--overwrite"]).exit_code == 0
    longer = runner.invoke(app, args[:-4] + ["--rounds", "4", "--run-dir", str(tmp_path / "run"), "--resume", "--json"])
    assert longer.exit_code == 0, longer.output
    assert len(json.loads(longer.stdout)["round_times"]) == 4


def test_plot_into_a_file_is_refused_before_training(tmp_path):
    """--plot naming an existing file used to train, then die with FileExistsError, the result
    never printed: it is refused up front now."""
    (tmp_path / "afile.txt").write_text("x")
    res = CliRunner().invoke(app, ["train", "--workers", "3", "--rounds", "2", "--plot", str(tmp_path / "afile.txt"),
                                   "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "is a file" in " ".join(res.output.split())
    assert not (tmp_path / "r").exists()  # nothing started


def test_delay_options_that_would_be_ignored_are_refused(tmp_path):
    """--delay without --stragglers injected nothing; --delay-param without --delay-model and
    --delay with --delay-model were dropped: each is now refused with what to do."""
    base = ["train", "--workers", "3", "--rounds", "1", "--run-dir", str(tmp_path / "r")]
    cases = [
        (["--delay", "0.5"], "give stragglers > 0"),
        (["--delay-params", "p=0.1"], "name a delay model"),
        (["--delay-model", "bernoulli", "--delay", "0.5"], "not used with delay_model"),
    ]
    for extra, says in cases:
        res = CliRunner().invoke(app, base + extra)
        assert res.exit_code == 2 and says in " ".join(res.output.split()), (extra, res.output)


def test_a_delay_model_without_stragglers_injects_nothing(ray_session, tmp_path):
    """--delay-model bernoulli --delay-param p=0.0 used to sleep the model's base time x load on
    every worker every round (0.667 s): only what the model adds beyond the round's fastest worker
    is injected now; --inject full keeps the model's whole time."""
    base = ["train", "--workers", "3", "--rounds", "2", "--delay-model", "bernoulli", "--delay-params", "p=0.0",
            "--delay-params", "base=0.05", "--data-params", "n_samples=150", "--data-params", "n_features=3", "--json"]
    res = CliRunner().invoke(app, base + ["--run-dir", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["injected"] == [[0.0] * 3] * 2
    full = CliRunner().invoke(app, base + ["--run-dir", str(tmp_path / "b"), "--inject", "full"])
    assert full.exit_code == 0, full.output
    injected = json.loads(full.stdout)["injected"]
    assert all(abs(v - 0.05 / 3) < 1e-12 for row in injected for v in row)  # base x load (1/3 of the data)


def test_train_several_schemes_side_by_side(ray_session, tmp_path):
    """--scheme crc,uncoded,ignore: one run each on the same data, seed and injected delays, one
    JSON document holding every run, a subfolder of --run-dir each, and one plot of them all."""
    args = ["train", "--scheme", "crc,uncoded,ignore", "--workers", "3", "--stragglers", "1", "--delay", "0.02",
            "--data-params", "n_samples=150", "--data-params", "n_features=3", "--rounds", "3"]
    res = CliRunner().invoke(app, args + ["--run-dir", str(tmp_path / "runs"), "--plot", str(tmp_path / "p.png"),
                                          "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schemes"] == ["crc", "uncoded", "ignore"] and [r["scheme"] for r in doc["runs"]] == doc["schemes"]
    crc, uncoded, ignore = doc["runs"]
    assert [crc["exact"], uncoded["exact"], ignore["exact"]] == [True, True, False]
    assert crc["injected"] == uncoded["injected"] == ignore["injected"]  # the same delays
    assert sum(map(sum, crc["injected"])) > 0
    np.testing.assert_allclose(np.load(crc["files"]["params"]), np.load(uncoded["files"]["params"]),
                               rtol=1e-9)  # exact: same iterates
    assert all(len(r["round_times"]) == 3 for r in doc["runs"])
    assert [r["gradient"] for r in doc["rows"]] == ["exact", "exact", "estimate"]
    assert doc["rows"][1]["speedup"] == 1.0
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["crc", "ignore", "uncoded"]
    assert all((tmp_path / "runs" / s / "result.json").exists() for s in doc["schemes"])
    assert doc["plots"] == [str(tmp_path / "p.png")]  # the delay is fixed: no time-against-delay figure
    assert all(open(p, "rb").read(4) == b"\x89PNG" for p in doc["plots"])
    table = CliRunner().invoke(app, args[:2] + ["crc,ignore"] + args[3:-2] + ["--rounds", "2",
                                                                              "--run-dir", str(tmp_path / "t")])
    assert table.exit_code == 0, table.output
    said = " ".join(table.stdout.split())
    assert "2 schemes, same data, seed and injected delays" in said and "│ estimate │" in said


def test_a_planned_failure_is_reported_as_planned(ray_session, tmp_path):
    """With --fail, Ray's notice for the planned exit (which reads as a crash) is left out and the
    run says itself which deaths were planned."""
    res = CliRunner().invoke(app, ["train", "--workers", "3", "--rounds", "2", "--fail", "1@1", "--data-params",
                                   "n_samples=150", "--data-params", "n_features=3", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert "worker 1 died in round 1 (planned by --fail)" in " ".join(res.stderr.split())


def test_train_closes_rounds_by_the_mu_rule_on_ray(ray_session, tmp_path):
    """--close MU on Ray: workers 0-2 sleep 0.3 s a round, worker 3 1.3 s (--inject full). CRC
    (s = 1) decodes at the deadline (1 + mu) kappa ~ 0.6 s without it: no wait-out, worker 3 a
    straggler. Uncoded cannot, so each round is waited out (--waitout all) and lasts past worker
    3's 1.3 s. (The fast workers' 0.3 s keeps kappa well above a loaded machine's jitter: with
    kappa ~ 5 ms a late fast worker made the round a wait-out.)"""
    delays = np.full((2, 4), 0.3)
    delays[:, 3] = 1.3
    np.save(tmp_path / "trace.npy", delays)
    base = ["train", "--workers", "4", "--rounds", "2", "--delay-model", "trace", "--delay-params",
            f"path={tmp_path / 'trace.npy'}", "--inject", "full", "--close", "1", "--json"]
    docs = {}
    for scheme, extra in (("crc", ["--stragglers", "1"]), ("uncoded", ["--waitout", "all"])):
        res = CliRunner().invoke(app, base + ["--scheme", scheme, *extra, "--run-dir", str(tmp_path / scheme)])
        assert res.exit_code == 0, res.output
        docs[scheme] = json.loads(res.stdout)
    assert docs["crc"]["waitouts"] == [False, False] and all(a[3] < 0 for a in docs["crc"]["arrivals"])
    assert docs["crc"]["config"]["close"] == 1.0
    assert docs["uncoded"]["waitouts"] == [True, True] and docs["uncoded"]["waitout_rounds"] == 2
    assert min(docs["uncoded"]["round_times"]) >= 1.0 > max(docs["crc"]["round_times"])
    assert abs(docs["crc"]["final_loss"] - docs["uncoded"]["final_loss"]) < 1e-12  # both exact
