"""The simulator in bounded memory: block-wise draws equal the whole-run draw,
summaries without records equal those computed from the records, a long run holds no per-round
arrays unless asked, and the running statistics (sketch quantiles, batch-means CI) are right."""

from __future__ import annotations

import gc
import json
import math
import tracemalloc

import numpy as np
import pytest

import gradcode
import gradcode.sim.simulator as simulator
from codes_util import SMALL_INSTANCES
from gradcode.schemes import ProtocolError, Scheme, Task
from gradcode.sim import NoRecordsError, QuantileSketch, TimeStats, pooled_stats
from gradcode.sim.simulator import draw_blocks

make_model = gradcode.make_delay_model
TABLES = ("round_times", "stragglers", "arrivals", "waitout_rounds", "job_done_round", "finish_times")


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 64 rounds, so that short runs cross many block boundaries."""
    monkeypatch.setattr(simulator, "_BLOCK", 64)


def _models():
    trace_rows = np.random.default_rng(0).exponential(size=(320, 12))
    out = [(name, make_model(name)) for name in gradcode.available_delay_models() if name != "trace"]
    out += [
        ("trace", make_model("trace", delays=trace_rows)),
        ("trace-wrap-offset", make_model("trace", delays=trace_rows, offset=40, wrap=True)),
        ("trace-proportional", make_model("trace", delays=trace_rows, trace_load=0.25, load_rule="proportional",
                                          offset=7)),
        ("trace-additive", make_model("trace", delays=trace_rows, trace_load=0.25, load_slope=0.3, wrap=True)),
        ("fixed-s0", make_model("fixed", stragglers=0)),
        ("partial-all", make_model("partial", stragglers=12, alpha=3)),
        ("comm", make_model("shifted-exp", comm=0.5, comm_latency=0.1)),
    ]
    return out


# ------------------------------------------------------------------------------ block draws


@pytest.mark.parametrize("name,model", _models(), ids=[m[0] for m in _models()])
def test_block_draws_equal_the_whole_run_draw_and_leave_the_generator_alike(name, model):
    rounds, n = 300, 12
    whole_rng, block_rng = np.random.default_rng(7), np.random.default_rng(7)
    whole = model.draw(rounds, n, whole_rng)
    parts = list(draw_blocks(model, rounds, n, block_rng, 64))
    assert [(a, b) for a, b, _ in parts] == [(a, min(a + 64, rounds)) for a in range(0, rounds, 64)]
    for field in ("intercept", "slope", "straggling"):
        got = np.concatenate([getattr(d, field) for _, _, d in parts])
        np.testing.assert_array_equal(got, getattr(whole, field), err_msg=f"{name}: {field}")
    # the next draws from the Generator are the same: block drawing consumed it identically
    assert whole_rng.random() == block_rng.random()


def test_block_draws_keep_the_trace_errors():
    rows = np.ones((10, 4))
    with pytest.raises(ValueError, match="wrap=True"):
        list(draw_blocks(make_model("trace", delays=rows), 11, 4, None, 4))
    with pytest.raises(ValueError, match="workers"):
        list(draw_blocks(make_model("trace", delays=rows), 5, 6, None, 4))


class _StreamingChain:
    """A delay model of its own (duck-typed) that streams: a two-state chain per worker whose
    state is carried from block to block by ``draw_blocks``; ``draw`` is the same chain at once."""

    def __init__(self):
        self.blocks_drawn = 0

    def _chain(self, rounds, n, rng, state):
        from gradcode.stragglers import Draw

        u = rng.random((rounds, n))
        slow = np.empty((rounds, n), dtype=bool)
        for t in range(rounds):
            state = np.where(state, u[t] >= 0.3, u[t] < 0.1)
            slow[t] = state
        return Draw(np.zeros((rounds, n)), np.where(slow, 5.0, 1.0), slow), state

    def draw(self, rounds, n, rng=None):
        return self._chain(rounds, n, np.random.default_rng(rng), np.zeros(n, dtype=bool))[0]

    def draw_blocks(self, rounds, n, rng, block):
        state = np.zeros(n, dtype=bool)
        for a in range(0, rounds, block):
            b = min(rounds, a + block)
            d, state = self._chain(b - a, n, rng, state)
            self.blocks_drawn += 1
            yield a, b, d

    def message_time(self, fraction):
        return 0.0


@pytest.mark.usefixtures("small_blocks")
def test_a_model_with_its_own_block_draw_streams_through_it():
    model = _StreamingChain()
    code = gradcode.make_code("crc", n=6, s=2)
    res = gradcode.simulate(code, model, 640, seed=4, records=True)
    assert model.blocks_drawn == 10
    replay = gradcode.simulate(code, model.draw(640, 6, 4).times(code.worker_loads), 640, records=True)
    for name in ("round_times", "stragglers", "arrivals"):
        np.testing.assert_array_equal(getattr(res, name), getattr(replay, name))


# ------------------------------------------------------------------------------ records or not


def _cases():
    for name in ("crc", "frc", "partial", "agc", "gc-sc", "ignore"):
        params = SMALL_INSTANCES[name][0]
        yield name, params


def _same(a, b) -> bool:
    """Exactly equal, NaN equal to NaN, through dicts and lists (summaries hold texts too, which
    pytest.approx refuses with a tolerance)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    return a == b


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("model_name", ["fixed", "bernoulli", "shifted-exp", "gilbert-elliot", "trace"])
def test_summaries_without_records_equal_those_computed_from_the_records(model_name):
    """Same seed, records or not: the same rounds, and the summary of a run without records equals,
    key by key and exactly, the one computed from the full per-round tables with numpy."""
    params = dict(delays=np.random.default_rng(1).exponential(size=(500, 12)), subset=True) if model_name == "trace" else {}
    model = make_model(model_name, **params)
    for name, code_params in _cases():
        code = gradcode.make_code(name, **code_params)
        for close in ("decodable", 0.2):
            for method, rounds in (("fast", 500), ("events", 90)):
                kw = dict(seed=3, close=close, method=method)
                full = gradcode.simulate(code, model, rounds, records=True, **kw)
                bare = gradcode.simulate(code, model, rounds, records=False, **kw)
                assert full.has_records and not bare.has_records
                s_full, s_bare = full.summary(), bare.summary()
                assert _same(s_bare, s_full), (name, close, method)
                rt = full.round_times
                expect = {
                    "rounds": rounds, "workers": code.n, "mean": rt.mean(), "median": np.median(rt),
                    "p95": np.percentile(rt, 95), "max": rt.max(), "min": rt.min(), "std": rt.std(ddof=1),
                    "stragglers_per_round": full.stragglers.sum(axis=1).mean(),
                    "waitouts": int(full.waitout_rounds.sum()),
                    "jobs_done": int((full.job_done_round >= 0).sum()), "quantile_rel_error": 0.0,
                }
                for key, value in expect.items():
                    if key in ("median", "p95", "max", "min", "rounds", "workers", "waitouts", "jobs_done",
                               "stragglers_per_round", "quantile_rel_error"):
                        assert s_bare[key] == value, (name, close, method, key)
                    else:
                        assert s_bare[key] == pytest.approx(value, rel=1e-12), (name, close, method, key)
                assert s_bare["total_time"] == pytest.approx(rt.sum(), rel=1e-12)


