"""The Ray runtime: exactness against single-process GD, failures, checkpoints, multi-model.

All Ray tests share one session (``ray_session`` in conftest.py, 2 CPUs); each run uses n = 4
workers and a small data set, so a run takes a few seconds. No timing assertions: injected delays
only decide who straggles, and every assertion is on values (parameters, records, errors).
"""

import json
import os
import time

import numpy as np
import pytest

from gradcode.codes import make_code
from gradcode.problems import DataSpec, make_dataset, make_problem
from gradcode.runtime import RoundTimeoutError, WireTask, WorkerCore, parse_failures
from runtime_util import REGISTRY_PARAMS, SkipsWorkers, SplitJobs, TwoMessages, gd_reference, rel, train_options

try:  # workers cannot import this test module: ship its classes (problem specs) by value
    import sys

    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
except ImportError:
    pass

DATA = {"n_samples": 400, "n_features": 6}
SEED = 3


def reference(rounds, *, lr=0.5, optimizer="gd", steps=None):
    """Single-process full-gradient descent on the same data: the target of exact codes."""
    return gd_reference(DATA, SEED, rounds if steps is None else steps, lr=lr, optimizer=optimizer)


def run(tmp_path, name="run", **kw):
    kw.setdefault("workers", 4)
    kw.setdefault("rounds", 6)
    kw.setdefault("optimizer_params", {"lr": 0.5})
    return train_options(data="tandon-synthetic", data_params=DATA, seed=SEED, run_dir=tmp_path / name,
                 eval_every=0, **kw)


# ---------------------------------------------------------------------------- engine-free parts


def test_worker_core_messages_equal_code_encode():
    """The generic worker sends exactly code.encode's messages (single and multi-chunk codes)."""
    ds = make_dataset(DataSpec("tandon-synthetic", DATA, seed=SEED))
    problem = make_problem("logistic", ds)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(problem.dim)
    for code in (make_code("crc", n=4, s=1, seed=0), make_code("partial", n=4, s=1, alpha=2.0)):
        from gradcode.problems import partition_rows

        rows = partition_rows(problem.n_train, code.partition_sizes)
        for w in range(code.n):
            core = WorkerCore(w, problem, {j: rows[j] for j in code.placement[w]}, code.chunks)
            task = WireTask(0, code.placement[w], code.encoders[w], 0)
            got = np.stack(list(core.run(0, [task], [x])))
            partials = np.stack([problem.gradient(x, rows[j]) for j in code.placement[w]])
            np.testing.assert_allclose(got, code.encode(w, partials), rtol=1e-12, atol=1e-12)


def test_worker_core_tasks_of_several_jobs_in_one_round():
    """A round may carry tasks of several jobs (SR-SGC/M-SGC, multi-model): each task uses the
    parameters of its own slot, and messages come in plan order."""
    ds = make_dataset(DataSpec("tandon-synthetic", DATA, seed=SEED))
    problem = make_problem("logistic", ds)
    rows = {0: np.arange(0, 50), 1: np.arange(50, 120)}
    core = WorkerCore(0, problem, rows)
    x0, x1 = np.zeros(problem.dim), np.full(problem.dim, 0.1)
    tasks = [WireTask(5, (0, 1), np.array([[[1.0], [2.0]]]), 1), WireTask(6, (1,), np.array([[[1.0]], [[3.0]]]), 0)]
    got = list(core.run(0, tasks, [x0, x1]))
    g = {(j, k): problem.gradient(x, rows[j]) for j in rows for k, x in enumerate((x0, x1))}
    np.testing.assert_allclose(got[0], g[0, 1] + 2 * g[1, 1])
    np.testing.assert_allclose(got[1], g[1, 0])
    np.testing.assert_allclose(got[2], 3 * g[1, 0])


