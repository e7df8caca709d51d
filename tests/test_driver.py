"""The round driver without Ray: the same ``train()`` on the in-process engine (virtual clock), so
every rule of the driver is checked in milliseconds and deterministically: exact GD iterates,
closing rules (against the simulator, to the instant), stragglers and aborts, injected and
mid-stream deaths, round timeouts, checkpoints and ``resume``, multi-model scheduling, verify
mode, the config objects, and n = 64 workers. The Ray tests (test_runtime*.py) check what is
Ray's; this module is not marked ``ray``.

Times here are virtual seconds of :class:`InProcessEngine`, exact by construction, so they may be
compared exactly; they say nothing about speed.
"""

import dataclasses
import json
import pickle
import re

import numpy as np
import pytest

import gradcode
from gradcode.codes import make_code
from gradcode.errors import GradcodeError
from gradcode.problems import DataSpec, make_dataset
from gradcode.runtime import (
    CheckpointError,
    ClusterConfig,
    Engine,
    FaultConfig,
    InProcessEngine,
    RoundTimeoutError,
    RunConfig,
    TrainingStopped,
    TrainSpec,
    WireTask,
    build_scheme,
    resume,
    train,
    trust_modules,
)
from gradcode.runtime.records import TrainState, json_safe, read_checkpoint
from gradcode.stragglers import make_delay_model
from runtime_util import (DATA, REGISTRY_PARAMS, SEED, PoisonedWorker, SkipsWorkers, SplitJobs, TwoMessages,
                          _Poison, gd_reference, rel, train_options)


def reference(steps, *, lr=0.5):
    return gd_reference(DATA, SEED, steps, lr=lr)


def run(tmp_path, name="run", engine=None, **kw):
    kw.setdefault("workers", 4)
    kw.setdefault("rounds", 6)
    kw.setdefault("optimizer_params", {"lr": 0.5})
    if "data" not in kw:
        kw.update(data="tandon-synthetic", data_params=DATA)
    return train_options(seed=SEED, run_dir=tmp_path / name, eval_every=0, engine=engine or InProcessEngine(), **kw)


def delays(rounds, n, slow, seconds):
    d = np.zeros((rounds, n))
    d[:, list(slow)] = seconds
    return make_delay_model("trace", delays=d)


# ---------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("name", sorted(REGISTRY_PARAMS))
def test_every_exact_code_reaches_the_gd_iterates_without_ray(tmp_path, name):
    code = make_code(name, **REGISTRY_PARAMS[name])
    if not code.exact:
        pytest.skip(f"{name} is not exact")
    res = run(tmp_path, scheme=name, scheme_params=REGISTRY_PARAMS[name], rounds=4, stragglers=1, delay=0.05)
    assert rel(res.final_params, reference(4)) < 1e-9
    if code.tolerance:  # the delayed worker of each round was left out
        assert (res.arrivals[res.injected > 0] < 0).all()


def test_the_in_process_run_is_reproducible_bit_for_bit(tmp_path):
    a = run(tmp_path, "a", scheme="crc", stragglers=1, delay=0.2)
    b = run(tmp_path, "b", scheme="crc", stragglers=1, delay=0.2)
    assert a.to_json()["final_params_checksum"] == b.to_json()["final_params_checksum"]
    np.testing.assert_array_equal(a.arrivals, b.arrivals)
    np.testing.assert_array_equal(a.round_times, b.round_times)


# ---------------------------------------------------------------------------- closing rules


@pytest.mark.parametrize("code", ["crc", "uncoded", "agc"])
def test_round_times_and_stragglers_are_the_simulators(tmp_path, code):
    """With the model's whole time injected and free compute, each round closes exactly when the
    simulator says it does, with the simulator's stragglers: the same protocol, the same draw, the
    same timing rule (message arrivals included, for AGC's two messages)."""
    params = {"uncoded": dict(n=4), "crc": dict(n=4, s=1), "agc": dict(n=4, d=3, L=2)}[code]
    model = make_delay_model("shifted-exp", **({"comm": 0.5} if code == "agc" else {}))
    res = run(tmp_path, scheme=code, scheme_params=params, rounds=8, delay_model=model, inject="full",
              round_timeout=1e6)
    sim = gradcode.simulate(build_scheme(code, workers=4, seed=SEED, scheme_params=params), model, 8, seed=SEED)
    np.testing.assert_allclose(res.round_times, sim.round_times, rtol=1e-12)
    np.testing.assert_array_equal(res.stragglers, sim.stragglers)
    assert rel(res.final_params, reference(8)) < 1e-9


@pytest.mark.parametrize("code,params,mu,waitout", [
    ("crc", dict(n=4, s=1), 1.5, "decodable"),
    ("crc", dict(n=4, s=1), 0.05, "all"),
    ("uncoded", dict(n=4), 0.1, "decodable"),
    ("agc", dict(n=4, d=3, L=2), 2.0, "all"),
    ("m-sgc", dict(B=1, W=2, lam=1), 3.0, "all"),
    ("sr-sgc", dict(B=1, W=2, lam=1), 0.5, "decodable"),
])
def test_the_mu_rule_closes_rounds_at_the_simulators_times(tmp_path, code, params, mu, waitout):
    """close=mu (SGC Sec. 2) on the in-process engine: each round runs to (1 + mu) kappa (or until
    every worker is in), is waited out exactly when the simulator's is, with its stragglers, and
    the models reach the same parameters as under close='decodable' (the GD iterates)."""
    model = make_delay_model("shifted-exp", **({"comm": 0.5} if code == "agc" else {}))
    models = 3 if "sgc" in code else 1
    res = run(tmp_path, scheme=code, scheme_params=params, rounds=12, delay_model=model, inject="full",
              round_timeout=1e6, close=mu, waitout=waitout, models=models)
    sim = gradcode.simulate(build_scheme(code, workers=4, seed=SEED, scheme_params=params), model, 12, seed=SEED,
                            close=mu, waitout=waitout, records=True)
    np.testing.assert_allclose(res.round_times, sim.round_times, rtol=1e-12)
    np.testing.assert_array_equal(res.stragglers, sim.stragglers)
    np.testing.assert_array_equal(res.waitouts, sim.waitout_rounds)
    assert 0 < res.waitouts.sum() < 12 or code == "uncoded"  # rounds of both kinds (uncoded: every one waits)
    # the closing rule changes when rounds end and who straggles, never the gradients
    base = run(tmp_path, "decodable", scheme=code, scheme_params=params, rounds=12, delay_model=model, inject="full",
               round_timeout=1e6, models=models)
    for m in range(models):
        assert rel(res.params[m], base.params[m]) < 1e-9
    if models == 1:
        assert rel(res.final_params, reference(12)) < 1e-9
    assert json.loads((tmp_path / "run" / "result.json").read_text())["waitout_rounds"] == int(res.waitouts.sum())
    lines = [json.loads(line) for line in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()]
    assert [line["waited_out"] for line in lines] == res.waitouts.tolist()