@pytest.mark.parametrize("model_name", ["shifted-exp", "fixed", "trace"])
def test_block_size_does_not_change_the_rounds(model_name, monkeypatch):
    params = dict(delays=np.random.default_rng(2).exponential(size=(700, 10))) if model_name == "trace" else {}
    model = make_model(model_name, **params)
    code = gradcode.make_code("crc", n=10, s=3)
    one = gradcode.simulate(code, model, 700, seed=9, records=True)  # a single block
    monkeypatch.setattr(simulator, "_BLOCK", 50)
    many = gradcode.simulate(code, model, 700, seed=9, records=True)
    for name in TABLES:
        np.testing.assert_array_equal(getattr(one, name), getattr(many, name))


# ------------------------------------------------------------------------------ memory


def _numpy_bytes(obj) -> int:
    """Bytes of every numpy array reachable from ``obj`` (each counted once)."""
    seen, stack, total = set(), [obj], 0
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, (type, type(gc))):
            continue
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            total += o.nbytes if o.base is None else 0
            if o.base is not None:
                stack.append(o.base)
            continue
        stack.extend(gc.get_referents(o))
    return total


def test_a_long_run_without_records_holds_no_per_round_arrays():
    code = gradcode.make_code("crc", n=12, s=2)
    model = make_model("shifted-exp")
    short = gradcode.simulate(code, model, 20_000, seed=0, records=False)
    long = gradcode.simulate(code, model, 400_000, seed=0, records=False)
    assert not long.has_records and long.rounds == 400_000
    # the summaries' size does not grow with the rounds (records would take 84 MiB)
    held = _numpy_bytes(long)
    assert held < 1 << 20
    assert held <= 2 * _numpy_bytes(short)
    assert long.nbytes() < 1 << 20
    with_records = gradcode.simulate(code, model, 20_000, seed=0, records=True)
    assert _numpy_bytes(with_records) >= 20_000 * (17 * 12 + 17)


