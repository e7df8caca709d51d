"""The command line as a newcomer meets it: no traceback for a user's mistake or environment."""

from typer.testing import CliRunner

from gradcode.cli import app


def test_a_run_too_large_for_memory_is_refused_with_its_size():
    """gradcode simulate -n 1000000 used to end in a MemoryError traceback (a dense 7 TiB matrix);
    now CRC refuses it before allocating, saying how much it needs."""
    res = CliRunner().invoke(app, ["simulate", "-n", "1000000", "-s", "2", "--rounds", "1"])
    said = " ".join(res.output.split())
    assert res.exit_code == 2 and "needs" in said and "TiB of memory" in said and "Traceback" not in said


def test_tune_prints_the_best_of_each_family(tmp_path):
    """gradcode tune --trace FILE --load-slope A --mu 1 --waitout all --jobs J --json: SGC App. J's
    search from a recorded profile, one best configuration per family."""
    import json

    import numpy as np

    rng = np.random.default_rng(0)
    np.save(tmp_path / "p.npy", 1.0 + rng.exponential(0.3, size=(60, 8)) + (rng.random((60, 8)) < 0.1) * 3)
    args = ["tune", "--trace", str(tmp_path / "p.npy"), "--load-slope", "2", "--mu", "1", "--jobs", "40",
            "--max-w", "3", "--json"]
    res = CliRunner().invoke(app, args + ["--waitout", "all"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc["best"]) == {"uncoded", "crc", "sr-sgc", "m-sgc"}
    for family, best in doc["best"].items():
        assert best["scheme"] == family and {"params", "load", "time"} <= set(best)
        assert best["time"] == min(c["time"] for c in doc["candidates"] if c["scheme"] == family)
    assert set(doc["best"]["m-sgc"]["params"]) == {"B", "W", "lam"} and set(doc["best"]["crc"]["params"]) == {"s"}
    decodable = json.loads(CliRunner().invoke(app, args + ["--waitout", "decodable"]).stdout)
    assert decodable["waitout"] == "decodable"
    short = CliRunner().invoke(app, ["tune", "--trace", str(tmp_path / "p.npy"), "--load-slope", "2", "--jobs", "100"])
    assert short.exit_code == 2 and "rounds are not recycled" in " ".join(short.output.split())
    # the search's options are TuneSearch's fields: --families narrows it, --every lists every set
    every = json.loads(CliRunner().invoke(app, args + ["--families", "crc", "--families", "sr-sgc", "--every"]).stdout)
    assert set(every["best"]) == {"crc", "sr-sgc"} and every["bounded"] == 0
    assert len(every["candidates"]) > len(json.loads(CliRunner().invoke(app, args).stdout)["candidates"])
    missing = CliRunner().invoke(app, ["tune", "--jobs", "5"])
    assert missing.exit_code == 2 and "missing option --trace" in missing.output


def test_simulate_offers_the_papers_waitout(tmp_path):
    import json

    import numpy as np

    np.save(tmp_path / "t.npy", np.array([[1.0, 1, 1, 1, 5, 9], [1, 1, 1, 1, 1, 9]]))
    base = ["simulate", "--scheme", "crc", "-n", "6", "-s", "1", "--trace", str(tmp_path / "t.npy"), "--close", "1",
            "--json"]
    mean = {w: json.loads(CliRunner().invoke(app, base + ["--waitout", w]).stdout)["summary"]["mean"]
            for w in ("decodable", "all")}
    assert mean == {"decodable": 3.5, "all": 5.5}  # round 0 waits for worker 5 (9 s) instead of 4 (5 s)


def test_compare_marks_inexact_schemes_and_names_the_fastest_exact_one():
    import json

    res = CliRunner().invoke(app, ["compare", "-n", "12", "-s", "2", "-m", "fixed", "-M", "stragglers=2",
                                   "-M", "delay=0.5", "--rounds", "50", "--json"])
    doc = json.loads(res.stdout)
    rows = {r["scheme"]: r for r in doc["rows"]}
    assert rows["Ignore n=12 s=2 (inexact)"]["exact"] is False
    assert rows["Ignore n=12 s=2 (inexact)"]["speedup"] > rows["CRC n=12 s=2"]["speedup"]  # by not being exact
    assert doc["fastest_exact"] in ("FRC n=12 s=2", "CRC n=12 s=2")


def test_a_missing_optional_extra_is_one_line_with_the_install_hint(tmp_path):
    import importlib.util

    import pytest

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")
    res = CliRunner().invoke(app, ["train", "--problem", "mlp", "--workers", "2", "--rounds", "1",
                                   "--run-dir", str(tmp_path / "r")])
    said = " ".join(res.output.split())
    assert res.exit_code == 2 and "pip install torch==2.13.0" in said and "Traceback" not in said


def _said(res) -> str:
    """The output as one line: rich's wrapping and help-panel borders taken out."""
    return " ".join(res.output.replace("│", " ").split())


def test_plot_writes_the_file_it_reports(tmp_path):
    """compare --plot adir used to write adir.png while its JSON said adir. Now a path ending in
    .png is the file, any other path a folder (made if missing), in simulate and compare alike; the
    JSON names the file written."""
    import json

    base = ["-n", "6", "-s", "1", "--rounds", "20", "--json"]
    for cmd, figure in (("compare", "compare.png"), ("simulate", "simulate_jobs.png")):
        folder = CliRunner().invoke(app, [cmd, *base, "--plot", str(tmp_path / cmd / "adir")])
        assert folder.exit_code == 0, folder.output
        written = json.loads(folder.stdout)["plot"]
        assert written == str(tmp_path / cmd / "adir" / figure)
        assert open(written, "rb").read(4) == b"\x89PNG"
        png = CliRunner().invoke(app, [cmd, *base, "--plot", str(tmp_path / cmd / "sub" / "x.png")])
        assert json.loads(png.stdout)["plot"] == str(tmp_path / cmd / "sub" / "x.png")
        assert sorted(p.name for p in (tmp_path / cmd / "sub").iterdir()) == ["x.png"]
        other = CliRunner().invoke(app, [cmd, *base, "--plot", str(tmp_path / "x.pdf")])
        assert other.exit_code == 2 and "give a path ending in .png or a folder" in _said(other)
    (tmp_path / "afile.txt").write_text("x")
    res = CliRunner().invoke(app, ["compare", *base, "--plot", str(tmp_path / "afile.txt")])
    assert res.exit_code == 2 and "is a file" in _said(res)


def test_an_output_that_cannot_be_written_and_an_empty_scheme_name_are_refused_before_training(tmp_path):
    """``--plot /dev/null/x`` used to train fully, then exit 1 with ``"error": null``; ``--scheme
    crc,,frc`` ran, skipping the empty name. Both are exit 2, refused before any round."""
    import json

    base = ["-n", "6", "-s", "1", "--rounds", "20", "--json"]
    for plot in ("/dev/null/x", "/dev/null/x.png"):
        res = CliRunner().invoke(app, ["compare", *base, "--plot", plot])
        assert res.exit_code == 2 and "/dev/null is not a folder" in _said(res), res.output
    res = CliRunner().invoke(app, ["train", "--scheme", "crc,,frc", "--rounds", "2", "--run-dir", str(tmp_path / "r"),
                                   "--engine", "inprocess", "--json"])
    assert res.exit_code == 2 and "an empty scheme name" in _said(res), res.output
    assert json.loads(res.stdout)["exit_code"] == 2 and not (tmp_path / "r").exists()


def test_a_scheme_n_or_s_contradicting_the_options_is_refused():
    """compare -n 6 --scheme crc:n=8 used to run with n = 8: the scheme's own n (or s) that
    disagrees with -n (or -s) is refused instead of silently winning."""
    cases = [
        ["compare", "-n", "6", "--scheme", "crc:n=8"],
        ["simulate", "-n", "6", "--scheme", "crc:n=8"],
        ["simulate", "-n", "6", "-s", "1", "--scheme", "crc:s=2"],
        ["compare", "-n", "6", "-p", "n=8", "--scheme", "crc"],
    ]
    for args in cases:
        res = CliRunner().invoke(app, [*args, "--rounds", "5"])
        assert res.exit_code == 2 and "disagree: give one of them" in _said(res), (args, res.output)
    same = CliRunner().invoke(app, ["compare", "-n", "8", "-s", "1", "--scheme", "crc:n=8", "--rounds", "5"])
    assert same.exit_code == 0, same.output


def test_long_simulations_show_a_progress_bar_on_a_terminal_only(monkeypatch):
    """compare and simulate draw one bar over all their runs on stderr when it is a terminal (here
    forced, and shown at once instead of after a second); stdout keeps exactly the JSON document."""
    import json

    from rich.console import Console

    from gradcode.experiments import cli_output

    args = ["-n", "6", "-s", "1", "--rounds", "300", "--repeats", "2", "--json"]
    monkeypatch.setattr(cli_output, "PROGRESS_AFTER", 0.0)
    plain = CliRunner().invoke(app, ["compare", *args])  # stderr is not a terminal: no bar
    assert plain.exit_code == 0 and "rounds" not in plain.stderr
    monkeypatch.setattr(cli_output, "err", Console(stderr=True, force_terminal=True, width=120))
    for cmd, total in (("compare", 4 * 2 * 300), ("simulate", 2 * 300)):
        res = CliRunner().invoke(app, [cmd, *args])
        assert res.exit_code == 0, res.output
        assert f"{total}/{total}" in res.stderr and "simulating" in res.stderr
        assert json.loads(res.stdout) == json.loads(CliRunner().invoke(app, [cmd, *args]).stdout)


def test_rounds_help_says_its_default():
    """--rounds used to read 'Rounds per run .': rich took '[default: ...]' for markup."""
    for cmd in ("simulate", "compare"):
        said = _said(CliRunner().invoke(app, [cmd, "--help"], terminal_width=200))
        assert "Rounds per run (default: 1000, or the trace's length)." in said
    assert "Training rounds of each scheme (default: 100; with --model one epoch)." in _said(
        CliRunner().invoke(app, ["train", "--help"], terminal_width=200))
    assert "Monte-Carlo rounds (reproductions that take rounds)." in _said(
        CliRunner().invoke(app, ["reproduce", "--help"], terminal_width=200))


def test_agc_table6_says_which_rows_differ_and_why():
    """The explanation of the rows that differ from the paper used to live only in the source."""
    import json

    doc = json.loads(CliRunner().invoke(app, ["reproduce", "agc-table6", "--json"]).stdout)
    assert [d["row"] for d in doc["differences"]] == ["G-CGC(1)", "AGC", "G-AGC"]
    assert all(d["why"] != "not explained" for d in doc["differences"])
    assert sum(r["agrees"] for r in doc["rows"]) == 12 and len(doc["rows"]) == 18
    assert "bounds the AET below by 10.58" in doc["differences"][2]["why"]
    text = _said(CliRunner().invoke(app, ["reproduce", "agc-table6"]))
    assert "12 of 18 values agree with the paper" in text
    assert "G-AGC (p = 0.05: 11.03 vs 9.95, p = 0.1: 12.78 vs 11.10): no reading can reach the print" in text


def test_train_splits_a_list_of_schemes_and_refuses_a_bad_one_before_running(tmp_path):
    from gradcode.experiments.cli_options import split_schemes

    assert split_schemes("crc,frc,uncoded,ignore") == ["crc", "frc", "uncoded", "ignore"]
    assert split_schemes("gc-dc:clusters=2,r=2,crc:s=1, uncoded") == ["gc-dc:clusters=2,r=2", "crc:s=1", "uncoded"]
    assert split_schemes("gc-sc:clusters=2,assignment=[[0,1],[2,3]],frc") == [
        "gc-sc:clusters=2,assignment=[[0,1],[2,3]]", "frc"]
    res = CliRunner().invoke(app, ["train", "--scheme", "crc,nope", "--workers", "3", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "unknown code" in _said(res)
    res = CliRunner().invoke(app, ["train", "--scheme", "crc,crc:n=6", "--workers", "3",
                                   "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "n=6 and the run's workers 3 disagree" in _said(res)
    assert not (tmp_path / "r").exists()  # nothing started


def test_train_refuses_a_scheme_n_that_contradicts_workers(tmp_path):
    """--workers 6 --scheme crc:n=8 used to train quietly with n = 8: the scheme's own n won."""
    for extra in (["--scheme", "crc:n=8"], ["--scheme", "crc", "--scheme-params", "n=8"]):
        res = CliRunner().invoke(app, ["train", "--workers", "6", *extra, "--run-dir", str(tmp_path / "r")])
        assert res.exit_code == 2, res.output
        assert "crc's n=8 and --workers/-n 6 disagree: give one of them" in _said(res)
    assert not (tmp_path / "r").exists()  # refused before anything started


def test_train_several_sends_each_param_where_it_applies_and_takes_n_from_the_schemes(tmp_path):
    """--scheme crc,frc -p seed=3 used to fail ("frc does not take seed"); with no -n, the n the
    schemes set is the run's n (it used to be 4, refused against crc:n=8), if they agree."""
    from gradcode.experiments.cli_options import params_per_scheme

    assert params_per_scheme({"seed": 3}, [("crc", {}), ("frc", {"s": 1})]) == [{"seed": 3}, {"s": 1}]
    res = CliRunner().invoke(app, ["train", "--scheme", "crc,frc", "-p", "bogus=1", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "--scheme-params bogus: none of the schemes takes it" in _said(res)
    res = CliRunner().invoke(app, ["train", "--scheme", "crc:n=5,frc:n=6", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "the schemes set different n (5, 6)" in _said(res)
    res = CliRunner().invoke(app, ["train", "--scheme", "crc:n=6,frc", "-n", "4", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "crc's n=6 and the run's workers 4 disagree" in _said(res)
    assert not (tmp_path / "r").exists()


def test_ray_death_notices_are_left_out_only_around_planned_failures():
    import io

    from gradcode.experiments.cli_train import RAY_DEATH_NOTICE, _WithoutDeathNotices

    sink = io.StringIO()
    stream = _WithoutDeathNotices(sink)
    print(f"(raylet) {RAY_DEATH_NOTICE}. To troubleshoot ... OOM killer", file=stream)
    print("(raylet) The node has been marked dead", file=stream)
    print(f"(raylet) {RAY_DEATH_NOTICE} [repeated 2x across cluster]", file=stream)
    print("", file=stream)
    assert sink.getvalue() == "(raylet) The node has been marked dead\n\n"


def test_waitout_all_without_a_mu_deadline_is_refused(tmp_path):
    """--waitout all waits out the mu-rule's deadline; without --close MU it used to be ignored."""
    res = CliRunner().invoke(app, ["simulate", "-n", "4", "-s", "1", "--rounds", "5", "--waitout", "all"])
    assert res.exit_code == 2 and "there is no deadline to wait out" in _said(res)
    res = CliRunner().invoke(app, ["train", "--waitout", "all", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "there is no deadline to wait out" in _said(res)
    res = CliRunner().invoke(app, ["train", "--close", "soon", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "close must be 'decodable' or a number mu >= 0" in _said(res)
    assert not (tmp_path / "r").exists()


def test_version():
    import gradcode

    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout.strip() == f"gradcode {gradcode.__version__}"


def test_delay_model_options_have_one_name_on_every_command(tmp_path):
    """-m/--delay-model and -M/--delay-params on simulate, compare and train; simulate's former
    --model/--model-param are gone (0.2.0), refused as unknown options."""
    import json

    short = CliRunner().invoke(app, ["simulate", "-n", "6", "-s", "1", "-m", "fixed", "-M", "stragglers=1",
                                     "--rounds", "20", "--json"])
    long = CliRunner().invoke(app, ["simulate", "-n", "6", "-s", "1", "--delay-model", "fixed", "--delay-params",
                                    "stragglers=1", "--rounds", "20", "--json"])
    assert short.exit_code == 0 and long.exit_code == 0, long.output
    assert json.loads(short.stdout)["summary"] == json.loads(long.stdout)["summary"]
    assert json.loads(long.stdout)["summary"]["delay_model"] == "fixed"
    for old in (["--model", "fixed"], ["--model-param", "stragglers=1"]):
        res = CliRunner().invoke(app, ["simulate", "-n", "6", *old, "--rounds", "5"])
        assert res.exit_code == 2 and "No such option" in _said(res)
    res = CliRunner().invoke(app, ["train", "--help"])
    assert "-m" in res.stdout and "--delay-model" in res.stdout and "-M" in res.stdout


def test_help_shows_no_value_after_a_flag_and_gradcode_has_a_version():
    """A flag takes no value (``--json true`` is refused), so its help shows none; options that
    take one keep their type."""
    import gradcode

    for command in ("train", "simulate", "compare", "tune"):
        text = CliRunner().invoke(app, [command, "--help"], terminal_width=200).output
        assert "<bool>" not in text and "<int>" in text, command
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"gradcode {gradcode.__version__}"


def test_simulate_and_compare_on_the_collective_transport():
    """--transport collective: the documents say so with the link parameters, the times are the
    library's own run's, and a scheme without reductions is one line of error, exit 1."""
    import json

    import gradcode

    args = ["-n", "6", "-s", "1", "-M", "comm=0.5", "--rounds", "40", "--json", "--transport", "collective"]
    res = CliRunner().invoke(app, ["simulate", "--scheme", "crc", *args])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    want = gradcode.simulate(gradcode.make_code("crc", n=6, s=1), gradcode.make_delay_model("shifted-exp", comm=0.5),
                             40, seed=0, transport="collective")
    assert doc["summary"]["transport"] == "collective" and doc["summary"]["link_model"] == want.transport
    assert "ring all-reduce" in want.transport and doc["summary"]["mean"] == want.summary()["mean"]
    res = CliRunner().invoke(app, ["compare", "--scheme", "uncoded", "--scheme", "crc", *args])
    doc = json.loads(res.stdout)
    assert res.exit_code == 0 and doc["transport"] == "collective" and doc["link_model"] == want.transport
    crc = next(r for r in doc["rows"] if r["scheme"].startswith("CRC"))
    assert crc["mean"] == want.summary()["mean"]  # the same draws (seed 0) as the library's run
    res = CliRunner().invoke(app, ["simulate", "--scheme", "gc-dc:clusters=2,r=2", "-n", "6", "--rounds", "5",
                                   "--transport", "collective"])
    assert res.exit_code == 1 and "cannot simulate GCDC" in res.output and "Traceback" not in res.output
    shared = ["-n", "6", "-s", "1", "-M", "comm=0.5", "--rounds", "40", "--json", "--master-link", "shared"]
    res = CliRunner().invoke(app, ["simulate", "--scheme", "crc", *shared])
    want = gradcode.simulate(gradcode.make_code("crc", n=6, s=1), gradcode.make_delay_model("shifted-exp", comm=0.5),
                             40, seed=0, master_link="shared")
    assert res.exit_code == 0 and json.loads(res.stdout)["summary"]["mean"] == want.summary()["mean"]
    res = CliRunner().invoke(app, ["compare", "--scheme", "uncoded", "--scheme", "crc", *shared])
    doc = json.loads(res.stdout)
    assert res.exit_code == 0 and doc["master_link"] == "shared"
    assert next(r for r in doc["rows"] if r["scheme"].startswith("CRC"))["mean"] == want.summary()["mean"]


def test_every_mapping_option_takes_commas_and_repeats_alike(tmp_path):
    """One reading of key=value options: ``--optimizer-params lr=0.1,momentum=0.9`` once gave the
    string "0.1,momentum=0.9" for lr (and a torch error about '<' after the progress bar), while
    ``--scheduler step:step_size=10,gamma=0.5`` split at the commas. Now every mapping option and
    inline scheme parameters split where a key= follows, JSON values keep their commas, numbers are
    numbers, and a malformed item names its option."""
    import json

    from gradcode._options import parse_kv
    from gradcode.experiments.cli_options import parse_scheme

    assert parse_kv(["lr=0.1,momentum=0.9"], "x") == parse_kv(["lr=0.1", "momentum=0.9"], "x") == {
        "lr": 0.1, "momentum": 0.9}
    assert parse_kv(["assignment=[[0,1],[2,3]],clusters=2", "categorical=colour,city,target=label"], "x") == {
        "assignment": [[0, 1], [2, 3]], "clusters": 2, "categorical": "colour,city", "target": "label"}
    assert parse_kv(['order={"a": 1, "b": 2},seed=3'], "x") == {"order": {"a": 1, "b": 2}, "seed": 3}
    assert parse_scheme("gc-sc:clusters=2,assignment=[[0,1],[2,3]]") == (
        "gc-sc", {"clusters": 2, "assignment": [[0, 1], [2, 3]]})
    runner = CliRunner()
    res = runner.invoke(app, ["train", "--engine", "inprocess", "--rounds", "1", "--workers", "3",
                              "--data-params", "n_samples=90,n_features=3", "--optimizer-params", "lr=0.5",
                              "--run-dir", str(tmp_path / "r"), "--json"])
    assert res.exit_code == 0, res.output
    config = json.loads(res.stdout)["config"]
    assert config["data_params"] == {"n_samples": 90, "n_features": 3} and config["optimizer_params"][0]["lr"] == 0.5
    for option in ("--data-params", "--optimizer-params", "--scheme-params"):
        res = runner.invoke(app, ["train", option, "oops,n_samples=90", "--run-dir", str(tmp_path / "bad")])
        assert res.exit_code == 2 and f"{option} must look like key=value" in _said(res), (option, res.output)


def test_messages_print_markup_and_emoji_codes_as_written(capsys):
    """``--loss nofile.py:x`` printed an emoji: rich turned ``:x:`` into one. Errors, notes and
    table cells are printed as written: no emoji, no markup (``[bold]`` stays text)."""
    from gradcode.experiments.cli_output import emit

    res = CliRunner().invoke(app, ["train", "--scheme", "crc:x:"])
    assert res.exit_code == 2 and "'crc:x:'" in res.output and "\u274c" not in res.output, res.output
    res = CliRunner().invoke(app, ["train", "--scheme", "[bold]crc:x:"])
    assert res.exit_code == 2 and "'[bold]crc:x:'" in res.output, res.output
    emit({"rows": [{"scheme": "[bold]gc:x:", "time_s": 1.0}]}, as_json=False, title="[red]runs :x:")
    shown = capsys.readouterr().out
    assert "[bold]gc:x:" in shown and "[red]runs :x:" in shown and "\u274c" not in shown


def test_train_json_names_its_files_embeds_parameters_on_request_and_says_its_clock(tmp_path):
    """``--json`` names the file holding the final parameters (``files``) instead of embedding them;
    ``--json-params`` embeds them too; an in-process run says on stderr what its virtual clock is
    (the calibration), since its times mean little without it."""
    import json

    import numpy as np

    base = ["train", "--engine", "inprocess", "--rounds", "1", "--workers", "3", "--data-params",
            "n_samples=90,n_features=3", "--json"]
    res = CliRunner().invoke(app, base + ["--run-dir", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert "final_params" not in doc and np.load(doc["files"]["params"]).shape[0] == 1
    assert "virtual clock:" in _said(res) and "us/sample" in _said(res)
    res = CliRunner().invoke(app, base + ["--json-params", "--run-dir", str(tmp_path / "b")])
    doc = json.loads(res.stdout)
    assert res.exit_code == 0 and len(doc["final_params"]) == np.load(doc["files"]["params"]).shape[1]