def test_the_mu_rule_does_not_wait_for_a_dead_or_discarded_worker(tmp_path):
    """The mu-rule's deadline and its wait for all (waitout='all') wait for the workers that can
    still send: one dead for good (no restarts) or whose result held NaN is settled, so a round
    closes when the others are in, not at (1 + mu) kappa, and is not waited out."""
    ones = make_delay_model("trace", delays=np.ones((4, 4)))
    dead = run(tmp_path, "dead", scheme="crc", scheme_params=dict(s=1), rounds=4, delay_model=ones, inject="full",
               close=1.0, waitout="all", fail=["1@1"], max_restarts=0, round_timeout=100.0)
    np.testing.assert_allclose(dead.round_times, 1.0)
    assert dead.stragglers[1:, 1].all() and not dead.waitouts.any()
    assert rel(dead.final_params, reference(4)) < 1e-9
    code = make_code("crc", n=4, s=1, seed=SEED)
    nan = run(tmp_path, "nan", scheme="crc", scheme_params=dict(s=1), rounds=2, delay_model=ones, inject="full",
              close=1.0, waitout="all", data=PoisonedWorker(code.placement[1], np.nan))
    np.testing.assert_allclose(nan.round_times, 1.0)
    assert nan.stragglers[:, 1].all() and rel(nan.final_params, reference(2)) < 1e-9
    # a worker that is only slow is waited for under waitout='all': two workers short at the deadline
    slow = run(tmp_path, "slow", scheme="crc", scheme_params=dict(s=1), rounds=2, delay_model=delays(2, 4, [2, 3], 3.0),
               inject="full", close=0.0, waitout="all", round_timeout=100.0)
    np.testing.assert_allclose(slow.round_times, 3.0)
    assert slow.waitouts.all() and not slow.stragglers.any()


def test_the_round_timeout_caps_the_mu_rules_wait_when_the_round_decodes(tmp_path):
    """A deadline (1 + mu) kappa, or a wait for all, longer than round_timeout does not stop a
    run whose round decodes: the round closes at the timeout. One that cannot decode still stops."""
    d = np.ones((2, 4))
    d[:, 3] = 100.0
    long = run(tmp_path, "long", scheme="crc", scheme_params=dict(s=1), rounds=2, delay_model="trace",
               delay_params={"delays": d},
               inject="full", close=200.0, round_timeout=50.0)
    np.testing.assert_allclose(long.round_times, 50.0)
    assert not long.waitouts.any() and long.stragglers[:, 3].all()
    d[:, 2] = 2.0
    wait_all = run(tmp_path, "all", scheme="crc", scheme_params=dict(s=1), rounds=2, delay_model="trace",
               delay_params={"delays": d},
                   inject="full", close=0.0, waitout="all", round_timeout=50.0)
    np.testing.assert_allclose(wait_all.round_times, 50.0)
    assert wait_all.waitouts.all() and wait_all.stragglers[:, 3].all() and not wait_all.stragglers[:, 2].any()
    with pytest.raises(RoundTimeoutError, match="could not be decoded within round_timeout=50"):
        run(tmp_path, "uncoded", scheme="uncoded", rounds=1, delay_model=delays(1, 4, [3], 100.0), inject="full",
            close=1.0, waitout="all", round_timeout=50.0)


def test_messages_are_copies_as_ray_sends_them(tmp_path):
    """A problem that writes every gradient into one buffer (a speed idiom nothing forbids) must
    not change messages already sent: the in-process engine delivers copies, as Ray serializes
    them on send (the worker no longer copies a single-chunk message itself)."""
    res = run(tmp_path, scheme=TwoMessages(4), rounds=3, data=ReusingBuffer())
    assert rel(res.final_params, reference(3)) < 1e-9


class ReusingBuffer:
    """Problem spec of :data:`DATA` whose gradient is written into one preallocated buffer."""

    def build(self):
        from gradcode.problems import make_dataset, make_problem

        ds = make_dataset(DataSpec("tandon-synthetic", DATA, seed=SEED))
        problem = make_problem("logistic", ds)
        buffer = np.empty(problem.dim)
        true_gradient = problem.gradient

        def gradient(params, rows=None):
            buffer[:] = true_gradient(params, rows)
            return buffer

        problem.gradient = gradient
        return problem, ds


def test_the_closing_rule_is_checked_when_the_spec_is_built():
    for bad, err in [({"close": "fast"}, ValueError), ({"close": True}, TypeError), ({"close": -1.0}, ValueError),
                     ({"waitout": "some"}, ValueError), ({"waitout": "all"}, ValueError)]:
        with pytest.raises(err):
            TrainSpec(**bad)
    assert TrainSpec(close=1, waitout="all").close == 1.0


def test_a_closed_round_aborts_its_delayed_worker_which_serves_the_next_round(tmp_path):
    """Worker 0 sleeps 30 s in round 0, worker 1 in round 1: round 0 closes at once without worker
    0 and aborts it, so worker 0 delivers in round 1 (which needs it) at once as well."""
    d = np.zeros((2, 4))
    d[0, 0] = d[1, 1] = 30.0
    res = run(tmp_path, scheme="crc", stragglers=1, rounds=2, delay_model="trace",
               delay_params={"delays": d}, round_timeout=10.0)
    np.testing.assert_array_equal(res.arrivals, [[-1, 0, 0, 0], [0, -1, 0, 0]])
    np.testing.assert_array_equal(res.round_times, [0.0, 0.0])
    assert rel(res.final_params, reference(2)) < 1e-9


def test_uncoded_waits_for_its_slowest_worker(tmp_path):
    res = run(tmp_path, scheme="uncoded", stragglers=1, delay=0.3, rounds=3)
    np.testing.assert_allclose(res.round_times, 0.3)
    assert (res.arrivals >= 0).all()


