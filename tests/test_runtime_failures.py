"""No silently wrong gradient, no lost run: what the runtime does when a worker
sends NaN or an overflowing value, when a run stops midway (round timeout, divergence), when the
cluster address answers nothing or the checkpoint is damaged, and when a driver is SIGKILLed.

Ray tests share the session of conftest.py (2 CPUs) and use small data; injected delays only decide
who arrives first, and every assertion is on values (parameters against single-process GD, named
workers, parsed JSON, exit codes, files), never on times.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from gradcode.stragglers import make_delay_model
from typer.testing import CliRunner

from gradcode.cli import app
from gradcode.codes import NonFiniteMessageError, make_code
from gradcode.runtime.safe_state import write_document
from gradcode.runtime import CheckpointError, RoundTimeoutError
from runtime_util import DATA, SEED, PoisonedWorker, gd_reference, rel, train_options

try:  # workers cannot import the test modules: ship their classes (problem specs) by value
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(sys.modules["runtime_util"])  # PoisonedWorker
except ImportError:
    pass

CLI_DATA = ["--data-params", "n_samples=400", "--data-params", "n_features=6", "--seed", "3"]


def reference(steps, *, lr=0.5):
    """Single-process full-gradient descent on the same data: the target of exact codes."""
    return gd_reference(DATA, SEED, steps, lr=lr)


def strict_json(text):
    """Parse ``text`` as strict JSON: ``NaN``/``Infinity`` (which json.loads accepts) are errors."""
    def refuse(token):
        raise ValueError(f"non-standard JSON constant {token}")

    return json.loads(text, parse_constant=refuse)


def delays(rounds, n, slow, seconds):
    """A trace delay model: workers ``slow`` sleep ``seconds`` in every round."""
    d = np.zeros((rounds, n))
    d[:, list(slow)] = seconds
    return make_delay_model("trace", delays=d)


# ---------------------------------------------------------------- non-finite results


def test_a_nan_result_is_a_straggler_and_the_round_waits_for_the_healthy_workers(ray_session, tmp_path):
    """crc n = 6, s = 2: worker 1 computes NaN, workers 4 and 5 are slow. Worker 1's result used
    to make the round ready with workers 0-3, then be dropped, leaving three: 'cannot be decoded
    after dropping workers [1]'. Now it is a straggler: the round waits for worker 4 or 5 and
    decodes exactly, and the fault is recorded."""
    code = make_code("crc", n=6, s=2, seed=SEED)
    res = train_options("crc", workers=6, stragglers=2, data=PoisonedWorker(code.placement[1], np.nan), rounds=3,
                delay_model=delays(3, 6, (4, 5), 0.5), optimizer_params={"lr": 0.5}, seed=SEED,
                run_dir=tmp_path / "r", eval_every=0, round_timeout=30)
    assert rel(res.final_params, reference(3)) < 1e-9
    assert (res.arrivals[:, 1] == -1).all() and (res.arrivals[:, [4, 5]] >= 0).any(axis=1).all()
    faults = [(f["round"], f["worker"], f["kind"], f["recovery"]) for f in res.failures]
    assert faults == [(t, 1, "non-finite", "tolerated") for t in range(3)]


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


def test_a_finite_result_that_overflows_the_decode_is_dropped_and_the_round_waits(ray_session, tmp_path):
    """crc n = 6, s = 2: worker 2 sends a finite message of ~1.7e308; decoding workers 0-3 would
    weigh it by -2.3, which overflows. What the worker summed (the scale it sends) overflows
    already, so its result is discarded on arrival (named), three workers are left, and the round
    waits for a slow worker instead of stopping the run; training stays exact."""
    code = make_code("crc", n=6, s=2, seed=SEED)
    assert abs(code.decoding({0: 1, 1: 1, 2: 1, 3: 1}).coefficients[0, 2]) > 2
    spec = PoisonedWorker(code.placement[2], 1.7e308, bad=code.placement[2][0])
    res = train_options("crc", workers=6, stragglers=2, data=spec, rounds=2, delay_model=delays(2, 6, (4, 5), 1.0),
                optimizer_params={"lr": 0.5}, seed=SEED, run_dir=tmp_path / "r", eval_every=0, round_timeout=30)
    assert rel(res.final_params, reference(2)) < 1e-9
    assert (res.arrivals[:, 2] == -1).all()
    assert [(f["round"], f["worker"], f["kind"]) for f in res.failures] == [(0, 2, "non-finite"), (1, 2, "non-finite")]
    assert "overflows" in res.failures[0]["error"]


# ---------------------------------------------------------------- a run that stops keeps its rounds


def test_a_round_timeout_keeps_the_completed_rounds_and_names_the_dead_workers(ray_session, tmp_path):
    """Two workers of crc s = 1 die in round 2 and are not restarted: the round times out. The two
    completed rounds stay on disk (rounds.jsonl line by line, result.json with the error) and in
    the exception's result, with the GD iterate after round 1; the message names both workers
    and why they held the round up."""
    with pytest.raises(RoundTimeoutError) as info:
        train_options("crc", workers=4, stragglers=1, rounds=5, fail=["1@2", "2@2"], max_restarts=0, round_timeout=3.0,
              data="tandon-synthetic", data_params=DATA, seed=SEED, optimizer_params={"lr": 0.5},
              run_dir=tmp_path / "r", eval_every=1)
    msg = str(info.value)
    assert "round 2 could not be decoded" in msg and "held up by workers [1, 2]" in msg
    assert "worker 1: its process died in round 2" in msg and "max_restarts=0" in msg
    res = info.value.result
    assert res.round_times.shape == (2,) and res.arrivals.shape == (2, 4) and res.losses.shape == (2, 1)
    assert rel(res.final_params, reference(2)) < 1e-9
    assert res.error == msg and res.error_type == "RoundTimeoutError"
    assert sorted((f["round"], f["worker"], f["recovery"]) for f in res.faults) == [(2, 1, "none"), (2, 2, "none")]
    doc = strict_json((tmp_path / "r" / "result.json").read_text())
    assert doc["rounds"] == 2 and doc["error"] == msg and len(doc["losses"]) == 2 and len(doc["metrics"]) == 2
    lines = [strict_json(line) for line in (tmp_path / "r" / "rounds.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == [0, 1]
    np.testing.assert_array_equal([line["arrivals"] for line in lines], res.arrivals)
    np.testing.assert_array_equal([line["losses"] for line in lines], res.losses)
    assert np.load(tmp_path / "r" / "round_times.npy").shape == (2,)


def test_a_timeout_behind_a_slow_worker_says_so_and_not_that_workers_failed(ray_session, tmp_path):
    """uncoded needs every worker; worker 3 sleeps 30 s in round 1. The message names worker 3 as
    still computing with its injected delay, and no failure is invented."""
    d = np.zeros((3, 4))
    d[1, 3] = 30.0
    with pytest.raises(RoundTimeoutError) as info:
        train_options("uncoded", workers=4, rounds=3, delay_model="trace", delay_params={"delays": d},
                      round_timeout=1.5,
              data="tandon-synthetic", data_params=DATA, seed=SEED, optimizer_params={"lr": 0.5},
              run_dir=tmp_path / "r", eval_every=0)
    msg = str(info.value)
    assert "held up by workers [3]: worker 3: still computing: 0 of 1 messages" in msg
    assert "injected delay 30 s" in msg
    assert "died" not in msg and "failed" not in msg
    assert info.value.result.round_times.size == 1 and info.value.result.faults == []


def test_cli_prints_the_records_of_a_run_that_stopped_with_its_error(ray_session, tmp_path):
    """`gradcode train --json` of a run whose round 2 times out exits 1 and still prints one strict
    JSON document: the two completed rounds and the error."""
    d = np.zeros((4, 4))
    d[2, 1] = 30.0
    res = CliRunner().invoke(app, [
        "train", "--scheme", "uncoded", "--workers", "4", "--rounds", "4", "--round-timeout", "1.5",
        "--delay-model", "trace", "--delay-params", f"delays={json.dumps(d.tolist())}", "--optimizer-params", "lr=0.5",
        "--run-dir", str(tmp_path / "run"), "--json", *CLI_DATA,
    ])
    assert res.exit_code == 1, res.output
    doc = strict_json(res.stdout)
    assert doc["rounds"] == 2 and len(doc["round_times"]) == 2 and len(doc["arrivals"]) == 2
    assert doc["error_type"] == "RoundTimeoutError" and "held up by workers [1]" in doc["error"]
    assert rel(np.load(doc["files"]["params"])[0], reference(2)) < 1e-9
    assert "error:" in res.stderr and "2 completed round(s) kept in" in res.stderr


# ---------------------------------------------------------------- unreachable cluster, damaged checkpoint


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_address_fails_within_the_start_timeout(tmp_path):
    """Nothing listens at the address: `gradcode train --address` fails with a clear message after
    the start timeout (Ray alone retried for ~14 minutes, then raised a raw ConnectionError). In a
    subprocess: this test session's Ray is already running, so an address would be ignored."""
    address = f"127.0.0.1:{_free_port()}"
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from gradcode.cli import main; sys.argv[0] = 'gradcode'; main()",
         "train", "--address", address, "--start-timeout", "1", "--rounds", "2", "--json",
         "--run-dir", str(tmp_path / "r"), *CLI_DATA],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert out.returncode == 1, out.stderr[-3000:]
    assert f"no Ray cluster answers at '{address}'" in out.stderr and "within 1 s" in out.stderr
    assert "Traceback" not in out.stderr
    doc = strict_json(out.stdout)
    assert doc["rounds"] == 0 and doc["error_type"] == "GradcodeError" and address in doc["error"]


