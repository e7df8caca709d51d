"""One vocabulary: each option declared once, as a config dataclass field whose name is the flag and
the JSON key; the glossary of docs/architecture.md says the same as ``--help``, the API and a run's
``config.json``."""

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradcode._options import flag_of
from gradcode.cli import app
from gradcode.cli import ReproduceCommand
from gradcode.experiments.cli_models import ModelsCommand
from gradcode.experiments.cli_options import Output
from gradcode.experiments.cli_sim import CompareCommand, SimulateCommand, Simulation
from gradcode.experiments.cli_train import CommandLine, train_options
from gradcode.experiments.cli_tune import TuneCommand
from gradcode.runtime import ClusterConfig, FaultConfig, InProcessEngine, RunConfig, TrainSpec, train
from gradcode.schemes.sgc.tune import TuneSearch, tune
from gradcode.torch.config import TorchConfig

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
CLASSES = {c.__name__: c for c in (TrainSpec, ClusterConfig, FaultConfig, RunConfig, TorchConfig, CommandLine,
                                   Simulation, SimulateCommand, CompareCommand)}


def _help(command: str) -> str:
    res = CliRunner().invoke(app, [command, "--help"], terminal_width=400)
    assert res.exit_code == 0, res.output
    return res.output


def _glossary() -> list[dict]:
    text = ARCHITECTURE.read_text()
    table = text[text.index("## Glossary"):].split("\n## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| term")]
    out = []
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        out.append(dict(zip(("term", "cli", "api", "json"), cells)))
    assert len(out) >= 10
    return out


def test_train_options_are_the_config_fields_under_their_own_names():
    """Every ``gradcode train`` option is one field (of TrainSpec, TorchConfig, ClusterConfig,
    FaultConfig, RunConfig or the command's own CommandLine), its flag the field's name, listed in
    --help; every field the command line may set is an option, none twice."""
    opts = train_options()
    names = [o.name for o in opts]
    assert len(names) == len(set(names))
    expected = []
    for cls in (TrainSpec, CommandLine, Output, TorchConfig, ClusterConfig, FaultConfig, RunConfig):
        expected += [f.name for f in dataclasses.fields(cls) if f.metadata.get("cli") and f.name not in expected]
    assert names == expected
    shown = _help("train")
    for o in opts:
        assert o.flag == flag_of(o.name) and o.flag in shown, o.flag
        assert o.help == next(f.metadata["help"] for f in dataclasses.fields(o.owner) if f.name == o.name)
    for old in ("--param ", "--cpus-per-worker", "--data-param ", "--opt-param", "--target", "--code", "--lr"):
        assert old not in shown, old


def test_every_commands_options_are_declared_fields():
    """Every option and argument of every command (``gradcode --help`` lists them) is one field of a
    config or command dataclass, under the field's name, with the field's help: none is written by
    hand beside them (``--json`` is :class:`Output`'s one field, shared by every command)."""
    import typer.main

    fields = {}
    for cls in (TrainSpec, CommandLine, Output, TorchConfig, ClusterConfig, FaultConfig, RunConfig, Simulation,
                SimulateCommand, CompareCommand, TuneCommand, TuneSearch, ReproduceCommand, ModelsCommand):
        for f in dataclasses.fields(cls):
            if f.metadata.get("cli"):
                fields.setdefault(f.name, set()).add(f.metadata["help"])
    group = typer.main.get_command(app)
    assert set(group.commands) == {"codes", "reproduce", "models", "simulate", "compare", "train", "tune"}
    for name, cmd in group.commands.items():
        for param in cmd.params:
            if param.name == "help":
                continue
            assert param.name in fields, (name, param.name)
            assert param.help in fields[param.name], (name, param.name, param.help)
            if param.opts[0].startswith("--"):
                assert param.opts[0] == flag_of(param.name), (name, param.opts)
        assert any(p.name == "json" for p in cmd.params), name  # every command prints JSON on request


def test_the_closing_rule_is_declared_once_for_training_and_the_simulator():
    for name in ("close", "waitout"):
        train_field = next(f for f in dataclasses.fields(TrainSpec) if f.name == name)
        sim_field = next(f for f in dataclasses.fields(Simulation) if f.name == name)
        assert train_field.default == sim_field.default and train_field.metadata == sim_field.metadata


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_simulate_and_compare_share_one_declaration(command):
    shown = _help(command)
    for f in dataclasses.fields(Simulation):
        assert (flag_of(f.name) in shown) == bool(f.metadata.get("cli")), f.name