def test_a_busy_worker_is_skipped_and_served_late(tmp_path):
    """SkipsWorkers leaves worker 3 out of round 1's plan: it gets no task and delivers nothing
    (an uncoded round without it: not a GD step, so only the records are checked)."""
    res = run(tmp_path, scheme=SkipsWorkers(4, {1: (3,)}), rounds=3)
    assert res.messages[1].tolist() == [1, 1, 1, 0] and res.arrivals[1, 3] == -1


# ---------------------------------------------------------------------------- faults


def test_injected_deaths_are_tolerated_or_waited_for_and_recorded_once(tmp_path):
    """crc s = 1: workers 1 and 2 die in round 1 (the round waits for one of them to be restarted,
    1 s, and re-sent: back-off 0.2, 0.6, 1.4 s), worker 3 in round 5 (tolerated)."""
    res = run(tmp_path, scheme="crc", stragglers=1, rounds=7, fail=["1@1", "2@1", "3@5"],
              engine=InProcessEngine(restart_time=1.0))
    assert rel(res.final_params, reference(7)) < 1e-9
    got = [(f["round"], f["worker"], f["kind"], f["recovery"], f["resends"], f["back_in_round"])
           for f in res.failures]
    # worker 3 is still down (restarting) in round 6, which decodes without it; a message of an
    # earlier round delivered after its death does not count as its coming back
    assert got == [(1, 1, "died", "resent", 3, 1), (1, 2, "died", "tolerated", 3, 1),
                   (5, 3, "died", "tolerated", 0, None)]
    assert res.round_times[1] == pytest.approx(1.4)
    assert res.arrivals[5, 3] == -1 and res.messages[5:, 3].tolist() == [0, 0]


def test_deaths_without_restarts_time_out_naming_the_workers(tmp_path):
    with pytest.raises(RoundTimeoutError, match=r"round 1 could not be decoded.*held up by workers \[1, 2\]: worker 1:"
                                              r" its process died in round 1 .*Ray does not restart it") as info:
        run(tmp_path, scheme="crc", stragglers=1, rounds=4, fail=["1@1", "2@1"], max_restarts=0, round_timeout=3.0)
    res = info.value.result
    assert res.round_times.size == 1 and rel(res.final_params, reference(1)) < 1e-9
    assert json.loads((tmp_path / "run" / "result.json").read_text())["error_type"] == "RoundTimeoutError"


def test_a_failure_planned_while_the_worker_has_no_task_fires_on_its_next_one(tmp_path):
    res = run(tmp_path, scheme=SkipsWorkers(4, {1: (3,), 2: (1,)}), rounds=3, fail=["3@1", "1@2"], round_timeout=30)
    rec = {(f["worker"], f["planned_round"]): f for f in res.failures if f["injected"]}
    assert (rec[3, 1]["round"], rec[3, 1]["fired"]) == (2, True)
    assert rec[1, 2]["fired"] is False
    assert res.arrivals[2, 3] >= 0


class CrashesMidStream(InProcessEngine):
    """Worker ``w``'s process dies right after its first message of round ``t`` (once)."""

    def __init__(self, w, t, **kw):
        super().__init__(**kw)
        self.target, self.done = (w, t), False

    def poll(self, timeout):
        events = super().poll(timeout)
        for ev in events:
            if not self.done and ev.kind == "message" and (ev.worker, ev.round) == self.target:
                self.done = True
                self.crash(ev.worker)
        return events


class OverflowTagged(CrashesMidStream):
    """As :class:`CrashesMidStream`, every message saying its worker re-ran one float16 pass."""

    def poll(self, timeout):
        return [dataclasses.replace(ev, payload=dataclasses.replace(ev.payload, overflows=1)) if ev.kind == "message"
                else ev for ev in super().poll(timeout)]


def test_a_task_resent_after_a_mid_stream_death_delivers_each_message_once(tmp_path):
    scheme = TwoMessages(4)
    # compute takes 10 ms a message, so the crash comes between worker 0's two messages
    res = run(tmp_path, scheme=scheme, rounds=3, engine=OverflowTagged(0, 1, compute_time=0.01), round_timeout=60)
    assert [(f["round"], f["worker"], f["injected"], f["recovery"]) for f in res.failures] == [(1, 0, False, "resent")]
    assert len(scheme.calls) == len(set(scheme.calls)) == 3 * 4 * 2
    assert res.messages[1, 0] == 2 and res.arrivals[1, 0] >= 0
    assert res.overflows.tolist() == [8, 8, 8]  # the message delivered again is counted once
    assert rel(res.final_params, reference(3)) < 1e-9


def test_a_nan_result_is_a_straggler_and_verify_excludes_a_wrong_one(tmp_path):
    code = make_code("crc", n=6, s=2, seed=SEED)
    kw = dict(workers=6, stragglers=2, rounds=3, delay_model=delays(3, 6, (4, 5), 0.5), round_timeout=30)
    res = train_options("crc", data=PoisonedWorker(code.placement[1], np.nan), optimizer_params={"lr": 0.5}, seed=SEED,
                run_dir=tmp_path / "nan", eval_every=0, engine=InProcessEngine(), **kw)
    assert rel(res.final_params, reference(3)) < 1e-9
    assert [(f["round"], f["worker"], f["kind"]) for f in res.failures] == [(t, 1, "non-finite") for t in range(3)]
    wrong = PoisonedWorker(code.placement[1], 1000.0)
    plain = train_options("crc", data=wrong, optimizer_params={"lr": 0.5}, seed=SEED, run_dir=tmp_path / "plain",
                  eval_every=0, engine=InProcessEngine(), **kw)
    assert rel(plain.final_params, reference(3)) > 1e-3
    checked = train_options("crc", data=wrong, optimizer_params={"lr": 0.5}, seed=SEED, run_dir=tmp_path / "checked",
                    eval_every=0, verify=True, engine=InProcessEngine(), **kw)
    assert rel(checked.final_params, reference(3)) < 1e-9
    assert [(f["round"], f["worker"], f["kind"]) for f in checked.failures] == [(t, 1, "dropped") for t in range(3)]


