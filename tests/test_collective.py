"""The collective path: decodes planned on notes and reduced by the workers that hold the messages,
replicas stepped on the workers (gradcode.codes.reduce, gradcode.runtime.replica,
gradcode.runtime.collective).

References: the held decode of the same messages (codes), and the star path's run of the same
configuration on the in-process engine (the driver): the same rounds, the same survivors, weights
equal to float32 rounding; replicas that stay bit-identical through stragglers, deaths and
restarts."""

from __future__ import annotations

import dataclasses

import itertools
import time

import numpy as np
import pytest

import gradcode
from codes_util import SMALL_INSTANCES, random_partials, received
from gradcode.codes.messages import Note, to_wire
from gradcode.codes.precision import ImpreciseDecodeError
from gradcode.codes.reduce import contribution, reduce_plan
from gradcode.errors import CollectiveUnsupportedError, NotDecodableError
from gradcode.runtime.inprocess import CollectiveCost

# ------------------------------------------------------------------------------ plans (codes)


def _dense_instances():
    out = []
    for name, examples in SMALL_INSTANCES.items():
        for params in examples:
            code = gradcode.make_code(name, **params)
            if not getattr(code, "lazy", False) and code.exact:
                out.append((name, params))
    return out


def _wire(code, partials, w, dtype):
    """Worker ``w``'s messages as a runtime worker sends them (values in ``dtype``, scales)."""
    enc = code.encode(w, partials[w])
    scales = code.message_scales(w, partials[w])
    return [to_wire(enc[r].astype(np.float32) if dtype != np.float64 else enc[r], scales[r], dtype)
            for r in range(len(enc))]


@pytest.mark.parametrize("reduce_dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name,params", _dense_instances())
def test_a_reduction_of_the_parts_is_the_held_decode_for_every_straggler_set(name, params, reduce_dtype):
    """Every code with coefficients, every straggler set it tolerates (at most 60 of them, drawn):
    the sum of the workers' parts, reduced in float64 or float32, equals the held decode of the same
    (float64) messages within the two bounds, and the true sum within the plan's; a plan's bound
    counts the reduction's rounding, and its acceptance is the held decode's rule."""
    code = gradcode.make_code(name, **params)
    rng = np.random.default_rng(7)
    d = 3 * code.chunks + 1  # a padded last chunk
    g, partials = random_partials(code, d, rng)
    msgs = {w: _wire(code, partials, w, np.float64) for w in range(code.n)}
    sets = [s for k in range(code.tolerance + 1) for s in itertools.combinations(range(code.n), k)]
    if len(sets) > 60:
        sets = [sets[i] for i in rng.choice(len(sets), 60, replace=False)]
    for stragglers in sets:
        held = received(code, msgs, set(stragglers))
        held = {w: v for w, v in held.items() if len(v)}
        notes = {w: [Note.of(x) for x in v] for w, v in held.items()}
        plan = reduce_plan(code, notes, dim=d, reduced_by=len(held), reduce_dtype=reduce_dtype)
        total = sum(contribution(plan.weights[w], [x.values for x in held[w]], chunks=code.chunks,
                                 length=plan.length, dtype=reduce_dtype).astype(np.float64) for w in held)[:d]
        ref = code.decode_report(held, dim=d)
        assert np.linalg.norm(total - ref.gradient) <= plan.error_bound + ref.error_bound
        assert np.linalg.norm(total - g.sum(axis=0)) <= plan.error_bound
        assert plan.error_bound >= ref.error_bound  # the reduction's own rounding is counted
        norm = np.linalg.norm(total)
        if plan.checked:  # the plain-sum rule accepts it before anything is summed
            assert plan.accept(norm) <= plan.rtol or plan.error_bound <= 4 * plan.plain_bound
            continue
        try:  # what the members judge: the held decode's rule on the reduced norm
            assert plan.accept(norm) == pytest.approx(plan.error_bound / norm)
        except ImpreciseDecodeError:
            assert plan.error_bound / norm > plan.rtol


def test_float64_messages_are_reduced_in_float64_and_narrower_ones_in_float32():
    """The reduction keeps the precision a user chose for the wire: float64 messages (a code whose
    coefficients amplify float32's rounding) are all-reduced in float64, judged in float64; float32
    and 16-bit ones in float32 (16-bit sums would overflow or lose the decode)."""
    code = gradcode.make_code("crc", n=4, s=1)
    for wire, reduced, judged in ((np.float64, "float64", "float64"), (np.float32, "float32", "float32"),
                                  (np.float16, "float32", "float16")):  # judged in the coarser of the two
        notes = {w: [Note(1.0, 1.0, np.dtype(wire), 5)] for w in range(3)}
        plan = reduce_plan(code, notes, dim=5, reduced_by=3)
        assert (plan.reduce_precision, plan.precision) == (reduced, judged)
    plan = reduce_plan(code, {w: [Note(1.0, 1.0, np.dtype(np.float64), 5)] for w in range(3)}, dim=5, reduced_by=3,
                       reduce_dtype=np.float32)  # asked for: the coarser precision judges
    assert plan.reduce_precision == plan.precision == "float32"