def test_the_glossary_matches_help_the_api_and_the_json(tmp_path):
    res = train(TrainSpec("crc", workers=3, stragglers=1, delay=0.01, data_params={"n_samples": 90, "n_features": 3}),
                run=RunConfig(rounds=1, run_dir=tmp_path / "r", eval_every=0), engine=InProcessEngine())
    config = res.config
    helps = {c: _help(c) for c in ("train", "simulate", "compare", "tune")}
    tune_keywords = set(inspect.signature(tune).parameters) | {f.name for f in dataclasses.fields(TuneSearch)}
    for row in _glossary():
        flags = re.findall(r"`(--[a-z-]+)", row["cli"])
        fields = re.findall(r"`(\w+)\.(\w+)`", row["api"])
        keys = re.findall(r"`(\w+)`", row["json"])
        for flag in flags:
            assert any(flag in h for h in helps.values()), (row["term"], flag)
        for name in re.findall(r"(\w+)=", " ".join(re.findall(r"`tune\(([^`]*)\)`", row["api"]))):
            assert name in tune_keywords and flag_of(name) in flags, (row["term"], name)  # tune's keyword = flag
        for cls, name in fields:
            assert name in {f.name for f in dataclasses.fields(CLASSES[cls])}, (row["term"], cls, name)
            if flags and cls in ("TrainSpec", "ClusterConfig", "FaultConfig", "RunConfig", "TorchConfig"):
                assert flag_of(name) in flags, (row["term"], name, flags)  # the flag is the field's name
        for key in keys:
            if key in {f.name for f in dataclasses.fields(TrainSpec)} | {"rounds", "fail"}:
                assert key in config, (row["term"], key)
    # the config names its scheme and delay model by name and parameters, not by a repr
    assert config["scheme"] == "crc" and config["scheme_params"] == {} and config["delay_model"] == "fixed"
    assert not any(k in config for k in ("code", "code_params"))


def test_source_tests_and_benchmarks_say_what_they_do_not_which_ticket():
    """Docstrings and comments say what the code does and why; the tracker's numbering ("issue N",
    "item N", "the issue's case") says nothing to a reader of the code and goes stale."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    tracker = re.compile(r"\b[Ii]ssues? #?\d+|\b[Ii]tems? \d+\b|\b[Tt]he issue'?s?\b|\bissue:|def test_issue")
    found = []
    for folder in ("src", "tests", "benchmarks"):
        for path in sorted((root / folder).rglob("*.py")):
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if tracker.search(line) and "github.com" not in line and path.name != "test_glossary.py":
                    found.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    assert found == []


#: timings in docstrings and comments that are not measurements of this code, by file and a phrase of
#: the line that holds them: model parameters and paper constants stay where the model is described
MODEL_TIMINGS = {
    # the shared-access delay model's latency, linear from one task to capacity (GC-DC Sec. VI-C)
    ("src/gradcode/stragglers/models/__init__.py", "(20 ms to 200 ms,"),
    ("src/gradcode/stragglers/models/shared_access.py", "20 ms alone and 200 ms at capacity 10"),
    # the same model's paper parameters as GC-DC's Fig. 12 uses them, and what follows from them
    ("src/gradcode/experiments/gcdc_figures.py", "20-200 ms per task"),
    ("src/gradcode/experiments/gcdc_figures.py", "20-40 ms spread of lightly loaded workers"),
    # the in-process engine's default ring cost (CollectiveCost), a modelled 10 Gbit/s Ethernet link
    ("src/gradcode/runtime/inprocess.py", "Defaults: 50 us a"),
    # an example of the progress line's layout, not a figure
    ("src/gradcode/runtime/progress.py", "round 24 ms"),
}


def _prose(text: str):
    """The tokens of every docstring (module, class, function, attribute) and comment of ``text``."""
    import ast
    import io
    import tokenize

    docs = {(n.value.lineno, n.value.col_offset) for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and tok.start in docs):
            yield tok


def test_source_prose_points_to_the_benchmarks_instead_of_carrying_timings():
    """A timing measured on one machine goes stale in a docstring: the docstring says in words what
    is cheaper and why, and points to BENCHMARKS.md, whose sections hold the numbers with their
    command, machine and date. Fails naming ``file:line`` for a number of ms, µs or us, or an "Nx
    faster/slower", in a docstring or comment of ``src/gradcode``, outside :data:`MODEL_TIMINGS`."""
    root = Path(__file__).resolve().parents[1]
    timing = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?:\s?-\s?\d+(?:\.\d+)?)?\s?(?:ms|µs|us)\b"
                        r"|(?<![\w.])\d+(?:\.\d+)?\s?[x×]\s+(?:faster|slower|as long|as fast|cheaper)\b")
    found, allowed = [], set()
    for path in sorted((root / "src" / "gradcode").rglob("*.py")):
        name = path.relative_to(root).as_posix()
        text = path.read_text()
        lines = text.splitlines()
        for tok in _prose(text):
            for m in timing.finditer(tok.string):
                i = tok.start[0] + tok.string.count("\n", 0, m.start())
                hit = [key for key in MODEL_TIMINGS if key[0] == name and key[1] in lines[i - 1]]
                allowed.update(hit)
                if not hit:
                    found.append(f"{name}:{i}: {m.group(0)!r} in {lines[i - 1].strip()}")
    assert found == [], "measured timings belong in BENCHMARKS.md:\n" + "\n".join(found)
    assert allowed == MODEL_TIMINGS, f"allowlist entries that match nothing: {MODEL_TIMINGS - allowed}"


def test_the_bad_input_table_names_tests_that_exist():
    """docs/architecture.md's table of bad input and faults says which test holds each row: every
    file and test function it names exists, so the table cannot drift from the suite."""
    text = ARCHITECTURE.read_text()
    table = text[text.index("## Bad input and faults"):].split("\n## ")[0]
    named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", table)
    assert len(named) >= 12
    root = ARCHITECTURE.parents[1]
    for path, test in named:
        assert (root / path).is_file(), path
        if test:
            assert f"def {test}(" in (root / path).read_text(), (path, test)
