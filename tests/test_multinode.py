"""Several Ray nodes: workers spread over three nodes of one machine, a node
killed mid-run. Its workers are stragglers from then on and each death is one fault record; the
run stays exact (against the same run in process). Runs ``tests/multinode_run.py`` in a process of
its own: the rest of the suite shares one single-node Ray session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.ray
def test_a_node_that_dies_takes_its_workers_and_the_run_stays_exact():
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("multinode_run.py"))], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rel"] < 1e-12
    deaths = [f for f in out["failures"] if f["kind"] == "died"]
    assert len(deaths) == 2 and len({f["worker"] for f in deaths}) == 2  # the two workers of node 0, once each
    # noticed by the node check, or first by the workers' channels closing as their processes exit
    # (on one machine a removed node's processes end before Ray marks the node dead)
    assert all(("Ray node" in f["error"] or "channel closed" in f["error"]) and f["recovery"] == "tolerated"
               for f in deaths)
    dead = {f["worker"] for f in deaths}
    # stragglers from the round their deaths were recorded on, nothing else late (the processes of a
    # removed node may still answer for a few rounds, which take ~0.1 s each here)
    noticed = max(f["round"] for f in deaths)
    assert noticed <= 20 and all(set(late) == dead for late in out["late"][noticed + 1:])
    assert out["cli_exit"] == 0 and out["cli_rounds"] == 5
