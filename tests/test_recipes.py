"""docs/architecture.md's "add a code" recipe, followed: one file holding a new code and its
registration, and the contract suite finds it with no test edited (its examples are its instances).

The contract suite runs in a fresh interpreter (``pytest -p``) that imports the new file first, so
this session's registry keeps exactly the library's codes."""

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: a new code as the recipe writes it: the pair-mirror code (Tandon's FRC with s = 1 written from
#: scratch): workers 2i and 2i+1 both hold partitions 2i and 2i+1 and send their sum
MIRROR = '''
import numpy as np

from gradcode.codes import LinearCode, check_n_s, register


@register("mirror")
class Mirror(LinearCode):
    """Workers 2i and 2i + 1 hold partitions 2i and 2i + 1 and send their sum: one straggler of
    each pair is tolerated."""

    examples = (dict(n=4), dict(n=6), dict(n=2))

    def __init__(self, n: int):
        n, _ = check_n_s(n, 1)
        if n % 2:
            raise ValueError(f"mirror needs an even n, got {n}")
        super().__init__(n=n, k=n, tolerance=1, params={"n": n},
                         placement=[(w - w % 2, w - w % 2 + 1) for w in range(n)],
                         encoders=[np.ones((1, 2, 1)) for _ in range(n)])
'''


def _contract_suite(tmp_path, source: str) -> subprocess.CompletedProcess:
    """The contract suite's checks of the code ``mirror`` defined by ``source``."""
    (tmp_path / "mirror_code.py").write_text(source)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(TESTS), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "mirror_code", "-p", "no:cacheprovider", "-k", "mirror",
         str(TESTS / "test_code_contract.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_a_new_code_is_one_file_and_the_contract_suite_finds_it(tmp_path):
    run = _contract_suite(tmp_path, MIRROR)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    summary = run.stdout.strip().splitlines()[-1]
    passed = int(summary.split(" passed")[0].split()[-1])
    # every contract check ran on each of the three examples (a few skip for codes like this one)
    assert passed >= 3 * 10, summary
    assert "failed" not in summary and "error" not in summary, summary


def test_the_suite_it_joins_catches_a_wrong_claim(tmp_path):
    """The same code claiming no straggler tolerance (it has one) fails the tight-tolerance check;
    declaring no examples fails the suite too."""
    understated = _contract_suite(tmp_path, MIRROR.replace("tolerance=1", "tolerance=0"))
    assert understated.returncode == 1 and "its tolerance is understated" in understated.stdout
    bare = _contract_suite(tmp_path, MIRROR.replace("    examples = (dict(n=4), dict(n=6), dict(n=2))\n", ""))
    assert bare.returncode == 1 and "declares no examples" in bare.stdout, bare.stdout[-2000:]