@pytest.mark.parametrize("model_name", ["shifted-exp", "gilbert-elliot"])
def test_peak_memory_without_records_is_bounded_by_the_block(model_name):
    """tracemalloc's peak (numpy reports its buffers to it) during a 300,000-round run: the draw
    and the per-round tables of the whole run would take 150 MiB; a block of rounds takes ~8.
    Gilbert-Elliot, a Markov model, used to draw the whole run at once (2.9 GB at 1e7 rounds)."""
    code = gradcode.make_code("crc", n=12, s=2)
    model = make_model(model_name)
    gradcode.simulate(code, model, 100, seed=0)  # imports and caches outside the measurement
    tracemalloc.start()
    try:
        gradcode.simulate(code, model, 300_000, seed=0, records=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 24 << 20


def test_per_round_outputs_say_they_need_records(tmp_path):
    res = gradcode.simulate(gradcode.make_code("frc", n=4, s=1), "fixed", 50, records=False)
    for name in TABLES + ("round_starts",):
        with pytest.raises(NoRecordsError, match="records=True"):
            getattr(res, name)
    for call in (res.to_records, res.to_csv, lambda: res.save_trace(tmp_path / "t.npy"),
                 lambda: res.save_arrivals(tmp_path / "a.npy")):
        with pytest.raises(NoRecordsError, match="per-round records"):
            call()
    doc = json.loads(res.to_json())
    assert doc["records_kept"] is False and "arrivals" not in doc and doc["summary"]["rounds"] == 50
    assert json.loads(gradcode.simulate(gradcode.make_code("frc", n=4, s=1), "fixed", 5).to_json())["records_kept"]
    # one round: no spread, no interval; the summary stays strict JSON (no NaN)
    one = gradcode.simulate(gradcode.make_code("frc", n=4, s=1), "fixed", 1, records=False)
    assert one.summary()["std"] is None and one.summary()["mean_ci95"] is None
    json.loads(one.to_json(), parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))


def test_records_default_keeps_them_while_small(monkeypatch):
    code = gradcode.make_code("crc", n=4, s=1)
    assert gradcode.simulate(code, "shifted-exp", 100).has_records
    monkeypatch.setattr(simulator, "AUTO_RECORDS_BYTES", 100 * (17 * 4 + 17) - 1)
    assert not gradcode.simulate(code, "shifted-exp", 100).has_records
    assert gradcode.simulate(code, "shifted-exp", 100, records=True).has_records
    with pytest.raises(TypeError, match="records"):
        gradcode.simulate(code, "shifted-exp", 100, records="yes")


# ------------------------------------------------------------------------------ protocol path


class _Sequential(Scheme):
    """Uncoded, one job per round, job t finished in round t + 1 (so every close but the first
    finishes the previous job), optionally finishing job 0 again in round ``again``."""

    def __init__(self, n, again=None):
        self.n, self.again = n, again
        self.partition_sizes = np.full(n, 1 / n)
        self.one = np.ones((1, 1, 1))

    def _plan(self, t):
        return {w: (Task(t, (w,), self.one),) for w in range(self.n)}

    def _on_result(self, t, worker, index, payload, time):
        pass

    def _ready(self, t):
        return True

    def _close(self, t, arrived):
        out = [] if t == 0 else [(t - 1, None)]
        return out + [(0, None)] if t == self.again else out


@pytest.mark.parametrize("records", [True, False])
def test_protocol_path_counts_jobs_and_catches_a_job_finished_twice(records):
    res = gradcode.simulate(_Sequential(3), "shifted-exp", 200, records=records)
    assert res.summary()["jobs_done"] == 199
    if records:
        assert res.job_done_round.tolist() == list(range(1, 200)) + [-1]
    with pytest.raises(ProtocolError, match="job 0 twice"):
        gradcode.simulate(_Sequential(3, again=150), "shifted-exp", 200, records=records)