def test_worker_core_sends_a_unit_single_chunk_message_uncopied_and_later_messages_unchanged():
    """A message that is one partial chunk with coefficient 1 is that chunk (no copy); the
    messages after it in the same task, which reuse the partial, do not write into it."""
    ds = make_dataset(DataSpec("tandon-synthetic", DATA, seed=SEED))
    problem = make_problem("logistic", ds)
    rows = {0: np.arange(0, 50), 1: np.arange(50, 120)}
    core = WorkerCore(0, problem, rows, chunks=2)
    x = np.full(problem.dim, 0.1)
    E = np.array([[[1.0, 0.0], [0.0, 0.0]], [[2.0, 1.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 0.0]]])
    first, second, third = core.run(0, [WireTask(0, (0, 1), E, 0)], [x])
    m = -(-problem.dim // 2)
    g0, g1 = (np.pad(problem.gradient(x, rows[j]), (0, 2 * m - problem.dim)).reshape(2, m) for j in (0, 1))
    np.testing.assert_array_equal(first, g0[0])
    np.testing.assert_array_equal(third, g0[0])
    assert np.shares_memory(first, third)  # both the partial's chunk itself
    np.testing.assert_allclose(second, 2 * g0[0] + g0[1] + g1[1])
    assert not np.shares_memory(second, first)


def test_worker_core_abort_stops_injected_sleep_and_refuses_unknown_partition():
    ds = make_dataset(DataSpec("tandon-synthetic", DATA, seed=SEED))
    problem = make_problem("logistic", ds)
    core = WorkerCore(0, problem, {0: np.arange(10)})
    core.abort(3)
    task = WireTask(3, (0,), np.ones((1, 1, 1)), 0)
    assert list(core.run(3, [task], [np.zeros(problem.dim)], sleeps=[100.0])) == []
    with pytest.raises(ValueError, match="partition 7"):
        list(core.run(4, [WireTask(4, (7,), np.ones((1, 1, 1)), 0)], [np.zeros(problem.dim)]))


@pytest.mark.parametrize("data, problem", [("tandon-synthetic", "logistic"), ("digits", "softmax")])
def test_problem_spec_keeps_only_the_partition_rows(data, problem):
    """A worker's problem holds only its partitions' rows (no held-out split) and gives the same
    partial gradients as the full problem; softmax keeps all classes (same dim) though a
    worker's rows may miss some."""
    from gradcode.problems import partition_rows
    from gradcode.runtime import ProblemSpec

    spec = ProblemSpec(DataSpec(data, DATA if data == "tandon-synthetic" else {}, seed=SEED), problem)
    full, ds = spec.build()
    rows = partition_rows(ds.n_train, np.full(8, 1 / 8))
    part, local = spec.build_partitions({2: rows[2], 5: rows[5]})
    assert (part.dataset.n_train, part.dataset.n_test) == (rows[2].size + rows[5].size, 0)
    assert part.dim == full.dim
    x = np.random.default_rng(0).standard_normal(full.dim) * 0.1
    for j in (2, 5):
        np.testing.assert_allclose(part.gradient(x, local[j]), full.gradient(x, rows[j]), rtol=1e-13, atol=1e-13)


def test_parse_failures_validates():
    assert parse_failures(["1@2", (0, 3)], n=4, rounds=5) == {(1, 2), (0, 3)}
    with pytest.raises(ValueError, match="W@R"):
        parse_failures(["1-2"], n=4, rounds=5)
    with pytest.raises(ValueError, match="fail worker"):
        parse_failures(["9@1"], n=4, rounds=5)
    with pytest.raises(ValueError, match="fail round"):
        parse_failures(["1@9"], n=4, rounds=5)


# ---------------------------------------------------------------------------- Ray


@pytest.mark.parametrize(
    "code, kw",
    [
        ("crc", {"stragglers": 1, "delay": 0.2}),  # one injected straggler per round: tolerated
        ("frc", {"stragglers": 1, "delay": 0.2}),
        ("partial", {"scheme_params": {"s": 1, "alpha": 2.0}}),  # two messages per worker, streamed
    ],
)
def test_exact_codes_match_single_process_gd(ray_session, tmp_path, code, kw):
    res = run(tmp_path, scheme=code, **kw)
    assert rel(res.final_params, reference(6)) < 1e-9
    assert res.arrivals.shape == (6, 4) and res.round_times.shape == (6,)
    assert [m["round"] for m in res.metrics] == [5]  # eval_every=0: held-out metrics at the end only
    assert 0.5 <= res.metrics[0]["accuracy"] <= 1.0
    if "delay" in kw:  # a round closes without its delayed worker (0.2 s against ms of compute)
        left_out = res.arrivals[res.injected > 0] < 0
        assert left_out.size == 6 and left_out.mean() >= 0.5
    if "delay" in kw:  # the injected draw is the simulator's: fixed model, base 0, default_rng(seed)
        from gradcode.stragglers import make_delay_model

        want = make_delay_model("fixed", stragglers=1, delay=0.2, base=0.0).sample(6, 4, np.random.default_rng(SEED))
        np.testing.assert_array_equal(res.injected, want)
    # records on disk: JSON + arrays, and a trace the simulator's reader accepts
    doc = json.loads((tmp_path / "run" / "result.json").read_text())
    assert doc["rounds"] == 6 and len(doc["arrivals"]) == 6
    from gradcode.stragglers import load_trace

    assert load_trace(tmp_path / "run" / "trace.npy", workers=4).shape == (6, 4)
    np.testing.assert_array_equal(np.load(tmp_path / "run" / "arrivals.npy"), res.arrivals)


def _registry_codes():
    from gradcode.codes import available_codes

    return available_codes()


@pytest.mark.parametrize("name", _registry_codes())
def test_every_exact_registered_code_trains_exactly(ray_session, tmp_path, name):
    """Every exact code of the registry (chunked, multi-message and single-message) trains to the
    single-process GD iterates, with one injected straggler per round."""
    if name not in REGISTRY_PARAMS:
        pytest.fail(f"no runtime parameters for code {name!r}: add them to REGISTRY_PARAMS")
    if not make_code(name, **REGISTRY_PARAMS[name]).exact:
        pytest.skip(f"{name} is not exact")
    res = run(tmp_path, scheme=name, scheme_params=REGISTRY_PARAMS[name], rounds=3, stragglers=1, delay=0.05)
    assert rel(res.final_params, reference(3)) < 1e-9


def test_closed_round_aborts_its_delayed_worker_which_serves_the_next_round(ray_session, tmp_path):
    """Worker 0 sleeps 30 s in round 0, worker 1 in round 1 (a trace delay model). crc with s = 1
    closes round 0 without worker 0 and aborts it, so worker 0 is free and delivers in round 1,
    which cannot decode without it (worker 1 is delayed there). Without cancellation worker 0 would
    stay busy for 30 s and round 1 would time out."""
    delays = np.zeros((2, 4))
    delays[0, 0] = delays[1, 1] = 30.0
    res = run(tmp_path, scheme="crc", stragglers=1, rounds=2, delay_model="trace", delay_params={"delays": delays},
              round_timeout=10.0)
    np.testing.assert_array_equal(res.injected, delays)
    assert res.arrivals[0, 0] < 0 and res.arrivals[1, 1] < 0  # the delayed workers were left out
    assert res.arrivals[1, 0] >= 0 and res.messages[1, 0] == 1  # the aborted worker came back
    assert rel(res.final_params, reference(2)) < 1e-9


def test_failures_tolerated_waited_for_and_workers_come_back(ray_session, tmp_path):
    """Round 1 loses two workers (more than s = 1: the master waits for Ray to restart them);
    round 5 loses one (tolerated). The result is still exact and the dead workers deliver again.

    Each death is one fault (the tasks sent to a worker while Ray restarts it
    fail too, and used to count as more failures, 3 kills giving up to 6 records): three records,
    with their round and how the round got over them, and the CLI's "faults" column says 3."""
    from gradcode.experiments.cli_train import summary_rows

    res = run(tmp_path, scheme="crc", stragglers=1, rounds=9, fail=["1@1", "2@1", "3@5"])
    assert rel(res.final_params, reference(9)) < 1e-9
    # recorded when sent, one per death; a worker still busy with an aborted round when its planned
    # round starts gets the failure on its next task (round > planned_round)
    faults = sorted(res.failures, key=lambda f: (f["planned_round"], f["worker"]))
    assert [(f["worker"], f["planned_round"], f["kind"], f["injected"]) for f in faults] == [
        (1, 1, "died", True), (2, 1, "died", True), (3, 5, "died", True)]
    assert all(f["round"] >= f["planned_round"] for f in faults)
    assert res.faults == res.failures and summary_rows(res)[0]["faults"] == 3
    recovered = {f["worker"]: f["recovery"] for f in faults}
    assert recovered[3] == "tolerated"  # its round decoded without worker 3
    assert set((recovered[1], recovered[2])) <= {"resent", "tolerated"}
    if faults[0]["round"] == faults[1]["round"]:  # two deaths in one round, s = 1: one was re-sent
        assert "resent" in (recovered[1], recovered[2])
        assert all(f["failed_tasks"] >= 1 for f in faults[:2])  # Ray reported both while it waited
    for f in faults[:2]:
        if f["recovery"] == "resent":
            assert f["back_in_round"] == f["round"] and f["resends"] >= 1 and res.arrivals[f["round"], f["worker"]] >= 0
    assert res.arrivals[5, 3] < 0 and res.messages[5, 3] == 0  # round 5 closed without worker 3
    assert (res.arrivals[2:, 1] >= 0).any() and (res.arrivals[2:, 2] >= 0).any()


def test_a_failure_planned_while_the_worker_has_no_task_fires_on_its_next_one(ray_session, tmp_path):
    """Worker 3 gets no task in round 1 (as when it is busy all round): its planned failure 3@1
    fires in round 2 instead of silently never. Worker 1 gets no task in the last round: its
    planned failure 1@2 is recorded as not fired."""
    res = run(tmp_path, scheme=SkipsWorkers(4, {1: (3,), 2: (1,)}), rounds=3, fail=["3@1", "1@2"], round_timeout=30)
    rec = {(f["worker"], f["planned_round"]): f for f in res.failures if f["injected"]}
    assert (rec[3, 1]["round"], rec[3, 1]["fired"]) == (2, True)
    assert rec[1, 2]["fired"] is False
    assert res.arrivals[2, 3] >= 0  # re-sent once Ray restarted it
    assert res.messages[1, 3] == 0


def test_too_many_failures_without_restarts_stop_with_clear_error(ray_session, tmp_path):
    with pytest.raises(RoundTimeoutError, match=r"round 1 could not be decoded.*held up by workers \[1, 2\]: worker 1:"
                                              r" its process died in round 1 .*Ray does not restart it"):
        run(tmp_path, scheme="crc", stragglers=1, rounds=4, fail=["1@1", "2@1"], max_restarts=0, round_timeout=3.0)


def test_checkpoint_and_resume_reach_the_same_result(ray_session, tmp_path):
    class Interrupt(Exception):
        pass

    def stop_at_3(record):
        if record["round"] == 3:
            raise Interrupt

    with pytest.raises(Interrupt):
        run(tmp_path, scheme="crc", stragglers=1, delay=0.1, checkpoint_every=2, callback=stop_at_3)
    res = run(tmp_path, scheme="crc", stragglers=1, delay=0.1, checkpoint_every=2, resume=True)
    assert res.resumed_from == 4
    assert rel(res.final_params, reference(6)) < 1e-9
    assert not np.isnan(res.losses).any() and (res.round_times > 0).all()
    with pytest.raises(ValueError, match="rounds must be at least"):
        run(tmp_path, scheme="crc", stragglers=1, delay=0.1, checkpoint_every=2, resume=True, rounds=3)
    # a finished run is extended to more rounds: it goes on from its last checkpoint
    longer = run(tmp_path, scheme="crc", stragglers=1, delay=0.1, checkpoint_every=2, resume=True, rounds=8)
    assert longer.resumed_from == 6 and longer.losses.shape[0] == 8
    assert rel(longer.final_params, reference(8)) < 1e-9


def test_a_run_dir_holding_a_run_is_refused_unless_resumed_or_overwritten(ray_session, tmp_path):
    from gradcode.runtime import RunDirInUseError

    run(tmp_path, scheme="crc", stragglers=1, rounds=2, checkpoint_every=2)
    with pytest.raises(RunDirInUseError, match="already holds a run .*checkpoint.json.*--resume.*--overwrite"):
        run(tmp_path, scheme="crc", stragglers=1, rounds=2)
    res = run(tmp_path, scheme="crc", stragglers=1, rounds=2, overwrite=True)  # no checkpoint this time
    assert not list((tmp_path / "run").glob("checkpoint*"))  # the old run's checkpoint is gone
    assert rel(res.final_params, reference(2)) < 1e-9
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        run(tmp_path, name="afile", scheme="crc", rounds=1)


def test_resume_refuses_another_code_configuration(ray_session, tmp_path):
    """The checkpoint of a partial code with alpha = 2 does not resume a run with alpha = 3 (same
    code name: only scheme_params and the scheme differ)."""
    kw = dict(scheme="partial", rounds=2, checkpoint_every=2)
    run(tmp_path, scheme_params={"s": 1, "alpha": 2.0}, **kw)
    with pytest.raises(ValueError, match=r"differs from the checkpoint's \(scheme_params: "):
        run(tmp_path, scheme_params={"s": 1, "alpha": 3.0}, resume=True, **kw)
    assert run(tmp_path, scheme_params={"s": 1, "alpha": 2.0}, resume=True, **kw).resumed_from == 2


def test_multi_model_round_j_serves_model_j_mod_m(ray_session, tmp_path):
    res = run(tmp_path, scheme="crc", stragglers=1, models=2, rounds=6,
              optimizer_params=[{"lr": 0.5}, {"lr": 1.0}])
    assert len(res.params) == 2 and res.losses.shape == (6, 2)
    assert rel(res.params[0], reference(0, lr=0.5, steps=3)) < 1e-9
    assert rel(res.params[1], reference(0, lr=1.0, steps=3)) < 1e-9


class BrokenOnWorkers:
    """Builds the problem in the master's process only: every worker's __init__ fails."""

    def __init__(self):
        import os

        self.pid = os.getpid()

    def build(self):
        import os

        if os.getpid() != self.pid:
            raise RuntimeError("no data on this node")
        ds = make_dataset(DataSpec("tandon-synthetic", DATA, seed=SEED))
        return make_problem("logistic", ds), ds


def test_ray_workers_keep_only_their_partitions(ray_session):
    from gradcode.problems import partition_rows
    from gradcode.runtime import ProblemSpec
    from gradcode.runtime.engine import RayEngine

    spec = ProblemSpec(DataSpec("tandon-synthetic", DATA, seed=SEED), "logistic")
    rows = partition_rows(320, np.full(4, 1 / 4))  # 400 samples, 20% held out
    engine = RayEngine()
    try:
        engine.spawn([(spec, {0: rows[0], 1: rows[1]}, 1), (spec, {3: rows[3]}, 1)], max_restarts=0)
        assert engine.rows_held() == [(160, 0), (80, 0)]
    finally:
        engine.shutdown()


def test_the_embedded_clusters_workers_run_at_the_drivers_priority(ray_session):
    """Ray lowers its workers to niceness 15, which starved them beside any other load (a fit's
    workers did not start within 120 s beside two busy loops); init_ray keeps them at the driver's."""

    @ray_session.remote(num_cpus=0)
    def niceness():
        return os.nice(0)

    assert ray_session.get(niceness.remote()) == os.nice(0)


def test_ignored_engine_options_are_warned_about(ray_session, monkeypatch):
    """Settings the embedded cluster cannot take while another run uses it are ignored, with a
    warning; its shutdown is refused meanwhile."""
    from gradcode.errors import GradcodeError
    from gradcode.runtime import cluster
    from gradcode.runtime.engine import RayEngine

    user = RayEngine()
    try:
        with pytest.warns(cluster.IgnoredOptionWarning, match=r"num_cpus=3 ignored: this process's embedded Ray"
                                                              r" cluster, with 2 CPUs, is in use by another run"):
            RayEngine(num_cpus=3).shutdown()
        with pytest.warns(cluster.IgnoredOptionWarning, match=r"address='auto' ignored: Ray is already running"):
            joined = RayEngine(address="auto")
        assert joined.connection == "running" and ray_session.is_initialized()
        joined.shutdown()
        with pytest.raises(GradcodeError, match="a run still uses Ray"):
            cluster.shutdown()
    finally:
        user.shutdown()
    seen = {}
    monkeypatch.setattr(cluster.ray, "init", lambda **kw: seen.update(kw))
    with pytest.warns(cluster.IgnoredOptionWarning, match=r"num_cpus=2 is ignored: joining the cluster at 'auto'"):
        cluster.init_ray(address="auto", num_cpus=2)
    assert seen["address"] == "auto" and "num_cpus" not in seen


class _FakeRay:
    """What :mod:`gradcode.runtime.cluster` asks of Ray, for a cluster that is not started."""

    def __init__(self):
        self.up, self.inits, self.shutdowns = True, [], 0

    def is_initialized(self):
        return self.up

    def init(self, **kw):
        self.up = True
        self.inits.append(kw)

    def shutdown(self):
        self.up = False
        self.shutdowns += 1

    def cluster_resources(self):
        return {"CPU": float(self.inits[-1]["num_cpus"] or 2) if self.inits else 2.0}

    def get_runtime_context(self):
        raise RuntimeError("no head node to look at")


def test_the_embedded_cluster_is_kept_restarted_for_other_cpus_and_left_for_an_address(monkeypatch, tmp_path):
    """The process's embedded cluster serves every later run that asks for no other CPUs; asked
    for other CPUs while no run uses it, it is started again, saying why; a run that names an
    address leaves it for that cluster (never stopping the cluster it joins: it only disconnects).
    On a stand-in for Ray, so that nothing is started."""
    from gradcode.runtime import cluster

    fake = _FakeRay()
    monkeypatch.setattr(cluster, "ray", fake)
    monkeypatch.setattr(cluster, "session", {})
    monkeypatch.setattr(cluster, "_users", __import__("weakref").WeakSet())
    monkeypatch.setattr(cluster, "wait_for_address", lambda address, timeout: None)
    monkeypatch.setattr(cluster.watchdog, "start", lambda temp_dir: None)
    fake.up = False
    try:
        assert cluster.connect(num_cpus=2, run_dir=tmp_path / "a") == "embedded" and len(fake.inits) == 1
        first = cluster.session["embedded"]["temp_dir"]
        assert first.startswith("/tmp/gcray-") and os.path.isdir(first)  # not under the run's folder
        assert cluster.connect(run_dir=tmp_path / "b") == "embedded" and cluster.connect(num_cpus=2) == "embedded"
        assert len(fake.inits) == 1 and cluster.session["embedded"]["run_dir"] == str(tmp_path / "b")
        with pytest.warns(cluster.ClusterRestartWarning, match="has 2 CPUs, so it is started again"):
            assert cluster.connect(num_cpus=3) == "embedded"
        assert len(fake.inits) == 2 and fake.inits[-1]["num_cpus"] == 3 and fake.shutdowns == 1
        assert not os.path.exists(first)  # the first cluster's files went with it
        assert cluster.connect("host:6379") == "joined" and "embedded" not in cluster.session
        assert fake.inits[-1]["address"] == "host:6379" and fake.shutdowns == 2
        cluster.disconnect(None, "joined")
        assert fake.shutdowns == 3 and not fake.up  # left: ray.shutdown() ends this process's session only
    finally:
        if "embedded" in cluster.session:
            cluster.retire_temp_dir(cluster.session["embedded"]["temp_dir"], None)


def test_a_ray_the_user_started_again_is_used_as_theirs_not_taken_for_the_embedded_cluster(monkeypatch, tmp_path):
    """After ``ray.shutdown(); ray.init()`` by the user, the embedded cluster gradcode kept is gone:
    its pool and files are forgotten (its workers belonged to the other cluster), the user's
    session is used as it is ("running") and gradcode never shuts it down."""
    import types

    from gradcode.runtime import cluster

    fake = _FakeRay()
    fake.gcs = "10.0.0.1:6379"
    fake.get_runtime_context = lambda: types.SimpleNamespace(gcs_address=fake.gcs)
    monkeypatch.setattr(cluster, "ray", fake)
    monkeypatch.setattr(cluster, "session", {})
    monkeypatch.setattr(cluster, "_users", __import__("weakref").WeakSet())
    monkeypatch.setattr(cluster, "_head_answers", lambda: True)
    monkeypatch.setattr(cluster.watchdog, "start", lambda temp_dir: None)
    fake.up = False
    assert cluster.connect(num_cpus=2, run_dir=tmp_path / "a") == "embedded"
    first = cluster.session["embedded"]["temp_dir"]
    cluster.session["pool"][(True, 0, 0)] = ["an actor of the first cluster"]
    fake.shutdown()  # the user's own restart
    fake.init(num_cpus=2)
    fake.gcs = "10.0.0.1:6380"
    assert cluster.connect(run_dir=tmp_path / "b") == "running"
    assert "embedded" not in cluster.session and "pool" not in cluster.session and not os.path.exists(first)
    assert fake.up and fake.shutdowns == 1  # only the user's own shutdown
    cluster.shutdown()
    assert fake.up  # not gradcode's to stop


def test_runs_in_one_ray_session_share_their_workers_and_train_as_alone(ray_session, tmp_path):
    """gradcode train --scheme A,B: a run takes over the previous one's worker processes (reset,
    not restarted), and a reused worker that dies is restarted by Ray with the constructor
    arguments of the run that created it (here: other data), so it is reset before its next
    task: uncoded waits for the dead worker and still reaches single-process GD's iterates."""
    from gradcode.runtime import TrainSpec
    from gradcode.runtime.engine import RayEngine
    from gradcode.runtime.cluster import ray_session as shared
    from gradcode.runtime.setup import prepare

    def planned(code, data):  # the workers' specs and each one's (training rows, held-out rows)
        specs = prepare(TrainSpec(code, workers=4, stragglers=1, data_params=data), rounds=1).worker_specs()
        return specs, [(sum(len(r) for r in parts.values()), 0) for _, parts, _ in specs]

    with shared():
        import ray

        from gradcode.runtime.cluster import session

        # idle workers earlier tests left would be taken first (the pool is first in, first out)
        for key in [(True, 0, 0), (False, 0, 0)]:
            for actor, _ in session.get("pool", {}).pop(key, []):
                ray.kill(actor, no_restart=True)
        first = RayEngine()
        specs, rows = planned("uncoded", {"n_samples": 200, "n_features": 6})
        first.spawn(specs)
        pids = first.pids()
        assert first.rows_held() == rows
        # one malloc arena for the workers' threads: glibc reads it from the environment only
        env = ray.get([a.__ray_call__.remote(lambda self: os.environ.get("MALLOC_ARENA_MAX")) for a in first.actors])
        assert env == ["1"] * 4
        first.shutdown()
        second = RayEngine()
        specs, rows = planned("crc", DATA)
        second.spawn(specs)
        assert second.pids() == pids and second.rows_held() == rows
        second.shutdown()
        # Ray counts an actor's restarts over its life: a run with a restart limit gets its own
        limited = RayEngine()
        limited.spawn(specs, max_restarts=0)
        assert not set(limited.pids()) & set(pids)
        limited.shutdown()
        # a run that injects no delays gets synchronous workers, pooled apart from the async ones
        plain = RayEngine()
        plain.spawn(specs, interruptible=False)
        plain_pids = plain.pids()
        assert not set(plain_pids) & set(pids)
        plain.shutdown()
        results = [run(tmp_path, code, scheme=code, stragglers=1, delay=0.05, fail=["1@1"])
                   for code in ("uncoded", "crc")]
        # reused synchronous workers, one of which dies: restarted with crc's data, reset before its task
        results.append(run(tmp_path, "plain", scheme="uncoded", stragglers=1, fail=["1@1"]))
        again = RayEngine()
        again.spawn(specs, interruptible=False)
        after = again.pids()
        again.shutdown()
        assert after[0] == plain_pids[0] and after[1] != plain_pids[1]  # the run's workers, 1 restarted
    ref = reference(6)
    for res in results:
        assert [(f["worker"], f["round"]) for f in res.faults if f["kind"] == "died"] == [(1, 1)]
        assert rel(res.params[0], ref) < 1e-10
    assert results[0].faults[0]["recovery"] == "resent"  # uncoded waited: worker 1 computed again


def test_workers_that_cannot_start_give_a_clear_error(ray_session, tmp_path):
    from gradcode.errors import GradcodeError

    with pytest.raises(GradcodeError, match="(?s)workers could not start.*no data on this node"):
        train_options("crc", workers=4, stragglers=1, data=BrokenOnWorkers(), rounds=2, run_dir=tmp_path / "r",
              max_restarts=0)


class SlowOnWorkers(BrokenOnWorkers):
    """Builds at once in the master's process, in 30 s on workers."""

    def build(self):
        import os

        if os.getpid() != self.pid:
            time.sleep(30)
        return super().build()


def test_workers_that_do_not_start_in_time_give_a_clear_error(ray_session, tmp_path):
    from gradcode.errors import GradcodeError

    with pytest.raises(GradcodeError, match=r"workers did not start within 0.5 s"):
        train_options("crc", workers=4, stragglers=1, data=SlowOnWorkers(), rounds=2, run_dir=tmp_path / "r",
              start_timeout=0.5)


def test_bad_arguments_are_refused_before_starting(ray_session, tmp_path):
    with pytest.raises(ValueError, match="unknown code"):
        run(tmp_path, scheme="nope")
    with pytest.raises(ValueError, match="one per model"):
        run(tmp_path, scheme="crc", stragglers=1, models=2, optimizer_params=[{"lr": 0.1}])
    with pytest.raises(FileNotFoundError, match="checkpoint"):
        run(tmp_path, name="fresh", scheme="crc", stragglers=1, resume=True)
    with pytest.raises(ValueError, match="resume=True needs run_dir"):
        train_options("crc", workers=4, stragglers=1, resume=True)


def test_rounds_carrying_tasks_of_two_jobs_train_two_models_exactly(ray_session, tmp_path):
    res = run(tmp_path, scheme=SplitJobs(4), models=2, rounds=5, optimizer_params=[{"lr": 0.5}, {"lr": 1.0}])
    # jobs 0..3 finish (in rounds 1..4): model 0 gets jobs 0 and 2, model 1 gets jobs 1 and 3
    assert rel(res.params[0], reference(0, lr=0.5, steps=2)) < 1e-9
    assert rel(res.params[1], reference(0, lr=1.0, steps=2)) < 1e-9
    assert (res.messages[1:] == 2).all()
    with pytest.raises(Exception, match="more models than the scheme's delay"):
        run(tmp_path, name="one", scheme=SplitJobs(4), models=1, rounds=3)


def test_a_scheme_whose_jobs_span_rounds_resumes_to_the_same_result(ray_session, tmp_path, monkeypatch):
    """Checkpoints hold the scheme (its state) and the parameters of jobs in flight: a delay-1 scheme
    interrupted after round 3 (job 3 half done) resumes and ends as the uninterrupted run."""
    from gradcode.runtime import safe_state, trust_modules

    monkeypatch.setattr(safe_state, "_TRUSTED", set(safe_state._TRUSTED))  # trusted for this test only
    trust_modules("runtime_util")  # the test's own scheme class

    class Interrupt(Exception):
        pass

    def stop_at_3(record):
        if record["round"] == 3:
            raise Interrupt

    kw = dict(models=2, rounds=5, optimizer_params=[{"lr": 0.5}, {"lr": 1.0}], checkpoint_every=2)
    with pytest.raises(Interrupt):
        run(tmp_path, scheme=SplitJobs(4), callback=stop_at_3, **kw)
    res = run(tmp_path, scheme=SplitJobs(4), resume=True, **kw)
    assert res.resumed_from == 4
    assert rel(res.params[0], reference(0, lr=0.5, steps=2)) < 1e-9
    assert rel(res.params[1], reference(0, lr=1.0, steps=2)) < 1e-9


def test_checkpoints_of_a_scheme_a_checkpoint_cannot_hold_are_refused_up_front(ray_session, tmp_path):
    import threading

    scheme = SplitJobs(4)
    scheme.lock = threading.Lock()
    with pytest.raises(ValueError, match="checkpoint_every needs a scheme that a checkpoint can hold"):
        run(tmp_path, scheme=scheme, models=2, checkpoint_every=2)


class AsksForWrongPartition(SplitJobs):
    """Plans tasks on partitions the workers do not store: the workers raise (a bug, not a
    straggler), and the master stops at once instead of retrying."""

    delay = 0

    def _plan(self, t):
        self.got[t] = {}
        return {w: (self.Task(t, ((2 * w + 2) % (2 * self.n),), np.ones((1, 1, 1))),) for w in range(self.n)}


def test_a_worker_exception_stops_the_run_with_its_message(ray_session, tmp_path):
    from gradcode.errors import GradcodeError

    with pytest.raises(GradcodeError, match="raised in round 0.*stores only"):
        run(tmp_path, scheme=AsksForWrongPartition(4), rounds=2)


def test_the_embedded_cluster_outlives_its_run_and_leaves_nothing_in_tmp_at_exit(tmp_path):
    """The embedded cluster a run starts keeps Ray's files in /tmp/gcray-* and stays up after the
    run for the next engine, which starts no Ray; at the interpreter's exit the folder is removed
    and Ray's logs are kept under the latest run's run_dir/ray/logs. (In a subprocess: this test
    session's Ray is already running.)"""
    import subprocess
    import sys

    first, latest = tmp_path / ("long-run-directory-name-" * 3), tmp_path / "b"
    latest.mkdir()  # as train() makes it before it starts Ray
    script = (
        "import os, ray\n"
        "from gradcode.runtime import cluster\n"
        "from gradcode.runtime.engine import RayEngine\n"
        f"e = RayEngine(num_cpus=1, run_dir={str(first)!r})\n"
        "d = e.temp_dir\n"
        "assert d.startswith('/tmp/gcray-') and os.path.isdir(d), d\n"
        "e.shutdown()\n"
        "assert ray.is_initialized() and os.path.isdir(d)\n"
        "starts = []\n"
        "cluster.init_ray = lambda **kw: starts.append(kw)\n"
        f"again = RayEngine(run_dir={str(latest)!r})\n"
        "assert again.connection == 'embedded' and again.temp_dir == d and starts == []\n"
        "again.shutdown()\n"
        "print(d)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert not os.path.exists(out.stdout.strip().splitlines()[-1])
    assert any((latest / "ray" / "logs").iterdir())


class _DiesOnce:
    """Wraps a problem: the process exits (after 1 s, so that the message before reaches the
    master) the second time it computes the partition starting at ``row``, unless ``marker``
    exists; it creates ``marker`` first, so the restarted worker carries on."""

    def __init__(self, inner, marker, row):
        self.inner, self.marker, self.row, self.calls = inner, marker, row, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def gradient(self, x, rows):
        if len(rows) and int(rows[0]) == self.row:
            self.calls += 1
            if self.calls == 2 and not os.path.exists(self.marker):
                open(self.marker, "w").close()
                time.sleep(1.0)
                os._exit(3)
        return self.inner.gradient(x, rows)


class DiesOnceMidStream:
    """Problem spec (``build()``) whose workers use :class:`_DiesOnce`."""

    def __init__(self, marker, row):
        self.marker, self.row = str(marker), int(row)

    def build(self):
        ds = make_dataset(DataSpec("tandon-synthetic", DATA, seed=SEED))
        return _DiesOnce(make_problem("logistic", ds), self.marker, self.row), ds


def test_a_task_resent_after_a_mid_stream_death_delivers_each_message_once(ray_session, tmp_path):
    """Worker 0 dies in round 1 after sending its first message; the round needs it, so its task
    is sent again once Ray restarted it. The scheme gets message (1, 0, 0) once, not twice."""
    from gradcode.problems import partition_rows

    scheme = TwoMessages(4)
    row = int(partition_rows(320, scheme.partition_sizes)[1][0])  # 400 samples, 20% held out
    spec = DiesOnceMidStream(tmp_path / "died", row)
    res = train_options(scheme, data=spec, rounds=3, optimizer_params={"lr": 0.5}, run_dir=tmp_path / "r",
                round_timeout=60, eval_every=0)
    assert (tmp_path / "died").exists()
    assert [(f["round"], f["worker"], f["injected"], f["recovery"]) for f in res.failures] == [(1, 0, False, "resent")]
    assert len(scheme.calls) == len(set(scheme.calls)) == 3 * 4 * 2
    assert res.messages[1, 0] == 2 and res.arrivals[1, 0] >= 0
    assert rel(res.final_params, reference(3)) < 1e-9


class _NoMetrics:
    """A problem without held-out metrics (only what training needs)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        if name == "metrics":
            raise AttributeError(name)
        return getattr(self.inner, name)


class NoMetricsSpec:
    def build(self):
        ds = make_dataset(DataSpec("tandon-synthetic", DATA, seed=SEED))
        return _NoMetrics(make_problem("logistic", ds)), ds


def test_a_problem_without_metrics_trains_and_records_none(ray_session, tmp_path):
    res = train_options("uncoded", workers=4, data=NoMetricsSpec(), rounds=2, optimizer_params={"lr": 0.5},
                run_dir=tmp_path / "r", eval_every=0)
    assert res.metrics == [] and rel(res.final_params, reference(2)) < 1e-9


def test_agc_arrival_table_marks_only_the_delayed_workers(ray_session, tmp_path):
    """agc(n=4, d=3, L=2) under a ``fixed`` model: one worker per round delayed 30 s, each message
    taking comm/L = 1.5 s on the link. Message 0 of the three others decodes (s = 1, r_1 =
    ceil(2/2) = 1), so the master stops them before their message 1: only the delayed worker is a
    straggler (the whole-result rule marked all four), the others' arrivals are their message 0,
    and the straggler matrix is the simulator's for the same model and seed."""
    import gradcode
    from gradcode.stragglers import make_delay_model

    params = {"stragglers": 1, "delay": 30.0, "base": 0.0, "comm": 3.0}
    res = run(tmp_path, scheme="agc", scheme_params={"n": 4, "d": 3, "L": 2}, rounds=3,
              delay_model="fixed", delay_params=params, round_timeout=20.0)
    delayed = res.injected > 10
    assert delayed.sum(axis=1).tolist() == [1, 1, 1]
    np.testing.assert_array_equal(res.arrivals < 0, delayed)
    assert (res.arrivals[~delayed] >= 1.5).all()  # message 0 is injected to arrive at 1.5 s
    assert (res.messages[~delayed] >= 1).all()
    assert rel(res.final_params, reference(3)) < 1e-9
    sim = gradcode.simulate(make_code("agc", n=4, d=3, L=2, seed=SEED), make_delay_model("fixed", **params), 3,
                            seed=SEED)
    np.testing.assert_array_equal(sim.stragglers, delayed)
    np.testing.assert_array_equal(sim.arrivals[~delayed], np.full(9, 1.5))


@pytest.mark.parametrize("name,params,steps", [
    # M-SGC: T = W - 2 + B = 1 and job t always finishes in round t + 1: jobs 0..4 in 6 rounds
    ("m-sgc", dict(B=1, W=2, lam=1), (3, 2)),
    # SR-SGC: s = ceil(B lam / (W - 1 + B)) = 1 straggler a round is absorbed in the job's own
    # round, so jobs 0..5 finish (re-attempts only after a burst beyond s)
    ("sr-sgc", dict(B=1, W=2, lam=1), (3, 3)),
])
def test_sequential_codes_train_several_models_exactly(ray_session, tmp_path, name, params, steps):
    """SGC App. I: job j trains model j mod M (M = 2 models, delay T = 1), with one injected
    straggler a round; every model reaches the single-process GD iterates of its jobs."""
    from gradcode.schemes import make_scheme

    assert make_scheme(name, n=4, **params).delay == 1
    res = run(tmp_path, scheme=name, scheme_params=params, models=2, rounds=6, stragglers=1, delay=0.05)
    for m, k in enumerate(steps):
        assert rel(res.params[m], reference(0, steps=k)) < 1e-9


def test_workers_keep_freed_memory_on_linux_with_glibc():
    """A Ray worker process keeps freed memory in its heap (each round's large arrays are not
    page-faulted in anew): the call applies where glibc is, and changes nothing elsewhere. Run in
    a process of its own, as a worker runs it (never in the user's process)."""
    import platform
    import subprocess
    import sys

    code = ("import numpy as np; from gradcode.runtime.worker import keep_freed_memory;"
            " ok = keep_freed_memory(); a = np.ones(1 << 23); del a; b = np.zeros(1 << 23); print(ok, b.sum())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    glibc = sys.platform == "linux" and platform.libc_ver()[0] == "glibc"
    assert out == [str(glibc), "0.0"]  # and a reused block still reads as fresh zeros (calloc's contract)
    if not glibc:
        return
    # where a 64 MiB array lives: glibc's count of bytes in mmap-ed blocks (mallinfo2, glibc >= 2.33)
    probe = ("import ctypes, sys, numpy as np\n"
             "class Info(ctypes.Structure):\n"
             "    _fields_ = [(k, ctypes.c_size_t) for k in ('arena', 'ordblks', 'smblks', 'hblks', 'hblkhd',"
             " 'usmblks', 'fsmblks', 'uordblks', 'fordblks', 'keepcost')]\n"
             "libc = ctypes.CDLL('libc.so.6')\n"
             "if not hasattr(libc, 'mallinfo2'): print(-1); sys.exit()\n"
             "libc.mallinfo2.restype = Info\n"
             "if sys.argv[1] == 'keep':\n"
             "    from gradcode.runtime.worker import keep_freed_memory; keep_freed_memory()\n"
             "a = np.ones(1 << 23)\n"
             "print(libc.mallinfo2().hblkhd)\n")
    mapped = {how: int(subprocess.run([sys.executable, "-c", probe, how], capture_output=True, text=True,
                                      check=True).stdout) for how in ("keep", "default")}
    if mapped["keep"] >= 0:
        assert mapped["default"] >= 1 << 26 > mapped["keep"]  # by default its own mapping; kept: the heap
