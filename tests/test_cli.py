"""The command line as a newcomer meets it: no traceback for a user's mistake or environment."""

from typer.testing import CliRunner

from gradcode.cli import app


def test_a_run_too_large_for_memory_is_refused_with_its_size():
    """gradcode simulate -n 1000000 used to end in a MemoryError traceback (a dense 7 TiB matrix)."""
    res = CliRunner().invoke(app, ["simulate", "-n", "1000000", "-s", "2", "--rounds", "1"])
    said = " ".join(res.output.split())
    assert res.exit_code == 2 and "not enough memory" in said and "TiB" in said and "Traceback" not in said