# ------------------------------------------------------------------------------ statistics


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 10, 99, 100, 101, 1000, 3001])
def test_exact_quantiles_equal_numpy_bit_for_bit(size):
    rng = np.random.default_rng(size)
    for data in (rng.exponential(size=size), np.round(rng.exponential(size=size), 1), rng.integers(0, 3, size) * 0.7):
        sk = QuantileSketch()
        for part in np.array_split(data, 5):
            sk.add(part)
        assert sk.exact and sk.count == size
        assert sk.median() == np.median(data)
        for p in (0, 1, 5, 25, 50, 75, 90, 95, 99, 99.9, 100):
            assert sk.percentile(p) == np.percentile(data, p), p
        for q in (0.123, 0.5, 0.95, 0.999):
            assert sk.quantile(q) == np.quantile(data, q), q


def test_bucket_quantiles_within_the_relative_accuracy():
    rng = np.random.default_rng(0)
    data = np.concatenate([rng.exponential(size=30_000) + 0.05, np.zeros(500), [1e-9, 3e4]])
    sk = QuantileSketch(exact_limit=1000)
    for part in np.array_split(data, 13):
        sk.add(part)
    assert not sk.exact and sk.error == 1e-4
    for q in (0.0, 0.01, 0.017, 0.1, 0.5, 0.9, 0.95, 0.99, 0.9999, 1.0):
        exact = np.quantile(data, q)
        assert abs(sk.quantile(q) - exact) <= 1.0001e-4 * exact, q
    assert sk.quantile(0) == 0.0 and sk.quantile(1) == 3e4
    assert sk.median() == pytest.approx(np.median(data), rel=1e-4)
    # one int64 per bucket over the spread of the positive values (13.5 decades), not per value
    assert sk.nbytes() <= 8 * (math.log(3e4 / 1e-9) / math.log((1 + 1e-4) / (1 - 1e-4)) + 2)
    x, F = sk.cdf()
    assert (np.diff(x) > 0).all() and (np.diff(F) > 0).all() and F[-1] == 1.0


def test_merged_sketches_equal_the_sketch_of_the_pooled_values():
    rng = np.random.default_rng(1)
    parts = [rng.exponential(size=3000), rng.exponential(size=5000) * 2, rng.integers(0, 5, 400) * 0.5]
    for limit in (10**6, 2000):
        pooled, merged = QuantileSketch(exact_limit=limit), QuantileSketch(exact_limit=limit)
        pooled.add(np.concatenate(parts))
        for p in parts:
            one = QuantileSketch(exact_limit=limit)
            one.add(p)
            merged.merge(one)
        assert merged.exact == pooled.exact == (limit > 10_000)
        for q in (0, 0.3, 0.5, 0.95, 1):
            assert merged.quantile(q) == pooled.quantile(q)


def test_pooled_stats_with_and_without_records_agree(monkeypatch):
    code = gradcode.make_code("frc", n=6, s=1)
    model = make_model("bernoulli", p=0.2, slowdown=4)  # discrete times: quantiles stay exact
    kept = [gradcode.simulate(code, model, 3000, seed=s, records=True) for s in range(3)]
    bare = [gradcode.simulate(code, model, 3000, seed=s, records=False) for s in range(3)]
    a, b = pooled_stats(kept), pooled_stats(bare)
    assert a["median"] == b["median"] and a["p95"] == b["p95"] and b["quantile_rel_error"] == 0.0
    assert a["mean"] == b["mean"] == pytest.approx(np.concatenate([r.round_times for r in kept]).mean(), rel=1e-13)