def test_a_plan_refuses_what_a_held_decode_refuses():
    code = gradcode.make_code("crc", n=4, s=1)
    note = Note(1.0, 1.0, np.dtype(np.float32), 5)
    with pytest.raises(NotDecodableError):
        reduce_plan(code, {0: [note], 1: [note]}, dim=5, reduced_by=2)
    with pytest.raises(gradcode.codes.NonFiniteMessageError) as info:
        reduce_plan(code, {0: [note], 1: [note], 2: [Note(float("nan"), 1.0, np.dtype(np.float32), 5)]}, dim=5,
                    reduced_by=3)
    assert info.value.workers == (2,)
    with pytest.raises(ValueError, match="length 5"):
        reduce_plan(code, {0: [Note(1.0, 1.0, np.dtype(np.float32), 4)]}, dim=5, reduced_by=1)
    with pytest.raises(TypeError, match="Note"):
        reduce_plan(code, {0: [np.zeros(5)]}, dim=5, reduced_by=1)


def test_operator_codes_have_no_plan():
    from gradcode.schemes.static import StaticScheme

    code = gradcode.make_code("commfr", n=12, k=6, N=12, K=6, construction="ldpc", dc=6, dv=3, seed=0, dense=False)
    assert code.lazy
    with pytest.raises(CollectiveUnsupportedError, match="peeling"):
        reduce_plan(code, {}, dim=4, reduced_by=1)
    assert "peeling" in StaticScheme(code).collective_support()


def test_a_plan_that_cancels_is_judged_on_the_reduced_norm():
    """Near an optimum the parts cancel: a plan the plain-sum rule does not accept outright is
    refused by accept() on a small reduced norm, exactly as the held decode is."""
    code = gradcode.make_code("crc", n=6, s=2, seed=0)
    rng = np.random.default_rng(0)
    d = 40
    g = rng.standard_normal((code.k, d))
    g -= g.mean(axis=0)  # the partial gradients cancel: sum_j g_j ~ 0
    partials = {w: g[list(code.placement[w])] for w in range(code.n)}
    held = {w: _wire(code, partials, w, np.float16) for w in (0, 2, 3, 5)}
    plan = reduce_plan(code, {w: [Note.of(x) for x in v] for w, v in held.items()}, dim=d, reduced_by=4)
    total = sum(contribution(plan.weights[w], [x.values for x in held[w]], chunks=1, length=d) for w in held)
    try:
        code.decode_report(held, dim=d)
        held_refused = False
    except ImpreciseDecodeError:
        held_refused = True
    if plan.checked:
        assert not held_refused
        return
    if held_refused:
        with pytest.raises(ImpreciseDecodeError):
            plan.accept(np.linalg.norm(total))


def test_a_contribution_is_an_array_of_its_own():
    v = np.arange(6, dtype=np.float32)
    own = contribution(np.array([[1.0]]), [v], chunks=1, length=6, dtype=np.float32)
    assert own is not v and np.array_equal(own, v) and own.flags.writeable  # summed into in place
    assert np.array_equal(contribution(np.array([[0.5]]), [v], chunks=1, length=6), 0.5 * v)
    out = contribution(np.array([[0.5, 2.0]]), [np.arange(6, dtype=np.float16)], chunks=2, length=6,
                       dtype=np.float64)
    assert out.shape == (12,) and np.array_equal(out, np.concatenate([0.5 * np.arange(6), 2.0 * np.arange(6)]))
    with pytest.raises(ValueError, match="shape"):
        contribution(np.ones((2, 1)), [v], chunks=1, length=6)


def test_the_ring_cost_model():
    cost = CollectiveCost(latency=1e-4, bandwidth=1e9)
    assert cost.seconds(1, 10**9) == 0.0
    assert cost.seconds(4, 4 * 10**8) == pytest.approx(6 * 1e-4 + 1.5 * 0.4)
    with pytest.raises(ValueError, match="bandwidth"):
        CollectiveCost(bandwidth=0)


# ------------------------------------------------------------------------------ the driver

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import gradcode.torch as gt  # noqa: E402
from gradcode.runtime import ClusterConfig, FaultConfig, RunConfig, TrainSpec  # noqa: E402
from gradcode.runtime.collective import CollectiveFallbackWarning  # noqa: E402
from gradcode.runtime.driver import TrainingStopped  # noqa: E402
from gradcode.runtime.base import Event  # noqa: E402
from gradcode.runtime.inprocess import InProcessEngine, WorkerDied  # noqa: E402
from gradcode.runtime.replica import ReduceReply  # noqa: E402


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(480, 12, generator=g)
    y = ((X[:, 0] + X[:, 1] ** 2) > 0.5).long()
    return X, y


def net():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(12, 24), nn.BatchNorm1d(24), nn.ReLU(), nn.Linear(24, 2))


def flat(module) -> np.ndarray:
    return torch.nn.utils.parameters_to_vector(module.parameters()).detach().numpy().copy()