def test_a_local_start_that_ray_gives_up_on_is_a_clear_error(tmp_path, monkeypatch):
    """Under heavy load ray.init raised a bare ``Exception("The current node timed out during
    startup")``, which init_ray let through as a traceback; now it is a GradcodeError like any
    failed start (ray.init is stubbed: this session's Ray already runs)."""
    from gradcode.errors import GradcodeError
    from gradcode.runtime import cluster as eng

    def gives_up(**kw):
        raise Exception("The current node timed out during startup. This could happen because some of the"
                        " Ray processes failed to startup.")

    monkeypatch.setattr(eng.ray, "init", gives_up)
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    with pytest.raises(GradcodeError, match="^could not start a local Ray cluster: Exception: The current node"
                                            " timed out during startup"):
        eng.init_ray(num_cpus=1, run_dir=run_dir)


def test_a_damaged_checkpoint_is_reported_as_damaged(ray_session, tmp_path):
    kw = dict(workers=4, stragglers=1, rounds=2, checkpoint_every=2, data="tandon-synthetic", data_params=DATA,
              seed=SEED, optimizer_params={"lr": 0.5}, run_dir=tmp_path / "r", eval_every=0)
    train_options("crc", **kw)
    ckpt = tmp_path / "r" / "checkpoint.json"
    good = ckpt.read_bytes()
    (blob,) = ckpt.parent.glob("checkpoint-*.npz")
    good_blob = blob.read_bytes()
    ckpt.write_bytes(good[: len(good) // 2])  # truncated
    with pytest.raises(CheckpointError, match=r"checkpoint .*checkpoint.json is damaged"):
        train_options("crc", resume=True, **kw)
    ckpt.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CheckpointError, match="is damaged"):
        train_options("crc", resume=True, **kw)
    write_document(ckpt, [1, 2, 3])  # well formed, but not a run's checkpoint
    with pytest.raises(CheckpointError, match="not a gradcode checkpoint"):
        train_options("crc", resume=True, **kw)
    ckpt.write_bytes(good[:100])
    res = CliRunner().invoke(app, ["train", "--scheme", "crc", "--workers", "4", "--stragglers", "1", "--rounds",
                                   "2", "--checkpoint-every", "2", "--resume", "--run-dir", str(tmp_path / "r"),
                                   "--optimizer-params", "lr=0.5", *CLI_DATA])
    assert res.exit_code == 1 and "is damaged" in res.stderr and "Traceback" not in res.output
    ckpt.write_bytes(good)  # the intact checkpoint still resumes
    blob.write_bytes(good_blob)
    assert train_options("crc", resume=True, **kw).resumed_from == 2


# ---------------------------------------------------------------- divergence, strict JSON


def test_a_diverging_step_stops_with_a_clear_error_and_json_that_parses(ray_session, tmp_path):
    """--lr 1e300 used to exit 0 with a NaN loss and bare NaN in the JSON. Now the run stops at
    the first non-finite parameters or loss, says why, keeps the finite rounds before, and the
    document parses as strict JSON."""
    res = CliRunner().invoke(app, ["train", "--scheme", "crc", "--workers", "4", "--stragglers", "1", "--rounds",
                                   "6", "--optimizer-params", "lr=1e300", "--run-dir", str(tmp_path / "r"), "--json",
                                   *CLI_DATA])
    assert res.exit_code == 1, res.output
    doc = strict_json(res.stdout)
    assert "training diverged" in doc["error"] and "lr=1e+300" in doc["error"] and "Lower the learning rate" in doc["error"]
    assert doc["rounds"] < 6 and all(np.isfinite(doc["losses"]).ravel())
    assert np.isfinite(np.load(doc["files"]["params"])).all()
    assert strict_json((tmp_path / "r" / "result.json").read_text())["error"] == doc["error"]


def test_run_records_write_non_finite_numbers_as_null():
    from gradcode.runtime import TrainResult

    res = TrainResult(config={"code": "crc"}, params=[np.zeros(2)], round_times=np.zeros(0), arrivals=np.zeros((0, 4)),
                      messages=np.zeros((0, 4), dtype=int), injected=np.zeros((0, 4)), losses=np.zeros((0, 1)),
                      metrics=[{"round": 0, "roc_auc": float("nan"), "loss": np.float64("inf")}])
    doc = strict_json(json.dumps(res.to_json()))
    assert doc["final_loss"] is None and doc["metrics"][0]["roc_auc"] is None and doc["metrics"][0]["loss"] is None


# ---------------------------------------------------------------- temp dirs of killed drivers


def test_a_later_run_removes_the_temp_dir_of_a_sigkilled_driver(tmp_path, monkeypatch):
    """A driver whose run dir is too long for Ray's socket paths keeps Ray's files in
    /tmp/gcray-*; SIGKILLed, it cannot remove them, and Ray's agents would outlive it but for its
    watchdog, which stops every process of that cluster. The next local start (init_ray; its ray.init
    is stubbed here, this session's Ray already runs) removes the folders whose driver is dead,
    keeping their logs in the dead run's run_dir/ray/logs, and leaves alone those of live drivers
    (here: this process's own)."""
    from gradcode.runtime import cluster as eng

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
    # Ray's agents outlive their driver; its watchdog stops them (Linux) within seconds
    if os.path.isdir("/proc"):
        from gradcode.runtime.watchdog import session_processes

        deadline = time.monotonic() + 20
        while session_processes(dead) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert session_processes(dead) == []
    monkeypatch.setattr(eng.ray, "init", lambda **kw: None)
    mine = eng.init_ray(num_cpus=1, run_dir=tmp_path / ("another-long-run-directory-" * 3))  # a later run
    try:
        assert mine.startswith("/tmp/gcray-") and not os.path.exists(dead)
        assert any((run_dir / "ray" / "logs").iterdir())
        assert mine not in eng.reap_dead_temp_dirs() and os.path.isdir(mine)  # its driver (we) is alive
    finally:
        eng.retire_temp_dir(mine, None)
    assert not os.path.exists(mine)


# ---------------------------------------------------------------- a corrupted worker


def test_verify_names_and_excludes_a_corrupted_worker(ray_session, tmp_path):
    """crc n = 6, s = 2: worker 1's gradient is 1000 everywhere (finite and wrong). A plain run
    trains on the corrupted gradients; with verify the rounds wait for two spare results, name
    worker 1, decode without it and reach the single-process GD iterates exactly."""
    code = make_code("crc", n=6, s=2, seed=SEED)
    # workers 4 and 5 are slow, so a plain round closes with workers 0-3, the corrupted one among them
    kwargs = dict(workers=6, stragglers=2, data=PoisonedWorker(code.placement[1], 1000.0), rounds=3,
                  delay_model=delays(3, 6, (4, 5), 0.5), optimizer_params={"lr": 0.5}, seed=SEED,
                  eval_every=0, round_timeout=30)
    plain = train_options("crc", run_dir=tmp_path / "plain", **kwargs)
    assert rel(plain.final_params, reference(3)) > 1e-3
    checked = train_options("crc", run_dir=tmp_path / "checked", verify=True, **kwargs)
    assert rel(checked.final_params, reference(3)) < 1e-9
    assert (checked.arrivals[:, 1] == -1).all()
    assert [(f["round"], f["worker"], f["kind"]) for f in checked.failures] == [(t, 1, "dropped") for t in range(3)]


def test_verify_is_for_codes():
    from gradcode.runtime import build_scheme

    with pytest.raises(ValueError, match="verify applies to codes"):
        build_scheme("gc-dc", workers=8, scheme_params=dict(clusters=2, r=2), verify=True)
    assert build_scheme("crc", workers=6, stragglers=2, verify=True).verify


def test_a_live_cluster_is_not_lost(ray_session):
    from gradcode.runtime.engine import RayEngine

    assert RayEngine().lost() is None