def test_time_stats_moments_and_batch_means_interval():
    rng = np.random.default_rng(3)
    x = rng.normal(20.0, 2.0, size=64_000)
    ts = TimeStats(x.size)
    for part in np.array_split(x, 37):
        ts.add(part)
    # each block's pairwise sum, added exactly: within a few ulps of the exactly rounded sum
    assert ts.total == pytest.approx(math.fsum(x), rel=1e-14) and ts.mean == ts.total / x.size
    assert ts.std == pytest.approx(x.std(ddof=1), rel=1e-12)
    assert (ts.min, ts.max) == (x.min(), x.max())
    iid = 1.96 * x.std(ddof=1) / math.sqrt(x.size)
    assert 0.7 * iid < ts.mean_ci95 < 1.3 * iid
    # strongly correlated rounds (a slow random walk): batch means widen the interval
    walk = 10 + np.abs(np.cumsum(rng.normal(0, 0.05, size=64_000)))
    tw = TimeStats(walk.size)
    tw.add(walk)
    assert tw.mean_ci95 > 5 * 1.96 * walk.std(ddof=1) / math.sqrt(walk.size)
    assert math.isnan(TimeStats(1).mean_ci95)
    with pytest.raises(ValueError, match="rounds"):
        TimeStats(3).add(np.ones(4))


# ------------------------------------------------------------------------------ CLI


def _cli(*args):
    from typer.testing import CliRunner

    from gradcode.cli import app

    return CliRunner().invoke(app, list(args))


def test_cli_without_records_reports_the_same_numbers(monkeypatch, tmp_path):
    """With records dropped (a tiny AUTO_RECORDS_BYTES stands for a long run), ``simulate`` and
    ``compare`` print the numbers they print with records; ``--plot`` and ``--records`` still work
    (they keep the records they need)."""
    args = ["-n", "6", "-s", "1", "--delay-model", "fixed", "-M", "stragglers=1", "-M", "delay=2",
            "--rounds", "300", "--repeats", "2", "--json"]
    with_records = json.loads(_cli("simulate", *args).stdout)
    cmp_with = json.loads(_cli("compare", *args).stdout)
    monkeypatch.setattr(simulator, "AUTO_RECORDS_BYTES", 0)
    without = json.loads(_cli("simulate", *args).stdout)
    assert without == with_records and without["summary"]["quantile_rel_error"] == 0.0
    assert json.loads(_cli("compare", *args).stdout) == cmp_with
    png, rec = tmp_path / "c.png", tmp_path / "r.csv"
    r = _cli("compare", *args, "--plot", str(png))
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:4] == b"\x89PNG"
    r = _cli("simulate", *args, "--records", str(rec))
    assert r.exit_code == 0, r.output
    assert len(rec.read_text().splitlines()) == 1 + 2 * 300


MARKOV = [
    ("gilbert-elliot", {}),
    ("gilbert-elliot", dict(p_recover=0.2, initial_slow=3)),
    ("gilbert-elliot-het", dict(initial_slow=2)),
    ("time-varying", {}),
    ("time-varying", dict(initial_slow=3, p=0.3)),
    ("shared-access", dict(arrival_rate=2.0)),
]


@pytest.mark.parametrize("name,params", MARKOV, ids=[f"{n}-{p}" for n, p in MARKOV])
@pytest.mark.parametrize("rounds,block", [(1, 4), (10, 3), (37, 8), (64, 64)])
def test_markov_models_stream_bit_for_bit(name, params, rounds, block):
    """The Markov models (chains, time-varying rates, shared access) draw block by block what their
    whole draw gives, and leave the Generator in the same state."""
    model = make_model(name, **params)
    r1, r2 = np.random.default_rng(7), np.random.default_rng(7)
    full = model.draw(rounds, 6, r1)
    parts = list(model.draw_blocks(rounds, 6, r2, block))
    assert [(a, b) for a, b, _ in parts] == [(a, min(rounds, a + block)) for a in range(0, rounds, block)]
    for field in ("intercept", "slope", "straggling", "rates"):
        whole = getattr(full, field)
        if whole is None:
            assert all(getattr(d, field) is None for *_, d in parts)
        else:
            np.testing.assert_array_equal(np.concatenate([getattr(d, field) for *_, d in parts]), whole)
    assert r1.random() == r2.random()


def test_a_markov_model_without_a_jumping_generator_falls_back_to_one_draw():
    model = make_model("gilbert-elliot")
    gen = np.random.Generator(np.random.MT19937(5))  # MT19937 cannot advance
    parts = list(model.draw_blocks(20, 4, gen, 6))
    np.testing.assert_array_equal(np.concatenate([d.slope for *_, d in parts]),
                                  model.draw(20, 4, np.random.Generator(np.random.MT19937(5))).slope)