class Counting(InProcessEngine):
    """Counts how lagging workers were brought up to date: updates replayed, whole copies."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.replays = self.syncs = 0

    def catch_up(self, w, updates):
        self.replays += 1
        super().catch_up(w, updates)

    def sync(self, w, source):
        self.syncs += 1
        super().sync(w, source)


class Watch:
    """A callback that checks, after every round, that every worker whose replica is at the
    driver's steps holds bit-identical parameters (white box: the in-process engine's cores)."""

    def __init__(self, engine):
        self.engine, self.rounds, self.uptodate = engine, 0, []

    def __call__(self, record):
        cores = [s.core for s in self.engine._slots if s.core is not None and s.core.replica is not None]
        newest = max(c.replica.versions for c in cores)
        now = [c for c in cores if c.replica.versions == newest]
        digests = {c.replica.digest(0) for c in now}
        assert len(digests) == 1, f"round {record['round']}: replicas differ: {digests}"
        self.rounds += 1
        self.uptodate.append(len(now))
        self.builds = [self.engine.builds(w) for w in range(self.engine.n)]


def run(data, transport, scheme="crc", *, engine=None, callback=None, rounds=10, optimizer="sgd", check=20,
        decode_rtol=None, **spec):
    spec.setdefault("workers", 4)
    spec.setdefault("stragglers", 1)
    spec.setdefault("delay", 0.3)
    engine = engine if engine is not None else InProcessEngine(compute_time=1e-3)
    return gt.fit(net(), data, TrainSpec(scheme, seed=3, **spec),
                  torch_config=gt.TorchConfig(optimizer=optimizer, optimizer_params={"lr": 0.05, "momentum": 0.9},
                                              batch_size=96, decode_rtol=decode_rtol),
                  run=RunConfig(rounds=rounds, eval_every=5, run_dir=None), cluster=ClusterConfig(transport=transport, replica_check=check),
                  engine=engine, callback=callback)


@pytest.mark.parametrize("scheme,spec", [
    ("crc", {}), ("frc", {}), ("uncoded", {"stragglers": 0, "delay": 0.0}), ("ignore", {}),
    ("partial", {"scheme_params": {"alpha": 2.0}}), ("agc", {"scheme_params": {"d": 2, "L": 2}}),
    ("g-agc", {"scheme_params": {"d": 2, "L": 2}}), ("cgc", {"scheme_params": {"d": 2, "m": 2}}),
    ("commfr", {"workers": 6, "scheme_params": {"k": 6, "N": 3, "K": 2, "construction": "mds-systematic"}}),
    ("gc-dc", {"workers": 6, "stragglers": 2, "scheme_params": {"clusters": 2, "r": 2, "ssi": "perfect"}}),
])
def test_collective_training_follows_the_star_path(data, scheme, spec, tmp_path, monkeypatch):
    """The same run on both paths: the same losses and final weights to float32 rounding (each
    round's gradient is exact on both; the collective path closes a round after its reduction, so
    a message that arrives meanwhile counts as arrived there and the survivors of later rounds may
    differ); every replica identical after every round: the straggler of each round takes part in
    its reduction with nothing to add (its reductions run beside its computation), so no worker
    ever lags."""
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    star = run(data, "channels", scheme, **spec)
    engine = Counting(compute_time=1e-3)
    watch = Watch(engine)
    coll = run(data, "collective", scheme, engine=engine, callback=watch, **spec)
    assert watch.rounds == 10
    assert engine.syncs == engine.replays == 0  # nobody lagged: no copy of the models, no update replayed
    if scheme == "crc":
        assert (coll.result.arrivals < 0).any(axis=1).all()  # a straggler every round, a member nonetheless
    np.testing.assert_allclose(coll.losses, star.losses, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(flat(coll.model), flat(star.model), rtol=1e-5, atol=1e-5)
    assert coll.result.clock["allreduce_bandwidth"] == CollectiveCost().bandwidth


@pytest.mark.parametrize("scheme,spec", [("uncoded", {"stragglers": 0, "delay": 0.0}), ("crc", {})])
def test_decodes_accepted_beyond_their_tolerance_are_counted_on_both_paths(data, scheme, spec, tmp_path,
                                                                          monkeypatch):
    """With a tolerance below float32's rounding, every round's decode is accepted only as no
    worse than a plain sum (the plan is accepted before the sum): both paths flag every round, also
    when every worker is a member of the reduction (no one left out, no keeper)."""
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    star = run(data, "channels", scheme, rounds=4, decode_rtol=1e-12, **spec)
    coll = run(data, "collective", scheme, rounds=4, decode_rtol=1e-12, **spec)
    assert star.result.loose_rounds == coll.result.loose_rounds == 4
    # the plan's bound also counts the reduction's rounding: no smaller than the held decode's
    assert (coll.result.loose >= 0.5 * star.result.loose).all() and (coll.result.loose > 1e-12).all()


def test_float64_messages_decode_on_the_collective_path_what_they_decode_on_the_star(data, tmp_path, monkeypatch):
    """AGC with L = 16 needs float64 messages (its float32 decode is refused): on the collective
    path they are reduced in float64, so the rounds close on the same survivors as on the star
    path, without waiting for more workers, and train the same weights."""
    import warnings

    from gradcode.runtime.driver import ImpreciseWaitWarning

    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    spec = TrainSpec("agc", workers=4, stragglers=1, delay=1.0, scheme_params={"d": 3, "L": 16}, seed=0)
    tconf = gt.TorchConfig(optimizer="sgd", optimizer_params={"lr": 0.1}, batch_size=96, wire_dtype="float64")
    reduced = spy_reductions(monkeypatch)
    out = {}
    for transport in ("channels", "collective"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ImpreciseWaitWarning)
            out[transport] = gt.fit(net(), data, spec, torch_config=tconf, run=RunConfig(rounds=4),
                                    cluster=ClusterConfig(transport=transport),
                                    engine=InProcessEngine(compute_time=1e-3))
    star, coll = out["channels"], out["collective"]
    assert [r[0] for r in reduced] == [0, 1, 2, 3] and {p for r in reduced for p in r[1]} == {"float64"}
    assert {r[2] for r in reduced} == {"stepped"}
    np.testing.assert_array_equal(coll.result.arrivals < 0, star.result.arrivals < 0)
    np.testing.assert_allclose(flat(coll.model), flat(star.model), rtol=1e-5, atol=1e-6)


def spy_reductions(monkeypatch) -> list:
    """``(round, [each plan's reduce precision], outcome)`` of every reduction the collective
    driver runs from now on (outcome ``"stepped"``, ``"refused"`` or ``"failed"``)."""
    from gradcode.runtime import collective

    reduced = []
    real = collective.CollectiveDriver._reduce

    def spy(self, rnd, plans, members):
        row = (rnd.t, [p.reduce_precision for _, p in plans])
        try:
            ok = real(self, rnd, plans, members)
        except ImpreciseDecodeError:
            reduced.append((*row, "refused"))
            raise
        reduced.append((*row, "stepped" if ok else "failed"))
        return ok

    monkeypatch.setattr(collective.CollectiveDriver, "_reduce", spy)
    return reduced


def test_a_reduction_certain_to_be_refused_is_not_run(data, tmp_path, monkeypatch):
    """AGC (L = 16) in float32 streams its messages, and its decode is refused until enough of them
    are in: each refusal gives where the gradient's norm lies, so a later plan whose bound is
    beyond the tolerance at any such norm is not all-reduced (it was, at every message: 12 or more
    reductions a round), nor a float64 one certain to be refused (here every float64 reduction run
    was accepted). The rounds close on the star path's survivors to the same weights."""
    import warnings

    from gradcode.runtime.driver import ImpreciseWaitWarning

    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    spec = TrainSpec("agc", workers=4, stragglers=1, delay=1.0, scheme_params={"d": 3, "L": 16}, seed=0)
    tconf = gt.TorchConfig(optimizer="sgd", optimizer_params={"lr": 0.1}, batch_size=96)
    reduced = spy_reductions(monkeypatch)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ImpreciseWaitWarning)
        for transport in ("channels", "collective"):
            out[transport] = gt.fit(net(), data, spec, torch_config=tconf, run=RunConfig(rounds=3),
                                    cluster=ClusterConfig(transport=transport),
                                    engine=InProcessEngine(compute_time=1e-3))
    for t in range(3):
        rows = [r for r in reduced if r[0] == t]
        assert rows[-1][2] == "stepped" and len(rows) <= 2, rows
        assert ("float64" not in rows[0][1]) and all(r[2] == "stepped" for r in rows if "float64" in r[1])
    star, coll = out["channels"], out["collective"]
    np.testing.assert_array_equal(coll.result.arrivals < 0, star.result.arrivals < 0)
    np.testing.assert_allclose(flat(coll.model), flat(star.model), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("margin", [2.0, 1.5, 1.2])
def test_a_reduction_refused_in_float32_is_run_again_in_float64_before_the_round_waits(data, tmp_path,
                                                                                       monkeypatch, margin):
    """CRC(16, 3) with a strict tolerance between the held decode's relative bound and the float32
    ring's (its rounding grows with the 16 members; ``margin`` times the held decode's largest):
    the star path decodes every round (at ``margin`` 2 without waiting; nearer, after waiting for
    more workers in some rounds); the collective path's float32 reduction is refused (or certain
    to be), and the same messages reduced in float64 are accepted, so the rounds close on the
    star's survivors to the same weights (a float32 refusal certain in advance once stopped the
    run here, every result in and the float64 reduction never tried)."""
    import warnings

    from gradcode.runtime.driver import ImpreciseWaitWarning

    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    spec = TrainSpec("crc", workers=16, stragglers=3, delay=0.3, seed=3)

    def fit(transport, rtol, strict):
        tconf = gt.TorchConfig(optimizer="sgd", optimizer_params={"lr": 0.05}, batch_size=96, decode_rtol=rtol,
                               decode_strict=strict)
        return gt.fit(net(), data, spec, torch_config=tconf, run=RunConfig(rounds=2),
                      cluster=ClusterConfig(transport=transport), engine=InProcessEngine(compute_time=1e-3))

    with warnings.catch_warnings():  # every round flagged (some wait for more workers): the held decode's bound
        warnings.simplefilter("ignore", ImpreciseWaitWarning)
        rtol = margin * float(fit("channels", 1e-12, False).result.loose.max())
    reduced = spy_reductions(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error" if margin == 2.0 else "ignore", ImpreciseWaitWarning)
        star = fit("channels", rtol, True)
        coll = fit("collective", rtol, True)
    assert [r for r in reduced if r[2] == "stepped"] == [(0, ["float64"], "stepped"), (1, ["float64"], "stepped")]
    if margin == 2.0:
        assert reduced == [(0, ["float32"], "refused"), (0, ["float64"], "stepped"), (1, ["float32"], "refused"),
                           (1, ["float64"], "stepped")]
    np.testing.assert_array_equal(coll.result.arrivals < 0, star.result.arrivals < 0)
    np.testing.assert_allclose(flat(coll.model), flat(star.model), rtol=1e-6, atol=1e-7)


class Ledgered(InProcessEngine):
    """Records the largest array the driver handed the workers (``put``, task parameters,
    catch-up updates) or got from them in an event, after the run's first round."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.sent, self.got, self.fetches, self.rounds = 0, 0, 0, -1

    @staticmethod
    def _largest(value) -> int:
        if isinstance(value, np.ndarray):
            return value.size
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, (list, tuple)):
            return max((Ledgered._largest(v) for v in value), default=0)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return max((Ledgered._largest(getattr(value, f.name)) for f in dataclasses.fields(value)), default=0)
        return 0

    def submit(self, w, t, tasks, params, sleeps=(), fail=False):
        self.rounds = max(self.rounds, t)
        if t > 0:
            self.sent = max(self.sent, self._largest(list(params)))
        return super().submit(w, t, tasks, params, sleeps, fail)

    def catch_up(self, w, updates):
        self.sent = max(self.sent, self._largest(list(updates)))
        return super().catch_up(w, updates)

    def reduce(self, t, orders):
        self.sent = max(self.sent, self._largest(list(orders.values())))
        return super().reduce(t, orders)

    def fetch(self, w):
        self.fetches += 1
        return super().fetch(w)

    def poll(self, timeout):
        events = super().poll(timeout)
        if self.rounds > 0:
            self.got = max([self.got] + [self._largest(ev.payload) for ev in events])
        return events


def test_on_the_collective_path_no_gradient_or_parameter_vector_crosses_the_driver(data):
    """The driver's share of a round is notes in, orders out, replies in: after the first round no
    array of more than a few numbers goes to a worker or comes from one (the star path sends the
    parameters and gets the messages, each ``d`` numbers), and the parameters come back only for
    the evaluations and the end of the run."""
    from gradcode.torch.problem import ModelLayout

    d = ModelLayout(net()).dim
    paths = {}
    for transport in ("channels", "collective"):
        engine = Ledgered(compute_time=1e-3)
        run(data, transport, "crc", engine=engine, rounds=6)
        paths[transport] = engine
    star, coll = paths["channels"], paths["collective"]
    assert star.sent >= d and star.got >= d - 2
    assert coll.sent < 100 and coll.got < 100, (coll.sent, coll.got)  # plans' weights, notes, replies
    assert 1 <= coll.fetches <= 3  # an evaluation at round 5, the end of the run


class Uninterruptible(Counting):
    """The workers' computations cannot be stopped (as a real computation cannot, unlike an
    injected sleep): a straggler is still busy as the next round starts."""

    def abort(self, w, t):
        pass


def test_a_worker_still_busy_when_the_next_round_starts_replays_the_updates_it_missed(data, tmp_path, monkeypatch):
    """A straggler still computing an earlier round gets no task (skip busy) and takes no part in
    the round's reduction: it lags, and before its next task it replays the updates it missed
    (kept by a member), bit-identical to the members (the watch compares it once it is up to
    date); the run ends where the star path ends."""
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    star = run(data, "channels", "crc")
    engine = Uninterruptible(compute_time=1e-3)
    watch = Watch(engine)
    coll = run(data, "collective", "crc", engine=engine, callback=watch)
    assert watch.rounds == 10
    assert engine.replays >= 1 and engine.syncs == 0
    np.testing.assert_allclose(flat(coll.model), flat(star.model), rtol=1e-5, atol=1e-5)


def test_a_worker_that_dies_in_a_round_is_synced_after_its_restart(data, tmp_path, monkeypatch):
    """An injected death (worker 2 in round 3; Ray restarts it with no replica): the round
    decodes from the others, the restarted worker gets the whole state from an up-to-date one
    before its next task, and the run ends where the star path ends."""
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    kw = dict(delay=0.0, stragglers=1)
    faults = FaultConfig(fail=("2@3",))
    ref = gt.fit(net(), data, TrainSpec("crc", workers=4, seed=3, **kw),
                 torch_config=gt.TorchConfig(optimizer="sgd", optimizer_params={"lr": 0.05}, batch_size=96),
                 run=RunConfig(rounds=8), faults=faults, engine=InProcessEngine(compute_time=1e-3, restart_time=2e-3))
    engine = InProcessEngine(compute_time=1e-3, restart_time=2e-3)
    watch = Watch(engine)
    coll = gt.fit(net(), data, TrainSpec("crc", workers=4, seed=3, **kw),
                  torch_config=gt.TorchConfig(optimizer="sgd", optimizer_params={"lr": 0.05}, batch_size=96),
                  run=RunConfig(rounds=8), faults=faults, cluster=ClusterConfig(transport="collective"),
                  engine=engine, callback=watch)
    deaths = [f for f in coll.result.failures if f["kind"] == "died"]
    assert len(deaths) == 1 and deaths[0]["worker"] == 2
    assert watch.builds == [1, 1, 2, 1]  # worker 2 restarted
    np.testing.assert_allclose(flat(coll.model), flat(ref.model), rtol=1e-5, atol=1e-6)
    assert (coll.result.arrivals[4:, 2] >= 0).any()  # back, synced, and computing at the current step


class CrashInReduce(InProcessEngine):
    """Worker ``victim`` dies just before the reduction of round ``at`` (holding its messages)."""

    def __init__(self, victim, at, **kw):
        super().__init__(**kw)
        self.victim, self.at, self.fired = victim, at, False

    def reduce(self, t, orders):
        if t == self.at and not self.fired and self.victim in orders:
            self.fired = True
            self.crash(self.victim)
        super().reduce(t, orders)


@pytest.mark.parametrize("scheme,spec", [("crc", {}),
                                         ("gc-dc", {"workers": 6, "scheme_params": {"clusters": 2, "r": 2}})])
def test_a_member_that_dies_during_the_reduction_is_left_out_and_the_round_planned_again(data, tmp_path,
                                                                                           monkeypatch, scheme, spec):
    """GC-DC too: the dead member's codeword is forgotten and its cluster decodes from the others."""
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    ref = run(data, "channels", scheme, delay=0.0, rounds=6, **spec)
    engine = CrashInReduce(1, 2, compute_time=1e-3)
    coll = run(data, "collective", scheme, delay=0.0, rounds=6, engine=engine, **spec)
    assert engine.fired
    deaths = [f for f in coll.result.failures if f["kind"] == "died"]
    assert [(f["worker"], f["round"]) for f in deaths] == [(1, 2)]
    assert coll.result.arrivals[2, 1] < 0  # a straggler of its round
    np.testing.assert_allclose(flat(coll.model), flat(ref.model), rtol=1e-5, atol=1e-6)


def test_runs_the_collective_path_cannot_take_keep_the_star_path_and_say_why(data, tmp_path, monkeypatch):
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    from gradcode.schemes.static import StaticScheme

    class StarOnly(StaticScheme):  # a scheme whose decode is not planned as a reduction
        def collective_support(self):
            return "StarOnly decodes at the driver"

    with pytest.warns(CollectiveFallbackWarning, match="StarOnly decodes at the driver"):
        res = gt.fit(net(), data, TrainSpec(StarOnly(gradcode.make_code("crc", n=4, s=1)), workers=4, stragglers=1,
                                            seed=0),
                     torch_config=gt.TorchConfig(batch_size=120), run=RunConfig(rounds=3),
                     cluster=ClusterConfig(transport="collective"), engine="inprocess")
    assert "allreduce_bandwidth" not in res.result.clock

    assert "verify" in StaticScheme(gradcode.make_code("crc", n=4, s=1), verify=True).collective_support()
    assert StaticScheme(gradcode.make_code("crc", n=4, s=1)).collective_support() is None
    with pytest.warns(CollectiveFallbackWarning, match="whole training set"):
        gradcode.train(TrainSpec("crc", workers=4, stragglers=1, data="tandon-synthetic"),
                       run=RunConfig(rounds=2, run_dir=tmp_path / "np"),
                       cluster=ClusterConfig(transport="collective"), engine="inprocess")


class Drift(InProcessEngine):
    """Worker 0's replica is nudged after round 1's reduction (a worker computing differently)."""

    def reduce(self, t, orders):
        super().reduce(t, orders)
        if t == 1:
            rep = self._slots[0].core.replica
            p = rep.models[0].params.copy()
            p[0] += 1e-3
            rep.models[0].params = p


def test_replicas_that_differ_stop_the_run_naming_the_workers(data, tmp_path, monkeypatch):
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    with pytest.raises(TrainingStopped, match=r"round 2: the replicas of model 0 differ after the same update: the"
                                              r" parameter digest of workers \[0\] differs from that of workers"
                                              r" \[1, 2, 3\]"):
        run(data, "collective", delay=0.0, rounds=5, engine=Drift(compute_time=1e-3), check=3)


def test_a_task_for_a_replica_version_its_worker_lacks_is_refused():
    from gradcode.runtime.replica import ModelState, Replica, ReplicaRef, StaleReplicaError

    rep = Replica([ModelState(np.zeros(3), None, None, 4)])
    assert rep.params(ReplicaRef(0, 4), 0) is rep.models[0].params
    with pytest.raises(StaleReplicaError, match="step 4; the task needs step 5"):
        rep.params(ReplicaRef(0, 5), 0)


# ------------------------------------------------------------------------------ on Ray (gloo)


def test_on_ray_the_members_all_reduce_through_gloo_and_match_the_star_path(data, ray_session, tmp_path,
                                                                            monkeypatch):
    """Ray actors, channels, gloo groups of the members: the same run as the star path (one worker
    0.3 s late in every round: a straggler every round, synced through Ray's object store before
    its next task), final weights equal to float32 rounding."""
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    star = run(data, "channels", engine="ray", rounds=6)
    coll = run(data, "collective", engine="ray", rounds=6, check=2)
    assert coll.result.clock["transport"] == "collective (gloo)"
    assert (coll.result.arrivals < 0).sum(axis=1).tolist() == [1] * 6
    np.testing.assert_allclose(flat(coll.model), flat(star.model), rtol=1e-5, atol=1e-6)


def test_on_ray_a_worker_that_dies_is_restarted_synced_and_takes_part_again(data, ray_session, tmp_path,
                                                                            monkeypatch):
    """Worker 1's process exits in round 2; Ray restarts it (no replica: a new process), it gets
    the whole state from an up-to-date worker through the object store, computes again, and the
    run ends where the same run ends in process (the same delays: the same rounds' survivors)."""
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    spec = TrainSpec("crc", workers=4, stragglers=1, delay=0.3, seed=3)
    tconf = gt.TorchConfig(optimizer="sgd", optimizer_params={"lr": 0.05, "momentum": 0.9}, batch_size=96)
    res = gt.fit(net(), data, spec, torch_config=tconf, run=RunConfig(rounds=40), faults=FaultConfig(fail=("1@2",)),
                 cluster=ClusterConfig(transport="collective", replica_check=1), engine="ray")
    deaths = [f for f in res.result.failures if f["kind"] == "died"]
    assert [f["worker"] for f in deaths] == [1]
    assert deaths[0]["back_in_round"] is not None  # restarted by Ray, synced, computing again
    assert (res.result.arrivals[deaths[0]["back_in_round"]:, 1] >= 0).any()
    ref = gt.fit(net(), data, spec, torch_config=tconf, run=RunConfig(rounds=40), engine="inprocess")
    # the same updates whenever the same workers decode (float32 rounding otherwise)
    np.testing.assert_allclose(flat(res.model), flat(ref.model), rtol=1e-4, atol=1e-5)


def test_a_collective_run_resumes_from_its_checkpoint_where_an_unbroken_run_goes(data, tmp_path):
    """Checkpoints read the models from an up-to-date worker; a resumed run joins its workers with
    the checkpoint's models and optimizer states (SGD with momentum) and ends where the unbroken
    run ends."""
    def go(rounds, run_dir, resume=False):
        return gt.fit(net(), data, TrainSpec("crc", workers=4, stragglers=1, delay=0.3, seed=3),
                      torch_config=gt.TorchConfig(optimizer="sgd", optimizer_params={"lr": 0.05, "momentum": 0.9},
                                                  batch_size=96),
                      run=RunConfig(rounds=rounds, checkpoint_every=3, run_dir=run_dir, resume=resume),
                      cluster=ClusterConfig(transport="collective"), engine=InProcessEngine(compute_time=1e-3))

    whole = go(9, tmp_path / "whole")
    go(6, tmp_path / "split")
    resumed = go(9, tmp_path / "split", resume=True)
    np.testing.assert_allclose(flat(resumed.model), flat(whole.model), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(resumed.losses[6:], whole.losses[6:], rtol=1e-5)


def test_workers_own_loop_refuses_the_collective_path(data):
    with pytest.raises(ValueError, match="your loop steps the model here"):
        gt.Workers(net(), data, TrainSpec("crc", workers=4, stragglers=1),
                   cluster=ClusterConfig(transport="collective"), engine="inprocess")


class StaleInReduce(InProcessEngine):
    """Worker 1 loses the messages it kept just before round 2's reduction (a replica that cannot
    take part, alive)."""

    def reduce(self, t, orders):
        if t == 2 and 1 in orders:
            self._slots[1].core.replica._held.clear()
        super().reduce(t, orders)


def test_a_member_that_cannot_contribute_is_left_out_alive_and_no_member_steps_without_it(data, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    ref = run(data, "channels", delay=0.0, rounds=5)
    coll = run(data, "collective", delay=0.0, rounds=5, engine=StaleInReduce(compute_time=1e-3), check=1)
    assert not coll.result.failures  # alive: no death recorded
    assert coll.result.arrivals[2, 1] < 0  # planned again without it
    np.testing.assert_allclose(flat(coll.model), flat(ref.model), rtol=1e-5, atol=1e-6)


def test_a_note_of_a_sum_that_overflowed_is_not_finite():
    from gradcode.runtime.records import finite

    assert finite(Note(3.0, 1.0, np.dtype(np.float16), 4))
    assert not finite(Note(float("inf"), 1.0, np.dtype(np.float16), 4))


def in_threads(members, group: int, size: int, parts, ok=None) -> list:
    """``members[r].allreduce(group, r, size, ...)`` of ``parts[r]`` for each rank ``r`` at once, in
    threads of this process (each member its own store connection): each rank's sum, or the
    :class:`ReductionFailed` it raised."""
    import threading

    from gradcode.runtime.gloo import ReductionFailed

    out = [None] * len(members)

    def one(r):
        try:
            out[r] = members[r].allreduce(group, r, size, (group,), parts[r], ok=True if ok is None else ok[r])
        except ReductionFailed as exc:
            out[r] = exc

    threads = [threading.Thread(target=one, args=(r,)) for r in range(len(members))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    return out


def test_one_gloo_all_reduce_sums_the_parts_and_agrees_on_who_could_not_contribute():
    """``Groups.allreduce``: the parts and the members' flags go in one all-reduce; the sum comes
    back less the flags, and when a member cannot contribute every member raises at once, naming
    its rank (three members in threads of this process, each with its own store connection)."""
    from gradcode.runtime.gloo import Groups, ReductionFailed, driver_store

    store, port = driver_store("127.0.0.1", 20.0)
    members = [Groups("127.0.0.1", port, 20.0) for _ in range(3)]
    parts = [np.arange(5, dtype=np.float32) * (r + 1) for r in range(3)]

    def reduce(group, ok):
        return in_threads(members, group, 3, [np.concatenate([p, np.zeros(3, dtype=np.float32)]) for p in parts], ok)

    for total in reduce(0, (True, True, True)):
        np.testing.assert_array_equal(total, np.arange(5, dtype=np.float32) * 6)
    for exc in reduce(0, (True, False, True)):  # the cached group again; rank 1 cannot contribute
        assert isinstance(exc, ReductionFailed) and exc.absent == (1,)
    wide = [np.array([1.0 + 2.0**-40 * (r + 1), 0.0, 0.0, 0.0]) for r in range(3)]  # float64: beyond float32
    for total in in_threads(members, 1, 3, wide, (True, True, True)):
        assert total.dtype == np.float64 and total[0] == 3.0 + 6 * 2.0**-40
    alone = members[0].allreduce(7, 0, 1, (7,), np.array([2.0, 3.0, 0.0], dtype=np.float32))
    np.testing.assert_array_equal(alone, [2.0, 3.0])
    with pytest.raises(ReductionFailed, match="cannot contribute"):
        members[0].allreduce(7, 0, 1, (7,), np.array([2.0, 3.0, 0.0], dtype=np.float32), ok=False)
    del store


def test_a_close_after_a_reduction_returns_the_plan_the_members_reduced_by():
    """A note that arrives while the members reduce does not change the round's plan: the close
    returns the plan they reduced by (not a new solve); a member's death voids it."""
    from gradcode.schemes.static import StaticScheme

    code = gradcode.make_code("crc", n=4, s=1)
    rng = np.random.default_rng(3)
    _, partials = random_partials(code, 5, rng)
    scheme = StaticScheme(code)
    scheme.plan(0)
    for w in range(3):
        scheme.on_result(0, w, 0, Note.of(_wire(code, partials, w, np.float32)[0]), 0.1 * w)
    (job, plan), = scheme.reduce_plans(0, frozenset(range(3)), reduced_by=3)
    scheme.on_result(0, 3, 0, Note.of(_wire(code, partials, 3, np.float32)[0]), 0.5)  # late, mid-reduction
    (_, closed), = scheme.close(0, frozenset(range(3)))
    assert closed is plan and set(plan.workers) <= {0, 1, 2}
    scheme.plan(1)
    for w in range(4):
        scheme.on_result(1, w, 0, Note.of(_wire(code, partials, w, np.float32)[0]), 0.1 * w)
    (_, first), = scheme.reduce_plans(1, frozenset(range(4)), reduced_by=4)
    scheme.forget_results(1, 0)  # worker 0 died holding its message: its weights are void
    (_, closed), = scheme.close(1, frozenset({1, 2, 3}))
    assert closed is not first and 0 not in closed.workers


def test_a_part_without_its_flag_slots_is_refused():
    from gradcode.runtime.gloo import Groups

    groups = Groups.__new__(Groups)  # no store needed: refused before any group is reached
    groups._groups = {}
    with pytest.raises(ValueError, match="2 flag slots"):
        groups.allreduce(0, 0, 2, (0,), np.zeros(2, dtype=np.float32))


def test_the_in_process_clock_charges_the_ring_with_the_parts_and_their_flags(data, tmp_path, monkeypatch):
    """Two runs that differ only in the declared bandwidth: every round differs by the ring's
    bandwidth term, 2 (k - 1) / k of the bytes gloo moves (the part, float32, and k flag slots)."""
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    times = {}
    for bw in (1e6, 2e6):
        engine = InProcessEngine(compute_time=1e-3, collective_cost=CollectiveCost(latency=0.0, bandwidth=bw))
        res = run(data, "collective", "uncoded", engine=engine, stragglers=0, delay=0.0, rounds=3)
        times[bw] = np.asarray(res.result.round_times)
    k, d = 4, flat(net()).size + 2 + 2 * 24  # parameters, BatchNorm's two buffers, the loss and the count
    nbytes = 4 * (d + k)
    np.testing.assert_allclose(times[1e6] - times[2e6], 2 * (k - 1) / k * nbytes * (1 / 1e6 - 1 / 2e6), rtol=1e-9)


def test_a_group_whose_member_never_comes_is_cancelled_at_once():
    """A member that died before it joined a new group: the driver cancels the group
    (``cancel_group``) and the others stop waiting within milliseconds, not the group's timeout
    (two members in threads of this process; the third never comes)."""
    import threading

    from gradcode.runtime.gloo import Groups, ReductionFailed, cancel_group, driver_store

    store, port = driver_store("127.0.0.1", 30.0)
    members = [Groups("127.0.0.1", port, 30.0) for _ in range(2)]
    start = time.monotonic()
    threading.Timer(0.3, cancel_group, (store, 3)).start()  # rank 2 died before it joined
    out = in_threads(members, 3, 3, [np.zeros(4, dtype=np.float32)] * 2)
    assert time.monotonic() - start < 5
    assert all(isinstance(x, ReductionFailed) and "cancelled" in str(x) for x in out), out
    del store


class DiesBeforeJoining(InProcessEngine):
    """Worker ``victim`` dies before it joins round ``at``'s reduction; the other members wait for
    it, as in gloo's rendezvous, until the driver cancels their group."""

    def __init__(self, victim, at, **kw):
        super().__init__(**kw)
        self.victim, self.at, self.cancelled, self._held, self._inject = victim, at, [], None, []

    def reduce(self, t, orders):
        if t == self.at and self._held is None and self.victim in orders:
            self.crash(self.victim)
            self._held = (t, orders)
            self._inject = [Event(self.victim, t, "failed", WorkerDied("died before it joined"), lost=True)]
            return
        super().reduce(t, orders)

    def cancel_reduction(self, group):
        self.cancelled.append(group)
        t, orders = self._held
        self._inject += [Event(w, t, "reduced", ReduceReply(w, t, error="failed", message="group cancelled"))
                         for w in orders if w != self.victim]

    def poll(self, timeout):
        if self._inject:
            events, self._inject = self._inject, []
            return events
        return super().poll(timeout)


def test_a_member_that_dies_before_joining_gets_its_group_cancelled(data, tmp_path, monkeypatch):
    """The driver cancels the group as soon as it sees the member's death (the others would wait
    for the group's timeout otherwise: here, for ever), then plans the round again without it."""
    monkeypatch.setenv("GRADCODE_RUNS", str(tmp_path))
    ref = run(data, "channels", "crc", delay=0.0, rounds=6)
    engine = DiesBeforeJoining(1, 2, compute_time=1e-3)
    coll = run(data, "collective", "crc", delay=0.0, rounds=6, engine=engine)
    assert len(engine.cancelled) == 1
    assert [(f["worker"], f["round"]) for f in coll.result.failures if f["kind"] == "died"] == [(1, 2)]
    np.testing.assert_allclose(flat(coll.model), flat(ref.model), rtol=1e-5, atol=1e-6)


def test_a_member_that_neither_comes_nor_dies_is_named_after_the_join_timeout(monkeypatch):
    """A hung member (alive, its reductions' thread stuck): the others stop after
    ``Groups.JOIN_TIMEOUT``, naming its rank, so the driver plans the round again without it."""
    from gradcode.runtime.gloo import Groups, ReductionFailed, driver_store

    monkeypatch.setattr(Groups, "JOIN_TIMEOUT", 0.5)
    store, port = driver_store("127.0.0.1", 30.0)
    out = in_threads([Groups("127.0.0.1", port, 30.0) for _ in range(2)], 5, 3, [np.zeros(4, dtype=np.float32)] * 2)
    assert all(isinstance(x, ReductionFailed) and x.absent == (2,) for x in out), out
    del store