class AllNaN(PoisonedWorker):
    """Every worker computes NaN: a diverged loss, or inputs holding NaN."""

    def build_partitions(self, partitions):
        problem, _ = self.build()
        local = {int(j): np.asarray(r) for j, r in partitions.items()}
        return _Poison(problem, np.concatenate(list(local.values())), np.nan), local


def test_a_round_whose_every_result_is_nan_stops_at_once_saying_why(tmp_path):
    """A regression: a run whose gradients are all NaN reported a RoundTimeoutError after waiting out
    round_timeout; now it stops when the last result is discarded, naming the cause."""
    with pytest.raises(TrainingStopped, match="round 0: every worker's result held NaN or infinity") as info:
        train_options("crc", data=AllNaN((), np.nan), optimizer_params={"lr": 0.5}, seed=SEED, workers=4,
                      stragglers=1, rounds=2, run_dir=tmp_path / "r", eval_every=0, engine=InProcessEngine(),
                      round_timeout=1000)
    assert not isinstance(info.value, RoundTimeoutError)
    assert len(info.value.result.failures) == 4


def test_rounds_whose_records_exceed_the_memory_are_refused_before_allocating(tmp_path):
    """A regression: ``RunConfig(rounds=10**12)`` gave a raw MemoryError (and the CLI a traceback)."""
    with pytest.raises(ValueError, match=r"rounds=1000000000000 .* needs .* of memory; this machine has"):
        run(tmp_path, rounds=10**12)


def test_verify_with_a_nan_worker_verifies_with_the_results_that_can_still_come(tmp_path):
    """A regression: verification waited for n - s + 2 = 6 results although worker 1's were
    NaN (discarded), so every round timed out. Now a discarded worker is out of the round and
    verification uses the 5 results that can come (one spare: it detects)."""
    code = make_code("crc", n=6, s=2, seed=SEED)
    res = train_options("crc", data=PoisonedWorker(code.placement[1], np.nan), optimizer_params={"lr": 0.5}, seed=SEED,
                run_dir=tmp_path / "nan", eval_every=0, engine=InProcessEngine(), workers=6, stragglers=2, rounds=3,
                round_timeout=30, verify=True)
    assert rel(res.final_params, reference(3)) < 1e-9
    assert [(f["round"], f["worker"], f["kind"]) for f in res.failures] == [(t, 1, "non-finite") for t in range(3)]


class TwoPoisoned(PoisonedWorker):
    """:class:`PoisonedWorker` for two workers: those storing exactly ``parts`` or ``other``."""

    def __init__(self, parts, other, value):
        super().__init__(parts, value)
        self.other = tuple(other)

    def build_partitions(self, partitions):
        if {int(j) for j in partitions} == set(self.other):
            return PoisonedWorker(self.other, self.value).build_partitions(partitions)
        return super().build_partitions(partitions)


def test_verify_waits_for_the_checks_that_locate_two_corrupted_workers(tmp_path):
    """CRC n = 9, s = 4 with workers 2 and 6 wrong: the first 7 results (2 checks) are
    inconsistent but locate no single culprit, so the round waits for more; with all 9 (4 checks)
    it names both and decodes around them (DRACO's 2e + 1)."""
    code = make_code("crc", n=9, s=4, seed=SEED)
    res = train_options("crc", data=TwoPoisoned(code.placement[2], code.placement[6], 1000.0), optimizer_params={"lr": 0.5},
                seed=SEED, run_dir=tmp_path / "two", eval_every=0, engine=InProcessEngine(), workers=9,
                stragglers=4, rounds=3, round_timeout=30, verify=True,
                delay_model=delays(3, 9, (7, 8), 0.5))
    assert rel(res.final_params, reference(3)) < 1e-9
    assert sorted((f["round"], f["worker"], f["kind"]) for f in res.failures) == sorted(
        (t, w, "dropped") for t in range(3) for w in (2, 6))
    assert (res.round_times >= 0.5).all()  # each round waited for the two late results


def test_a_worker_exception_stops_the_run(tmp_path):
    class WrongPartition(SplitJobs):
        delay = 0

        def _plan(self, t):
            self.got[t] = {}
            return {w: (self.Task(t, ((2 * w + 2) % (2 * self.n),), np.ones((1, 1, 1))),) for w in range(self.n)}

    with pytest.raises(GradcodeError, match="raised in round 0.*stores only"):
        run(tmp_path, scheme=WrongPartition(4), rounds=2)


# ---------------------------------------------------------------------------- checkpoints and resume


class Interrupt(Exception):
    pass


def stop_at(k):
    def callback(record):
        if record["round"] == k:
            raise Interrupt

    return callback


@pytest.mark.parametrize("how", ["resume(run_dir)", "train(resume=True)"])
def test_an_interrupted_run_resumes_to_the_uninterrupted_run_bit_for_bit(tmp_path, how):
    kw = dict(scheme="crc", stragglers=1, delay=0.1, checkpoint_every=2, fail=["2@4"])
    whole = run(tmp_path, "whole", **kw)
    with pytest.raises(Interrupt):
        run(tmp_path, "cut", callback=stop_at(3), **kw)
    if how == "resume(run_dir)":
        res = resume(tmp_path / "cut", engine=InProcessEngine())
    else:
        res = run(tmp_path, "cut", resume=True, **kw)
    assert res.resumed_from == 4
    for key in ("final_params_checksum", "arrivals", "messages", "injected", "losses", "failures"):
        assert res.to_json()[key] == whole.to_json()[key], key
    lines = [json.loads(x) for x in (tmp_path / "cut" / "rounds.jsonl").read_text().splitlines()]
    assert [x["round"] for x in lines] == list(range(6))
    # another round timeout keeps the planned failures without repeating them (fail="2@4" held)
    longer = resume(tmp_path / "cut", rounds=8, faults=FaultConfig(round_timeout=100.0), engine=InProcessEngine())
    assert longer.resumed_from == 6 and longer.losses.shape == (8, 1)
    assert rel(longer.final_params, reference(8)) < 1e-9


