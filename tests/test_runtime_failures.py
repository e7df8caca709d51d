"""No silently wrong gradient, no lost run (issue 8, items 2-7): what the runtime does when a worker
sends NaN or an overflowing value, when a run stops midway (round timeout, divergence), when the
cluster address answers nothing or the checkpoint is damaged, and when a driver is SIGKILLed.
"""

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from gradcode.codes import NonFiniteMessageError, make_code

SEED = 3


# ---------------------------------------------------------------- item 2: non-finite results


def test_decode_names_the_workers_whose_finite_messages_overflow():
    """Finite messages whose weighted sum overflows used to give 'workers [] hold non-finite
    values': the decoder now names the workers whose scaled contribution reaches the overflow."""
    code = make_code("crc", n=6, s=2, seed=SEED)  # decoding coefficients for workers 0-3: 1, 0.6, -2.3, -0.04
    rng = np.random.default_rng(0)
    msgs = {w: rng.standard_normal(5) for w in range(4)}
    msgs[2] = np.full(5, 1e308)  # finite; times -2.3 it is not
    with pytest.raises(NonFiniteMessageError, match=r"workers \[2\]") as info:
        code.decode(msgs, dim=5)
    assert info.value.workers == (2,)
    msgs = {w: rng.standard_normal(5) for w in range(4)}
    msgs[0] = msgs[1] = np.full(5, 1.5e308)  # each contribution finite (1.5e308, 0.9e308), their sum not
    with pytest.raises(NonFiniteMessageError) as info:
        code.decode(msgs, dim=5)
    assert info.value.workers == (0, 1)


# ---------------------------------------------------------------- item 7: temp dirs of killed drivers


def test_a_later_run_removes_the_temp_dir_of_a_sigkilled_driver(tmp_path, monkeypatch):
    """A driver whose run dir is too long for Ray's socket paths keeps Ray's files in
    /tmp/gcray-*; SIGKILLed, it cannot remove them. The next local start (init_ray; its ray.init
    is stubbed here, this session's Ray already runs) removes the folders whose driver is dead,
    keeping their logs in the dead run's run_dir/ray/logs, and leaves alone those of live drivers
    (here: this process's own)."""
    from gradcode.runtime import engine as eng

    run_dir = tmp_path / ("long-run-directory-name-" * 3)
    run_dir.mkdir()  # as train() does before it starts Ray
    script = (
        "import sys, time\n"
        "from gradcode.runtime.engine import RayEngine\n"
        f"e = RayEngine(num_cpus=1, run_dir={str(run_dir)!r})\n"
        "print(e.temp_dir, flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        dead = proc.stdout.readline().strip()
        assert dead.startswith("/tmp/gcray-") and os.path.isdir(dead), dead
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert os.path.isdir(dead)  # what SIGKILL leaves behind
    monkeypatch.setattr(eng.ray, "init", lambda **kw: None)
    mine = eng.init_ray(num_cpus=1, run_dir=tmp_path / ("another-long-run-directory-" * 3))  # a later run
    try:
        assert mine.startswith("/tmp/gcray-") and not os.path.exists(dead)
        assert any((run_dir / "ray" / "logs").iterdir())
        assert mine not in eng.reap_dead_temp_dirs() and os.path.isdir(mine)  # its driver (we) is alive
    finally:
        eng.retire_temp_dir(mine, None)
    assert not os.path.exists(mine)