@pytest.mark.parametrize("code,params", [
    ("sr-sgc", {"B": 1, "W": 2, "lam": 2}), ("m-sgc", {"B": 1, "W": 2, "lam": 2}),
    ("gc-dc", {"clusters": 2, "r": 2}), ("partial", {"s": 1, "alpha": 2.0}),
])
def test_every_scheme_family_checkpoints_and_resumes_to_the_same_run(tmp_path, code, params):
    """A checkpoint holds each family's state (SR-SGC's jobs in flight, M-SGC's mini-tasks, GC-DC's
    straggler history): interrupted after round 3, resumed from round 4, the run ends with the
    uninterrupted one's parameters and, but for GC-DC, the same rounds. (GC-DC's resumed run
    assigns round 4 other workers, as it did with the pickled checkpoints before: its decodes stay
    exact, so the parameters agree; left for the GC-DC scheme's own state.)"""
    kw = dict(scheme=code, scheme_params=params, workers=4, stragglers=1, delay=0.1, models=2, rounds=7,
              optimizer_params=[{"lr": 0.5}, {"lr": 1.0}], checkpoint_every=2)
    whole = run(tmp_path, "whole", **kw)
    with pytest.raises(Interrupt):
        run(tmp_path, "cut", callback=stop_at(3), **kw)
    res = resume(tmp_path / "cut", engine=InProcessEngine())
    assert res.resumed_from == 4
    for a, b in zip(res.params, whole.params):
        assert rel(a, b) < 1e-12
    if code != "gc-dc":
        assert res.to_json()["messages"] == whole.to_json()["messages"]


def test_a_scheme_whose_jobs_span_rounds_resumes_exactly(tmp_path, monkeypatch):
    from gradcode.runtime import safe_state

    kw = dict(models=2, rounds=5, optimizer_params=[{"lr": 0.5}, {"lr": 1.0}], checkpoint_every=2)
    # a scheme class of the user's own module: checkpoints hold it once its module is trusted
    with pytest.raises(ValueError, match="trust_modules"):
        run(tmp_path, scheme=SplitJobs(4), **kw)
    monkeypatch.setattr(safe_state, "_TRUSTED", set(safe_state._TRUSTED))  # undone after the test
    trust_modules("runtime_util")
    with pytest.raises(Interrupt):
        run(tmp_path, scheme=SplitJobs(4), callback=stop_at(3), overwrite=True, **kw)
    res = resume(tmp_path / "run", engine=InProcessEngine())
    assert res.resumed_from == 4
    assert rel(res.params[0], reference(2, lr=0.5)) < 1e-9
    assert rel(res.params[1], reference(2, lr=1.0)) < 1e-9


def test_the_checkpoint_is_json_and_npz_without_pickle(tmp_path):
    """The checkpoint document: version 3, the state a string-keyed dict, the scheme a gradcode
    object, in JSON with its arrays in one .npz; the spec, run config and faults are kept for
    resume(run_dir). An earlier version's pickle is refused, never loaded."""
    run(tmp_path, scheme="crc", stragglers=1, rounds=2, checkpoint_every=2)
    folder = tmp_path / "run"
    inner = json.loads(json.loads((folder / "checkpoint.json").read_text())["content"])
    body = inner["body"]
    assert body["version"] == 3 and body["scheme"]["__object"] == "gradcode.schemes.static:StaticScheme"
    assert set(body["state"]) == {"next_round", "params", "opt_states", "steps", "round_times", "arrivals",
                                  "messages", "injected", "losses", "waitouts", "loose", "overflows", "metrics",
                                  "failures"}
    assert [p.name for p in folder.glob("checkpoint-*.npz")] == [inner["arrays"]]
    doc = read_checkpoint(folder / "checkpoint.json")
    assert isinstance(doc["spec"], TrainSpec) and doc["run"].rounds == 2
    assert isinstance(doc["state"]["round_times"], np.ndarray)
    (folder / "checkpoint.json").unlink()
    (folder / "checkpoint.pkl").write_bytes(pickle.dumps({"version": 2}))
    with pytest.raises(CheckpointError, match="does not load"):
        resume(folder, engine=InProcessEngine())


def test_a_checkpoint_state_from_before_the_later_tables_resumes_with_their_empty_rows(tmp_path):
    """A state written before ``waitouts``, ``loose`` or ``overflows`` existed restores with
    none waited out, none loose and no overflow in its rounds, and its result says so."""
    run(tmp_path, scheme="crc", stragglers=1, rounds=2, checkpoint_every=2)
    state = dict(read_checkpoint(tmp_path / "run" / "checkpoint.json")["state"])
    for key in ("waitouts", "loose", "overflows"):
        del state[key]
    old = TrainState.from_dict(state)
    assert old.waitouts.tolist() == [False, False] and np.isnan(old.loose).all()
    assert old.overflows.dtype == np.int64 and old.overflows.tolist() == [0, 0]
    assert old.result({}, None, None).total_overflows == 0


def test_every_flipped_bit_of_a_checkpoint_is_detected(tmp_path):
    """Any changed bit of checkpoint.json or of its arrays is a CheckpointError naming the file,
    before anything is decoded."""
    run(tmp_path, scheme="crc", stragglers=1, rounds=4, checkpoint_every=2)
    path = tmp_path / "run" / "checkpoint.json"
    (blob,) = path.parent.glob("checkpoint-*.npz")
    rng = np.random.default_rng(0)
    for target in (path, blob):
        good = target.read_bytes()
        for bit in rng.choice(8 * len(good), size=60, replace=False):
            bad = bytearray(good)
            bad[bit // 8] ^= 1 << (bit % 8)
            target.write_bytes(bytes(bad))
            with pytest.raises(CheckpointError, match=re.escape(target.name)):
                read_checkpoint(path)
        target.write_bytes(good)
    assert read_checkpoint(path)["state"]["next_round"] == 4


def test_resume_refuses_another_configuration(tmp_path):
    kw = dict(scheme="partial", rounds=2, checkpoint_every=2)
    run(tmp_path, scheme_params={"s": 1, "alpha": 2.0}, **kw)
    with pytest.raises(ValueError, match=r"differs from the checkpoint's \(scheme_params: "):
        run(tmp_path, scheme_params={"s": 1, "alpha": 3.0}, resume=True, **kw)


def test_a_checkpoint_of_0_1_is_refused_naming_the_change():
    """0.1's configuration said "code" where 0.2.0 says "scheme": such a checkpoint is refused by
    name, before anything of it is used."""
    from gradcode.runtime.restore import restore_checkpoint

    with pytest.raises(CheckpointError, match="written by gradcode 0.1"):
        restore_checkpoint({"config": {"code": "crc", "code_params": {}}, "state": {}}, None, None)


# ---------------------------------------------------------------------------- several models


def test_multi_model_rounds_serve_model_j_mod_m(tmp_path):
    res = run(tmp_path, scheme="crc", stragglers=1, models=2, optimizer_params=[{"lr": 0.5}, {"lr": 1.0}])
    assert rel(res.params[0], reference(3, lr=0.5)) < 1e-9
    assert rel(res.params[1], reference(3, lr=1.0)) < 1e-9


@pytest.mark.parametrize("name,params,steps", [
    ("m-sgc", dict(B=1, W=2, lam=1), (3, 2)),
    ("sr-sgc", dict(B=1, W=2, lam=1), (3, 3)),
])
def test_sequential_codes_train_several_models_exactly(tmp_path, name, params, steps):
    """SGC App. I (``--models M``): job j trains model j mod M with one straggler a round."""
    res = run(tmp_path, scheme=name, scheme_params=params, models=2, rounds=6, stragglers=1, delay=0.05)
    for m, k in enumerate(steps):
        assert rel(res.params[m], reference(k)) < 1e-9


def test_jobs_spanning_rounds_need_more_models_than_the_delay(tmp_path):
    res = run(tmp_path, scheme=SplitJobs(4), models=2, rounds=5, optimizer_params=[{"lr": 0.5}, {"lr": 1.0}])
    assert rel(res.params[0], reference(2, lr=0.5)) < 1e-9 and (res.messages[1:] == 2).all()
    with pytest.raises(GradcodeError, match="more models than the scheme's delay"):
        run(tmp_path, "one", scheme=SplitJobs(4), models=1, rounds=3)


# ---------------------------------------------------------------------------- config objects


def test_train_takes_the_config_objects_only(tmp_path):
    """0.2.0 dropped train()'s flat keywords and a code as its first argument: each is a TypeError
    naming what to pass instead; the config objects give one run, bit for bit, however built."""
    spec = TrainSpec("crc", workers=4, stragglers=1, delay=0.1, data="tandon-synthetic", data_params=DATA,
                     optimizer_params={"lr": 0.5}, seed=SEED)
    a = train(spec, run=RunConfig(rounds=4, run_dir=tmp_path / "a", eval_every=0), faults=FaultConfig(fail=["1@2"]),
              engine=InProcessEngine())
    b = train(spec.replace(), run=RunConfig(rounds=4, run_dir=tmp_path / "b", eval_every=0),
              faults=FaultConfig(fail=("1@2",)), engine=InProcessEngine())
    assert {k: v for k, v in a.config.items()} == b.config
    assert a.to_json()["final_params_checksum"] == b.to_json()["final_params_checksum"]
    with pytest.raises(TypeError, match="unexpected keyword argument 'rounds'"):
        train(spec, rounds=3, engine=InProcessEngine())
    with pytest.raises(TypeError, match="spec must be a TrainSpec, got str"):
        train("crc", engine=InProcessEngine())
    with pytest.raises(TypeError, match="run must be a RunConfig"):
        train(spec, run={"rounds": 3})


def test_config_objects_validate_when_built():
    with pytest.raises(ValueError, match="W@R"):
        FaultConfig(fail=["1-2"])
    with pytest.raises(ValueError, match="round_timeout must be > 0"):
        FaultConfig(round_timeout=0)
    with pytest.raises(ValueError, match="resume=True needs run_dir"):
        RunConfig(resume=True)
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        RunConfig(rounds=0)
    with pytest.raises(ValueError, match="inject must be one of"):
        TrainSpec(inject="some")
    with pytest.raises(ValueError, match="start_timeout must be > 0"):
        ClusterConfig(start_timeout=0)
    with pytest.raises(ValueError, match="transport must be one of 'channels', 'collective', 'ray'; got 'grpc'"):
        ClusterConfig(transport="grpc")
    params = {"lr": 0.1}
    spec = TrainSpec(optimizer_params=params)
    params["lr"] = 1.0  # the spec kept its own copy
    assert spec.optimizer_params == {"lr": 0.1} and pickle.loads(pickle.dumps(spec)) == spec


# ---------------------------------------------------------------------------- the engine


def test_the_in_process_engine_keeps_the_engine_contract():
    from gradcode.runtime import ProblemSpec

    assert isinstance(InProcessEngine(), Engine)
    spec = ProblemSpec(DataSpec("tandon-synthetic", DATA, seed=SEED), "logistic")
    eng = InProcessEngine(restart_time=2.0, death_report=0.5)
    eng.spawn([(spec, {0: np.arange(10)}, 1), (spec, {1: np.arange(10, 20)}, 1)], max_restarts=1)
    x = eng.put(np.zeros(7))
    task = [WireTask(0, (0,), np.ones((1, 1, 1)), 0)]
    eng.submit(0, 0, task, [x], sleeps=[5.0])
    assert eng.busy(0) and eng.running_round(0) == 0 and eng.poll(1.0) == [] and eng.clock() == 1.0
    eng.abort(0, 0)  # the sleep ends now: the task ends without a message
    assert [(e.worker, e.kind) for e in eng.poll(None)] == [(0, "done")] and not eng.busy(0)
    eng.submit(1, 1, [WireTask(1, (1,), np.ones((1, 1, 1)), 0)], [x], fail=True)
    (ev,) = eng.poll(None)
    assert (ev.kind, ev.lost, eng.clock()) == ("failed", True, 1.5)
    eng.submit(1, 2, [WireTask(2, (1,), np.ones((1, 1, 1)), 0)], [x])  # still restarting: fails at once
    assert [(e.kind, e.lost) for e in eng.poll(None)] == [("failed", True)]
    eng.poll(2.0)  # back at 3.0 (2 s after its death): rebuilt from the spec
    eng.submit(1, 3, [WireTask(3, (1,), np.ones((1, 1, 1)), 0)], [x])
    assert [e.kind for e in eng.poll(None)] == ["message", "done"] and eng.builds(1) == 2
    eng.submit(0, 4, task, [x], sleeps=[1.0])
    with pytest.raises(RuntimeError, match="busy"):
        eng.submit(0, 5, task, [x])


# ---------------------------------------------------------------------------- scale


def test_sixty_four_workers(tmp_path):
    data = {"n_samples": 2000, "n_features": 6}
    res = train_options("crc", workers=64, stragglers=4, delay=0.1, rounds=3, data_params=data, seed=SEED,
                optimizer_params={"lr": 0.5}, run_dir=tmp_path / "r", eval_every=0, engine=InProcessEngine())
    assert res.arrivals.shape == (3, 64) and (res.arrivals < 0).sum(axis=1).tolist() == [4, 4, 4]
    assert rel(res.final_params, gd_reference(data, SEED, 3)) < 1e-9


def test_train_several_rows_take_each_models_baseline_and_survive_a_run_stopped_in_round_0(tmp_path):
    """gradcode train --scheme A,B's table (comparison_rows): with --models 2 the speed-up of each
    model is over uncoded's same model (the rows are crc/0, uncoded:n=4/1, ...: no row is named
    "uncoded", so there used to be no speed-up at all); a run that timed out in its first round
    has no rounds and used to crash the table with an IndexError."""
    from gradcode.experiments.cli_train import comparison_rows

    kw = dict(stragglers=1, delay=0.5, rounds=3, models=2)
    crc = run(tmp_path, "crc", scheme="crc", engine=InProcessEngine(compute_time=0.01), **kw)
    unc = run(tmp_path, "unc", scheme="uncoded", engine=InProcessEngine(compute_time=0.01), **kw)
    with pytest.raises(RoundTimeoutError) as info:
        run(tmp_path, "stopped", scheme="uncoded", engine=InProcessEngine(compute_time=0.01), round_timeout=0.1, **kw)
    stopped = info.value.result
    assert stopped.round_times.size == 0
    runs = [{"spec": "crc", "name": "crc", "exact": True}, {"spec": "uncoded:n=4", "name": "uncoded", "exact": True},
            {"spec": "frc", "name": "frc", "exact": True}]
    rows = comparison_rows(runs, [crc, unc, stopped], [None, None, f"RoundTimeoutError: {info.value}"])
    assert [r["scheme"] for r in rows] == ["crc/0", "crc/1", "uncoded:n=4/0", "uncoded:n=4/1", "frc"]
    for i in range(2):
        assert rows[i]["speedup"] == pytest.approx(rows[2 + i]["time_s"] / rows[i]["time_s"])
        assert rows[2 + i]["speedup"] == 1.0
    assert rows[0]["speedup"] > 1.5  # crc does not wait for the delayed worker
    assert rows[4] == {"scheme": "frc", "gradient": "exact", "error": "RoundTimeoutError"}


def test_a_lost_cluster_is_named_instead_of_each_worker(tmp_path):
    """When the engine's cluster is gone (an external cluster stopped mid-run),
    the run stops with that, not with one process death per worker."""

    class LostCluster(InProcessEngine):
        def lost(self):
            return "the Ray cluster at 10.0.0.1:6379 is gone: its head node does not answer"

    with pytest.raises(GradcodeError, match="round 0: the Ray cluster at 10.0.0.1:6379 is gone.*run it again: it"
                                           " wrote no checkpoint"):
        train_options("crc", workers=4, stragglers=1, rounds=2, fail=["0@0", "1@0", "2@0", "3@0"], seed=SEED,
              run_dir=tmp_path / "lost", eval_every=0, round_timeout=5, engine=LostCluster())
    # with a checkpoint written, --resume is the advice (only to runs that wrote one)
    with pytest.raises(GradcodeError, match="gone.*--resume \\(its checkpoint holds rounds 0-1\\)"):
        train_options("crc", workers=4, stragglers=1, rounds=4, fail=["0@2", "1@2", "2@2", "3@2"], seed=SEED,
              run_dir=tmp_path / "lost2", eval_every=0, round_timeout=5, checkpoint_every=2, max_restarts=0,
              engine=LostCluster())


def test_result_attributes_are_named_as_in_result_json(tmp_path):
    """A regression: result.rounds raised although result.json has rounds."""
    res = run(tmp_path, scheme="crc", stragglers=1, rounds=3)
    doc = json.loads((tmp_path / "run" / "result.json").read_text())
    for key in ("rounds", "total_time", "waitout_rounds", "final_loss", "resumed_from", "run_dir"):
        assert getattr(res, key) == doc[key], key


def test_cli_several_schemes_in_process_with_varying_delays_draw_both_figures(tmp_path):
    """--engine inprocess runs every scheme without Ray; delays that vary from round to round get
    the time-against-delay figure (a fixed --delay does not: tests/test_runtime_cli.py), and each
    run's curve has its own line style, so exact schemes' identical curves stay apart."""
    import matplotlib

    matplotlib.use("Agg")
    from typer.testing import CliRunner

    from gradcode.cli import app

    res = CliRunner().invoke(app, [
        "train", "--engine", "inprocess", "--scheme", "crc,uncoded", "--workers", "4", "--stragglers", "1",
        "--delay-model", "shifted-exp", "--data-params", "n_samples=200", "--data-params", "n_features=4",
        "--rounds", "3", "--eval-every", "1", "--run-dir", str(tmp_path / "runs"), "--plot", str(tmp_path / "p"),
        "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["plots"] == [str(tmp_path / "p" / "loss_auc_vs_time.png"), str(tmp_path / "p" / "round_time_vs_delay.png")]
    crc, uncoded = doc["runs"]
    np.testing.assert_allclose(np.load(crc["files"]["params"]), np.load(uncoded["files"]["params"]), rtol=1e-9)
    assert set(doc["rows"][0]) >= {"time_s", "round_ms", "stragglers_per_round", "faults", "test_loss", "accuracy",
                                   "roc_auc", "speedup"}


def test_a_bad_engine_is_refused_before_the_run_dir_holds_anything(tmp_path):
    from gradcode.runtime import ClusterConfig

    spec = TrainSpec("crc", workers=4, data_params=DATA)
    for engine, cluster, match in (("inproc", None, "engine must be one of"),
                                   ("inprocess", ClusterConfig(num_cpus=2), "num_cpus are the Ray engine's"),
                                   ("inprocess", ClusterConfig(transport="ray"), "transport are the Ray engine's")):
        with pytest.raises(ValueError, match=match):
            train(spec, run=RunConfig(rounds=2, run_dir=tmp_path / "r"), cluster=cluster, engine=engine)
        assert not (tmp_path / "r").exists()
    res = train(spec, run=RunConfig(rounds=2, run_dir=tmp_path / "r", eval_every=0), engine="inprocess")
    assert res.round_times.size == 2
    assert train(spec, run=RunConfig(run_dir=tmp_path / "d", eval_every=0), engine="inprocess").round_times.size == 100


def test_every_result_json_field_is_an_attribute_of_the_result_of_the_same_name(tmp_path):
    res = run(tmp_path, scheme="crc", stragglers=1, delay=0.1)
    doc = json.loads(json.dumps(res.to_json(), default=str))
    for key, value in doc.items():
        assert hasattr(res, key), key
        attr = getattr(res, key)
        attr = json_safe(attr.tolist() if isinstance(attr, np.ndarray) else attr)  # NaN: null, as written
        if key not in ("run_dir", "config", "metrics", "failures", "faults"):
            assert json.loads(json.dumps(attr, default=str)) == value, key


def test_only_a_run_whose_tasks_sleep_asks_for_interruptible_workers():
    """A run without injected sleeps (no delay model, or a trace of zeros) gets the engine's
    cheaper workers that cannot be interrupted (Ray: synchronous actors); any positive delay asks
    for interruptible ones."""
    from gradcode.runtime.setup import prepare

    def sleeps(**kw):
        return prepare(TrainSpec("crc", workers=4, stragglers=1, data_params=DATA, **kw), rounds=3).sleeps

    zeros = np.zeros((3, 4))
    late = zeros.copy()
    late[2, 1] = 0.1
    assert not sleeps()
    assert not sleeps(delay_model="trace", delay_params={"delays": zeros}, inject="full")
    assert sleeps(delay_model="trace", delay_params={"delays": late}, inject="full")
    assert sleeps(delay=0.05)


def test_the_codes_tolerance_and_the_slowed_workers_are_two_settings(tmp_path):
    """``stragglers`` slows workers, ``tolerance`` is the code's s (by default the slowed count):
    CRC tolerating 2 while 1 worker is slowed; a scheme_params s stands over the default but must
    agree with a tolerance given; a code object's own s must agree too; the config records both."""
    from gradcode.runtime.setup import prepare

    def setup(**kw):
        return prepare(TrainSpec("crc", workers=6, data_params=DATA, **kw), rounds=4)

    both = setup(stragglers=1, tolerance=2, delay=0.05)
    assert both.scheme.static_code.params["s"] == 2
    assert (both.draw.intercept > 0).sum(axis=1).tolist() == [1, 1, 1, 1]  # one worker slowed a round
    assert (both.config["stragglers"], both.config["tolerance"]) == (1, 2)
    assert setup(stragglers=2, delay=0.05).scheme.static_code.params["s"] == 2  # the default: the slowed count
    assert setup(stragglers=2, scheme_params={"s": 1}).scheme.static_code.params["s"] == 1
    assert setup(tolerance=3, scheme_params={"s": 3}).scheme.static_code.params["s"] == 3
    with pytest.raises(ValueError, match="s=1 and the run's tolerance 2 disagree"):
        setup(tolerance=2, scheme_params={"s": 1})
    with pytest.raises(ValueError, match="tolerance=1 but the code .* has s=2"):
        prepare(TrainSpec(make_code("crc", n=6, s=2), tolerance=1, data_params=DATA), rounds=2)
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        TrainSpec("crc", tolerance=-1)
    res = train(TrainSpec("crc", workers=6, stragglers=1, tolerance=2, delay=0.01, data_params=DATA),
                run=RunConfig(rounds=3, run_dir=tmp_path / "r", eval_every=0), engine=InProcessEngine())
    assert res.config["tolerance"] == 2 and len(res.round_times) == 3


def test_the_declared_compute_clock_charges_each_message_its_samples():
    """ComputeCost: a message costs per_sample x the samples its new partials took + per_message,
    whatever the host is doing: CRC (s = 1) computes two partitions a worker, uncoded one, so
    without delays their rounds take exactly 2 and 1 partitions' cost. The run's clock is recorded."""
    from gradcode.runtime.inprocess import ComputeCost

    def rounds(code, **kw):
        engine = InProcessEngine(compute_time=ComputeCost(per_sample=1e-3, per_message=0.5))
        spec = TrainSpec(code, workers=4, data_params=DATA, **kw)
        return train(spec, run=RunConfig(rounds=3, eval_every=0), engine=engine)

    crc, unc = rounds("crc", stragglers=1), rounds("uncoded")
    n_train = make_dataset(DataSpec("tandon-synthetic", DATA)).n_train
    per_partition = unc.round_times[0] - 0.5  # the largest partition's samples x 1e-3
    assert per_partition == pytest.approx(1e-3 * n_train / 4)  # 80 samples a partition
    assert unc.round_times == pytest.approx(np.full(3, 0.5 + per_partition), rel=1e-12)
    assert crc.round_times == pytest.approx(np.full(3, 0.5 + 2 * per_partition), rel=1e-12)
    assert unc.clock == {"clock": "virtual", "compute": "declared", "per_sample": 1e-3, "per_message": 0.5}
    assert unc.to_json()["clock"] == unc.clock


def test_the_in_process_clock_is_chosen_and_checked():
    from gradcode.runtime.inprocess import ComputeCost
    from gradcode.runtime.session import make_engine

    engine = make_engine("inprocess")
    assert engine._calibrate  # engine="inprocess": a per-sample cost timed once at start
    res = train(TrainSpec("crc", workers=4, stragglers=1, data_params=DATA),
                run=RunConfig(rounds=2, eval_every=0), engine=engine)
    assert res.clock["compute"] == "declared" and res.clock["per_sample"] > 0
    measured = train(TrainSpec("crc", workers=4, stragglers=1, data_params=DATA),
                     run=RunConfig(rounds=2, eval_every=0), engine=InProcessEngine(compute_time="measured"))
    assert measured.clock == {"clock": "virtual", "compute": "measured"}
    with pytest.raises(ValueError, match="compute_time must be"):
        InProcessEngine(compute_time="wall")
    for bad, error in ((-1.0, "must be >= 0"), (float("nan"), "must be finite"), ("1e-3", "must be a real number"),
                       (True, "must be a real number")):
        with pytest.raises((ValueError, TypeError), match=f"ComputeCost.per_sample {error}"):
            ComputeCost(per_sample=bad)
    with pytest.raises(ValueError, match="per_message must be >= 0"):
        InProcessEngine(compute_time=-0.1)
