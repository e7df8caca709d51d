"""Traces: round trips through .npy/.csv/pickle, the SGC pickle format, App. J load adjustment,
and every malformed-input case raising TraceError naming the file and the problem."""

from __future__ import annotations

import datetime as dt
import pickle

import numpy as np
import pytest

import gradcode
from gradcode import TraceError
from gradcode.stragglers import (
    adjust_trace_load,
    fit_load_line,
    fit_load_slope,
    fit_model_slope,
    load_trace,
    make_delay_model,
    save_trace,
)


@pytest.fixture
def arr():
    return np.random.default_rng(0).exponential(1.0, size=(7, 5)) + 0.01


@pytest.mark.parametrize("ext", [".npy", ".csv", ".txt", ".pkl", ".pickle"])
def test_round_trip(tmp_path, arr, ext):
    path = save_trace(tmp_path / f"t{ext}", arr)
    assert path.exists()
    back = load_trace(path)
    assert back.dtype == np.float64 and back.shape == arr.shape
    if ext in (".pkl", ".pickle"):  # finished - started loses a few ulps
        np.testing.assert_allclose(back, arr, rtol=0, atol=1e-12)
    else:
        np.testing.assert_array_equal(back, arr)
    np.testing.assert_array_equal(load_trace(path, workers=5), back)
    assert gradcode.load_trace is load_trace


def test_trace_model_from_path(tmp_path, arr):
    path = save_trace(tmp_path / "t.npy", arr)
    m = make_delay_model("trace", path=path)
    np.testing.assert_array_equal(m.sample(7, 5, None), arr)
    assert "t.npy" in repr(m)


def sgc_profile(delays, ids=None, start=100.0):
    ids = list(range(delays.shape[1])) if ids is None else ids
    out = []
    for t, row in enumerate(delays):
        out.append({"round": t, "results": [
            {"worker_id": w, "started": start + t, "finished": start + t + float(v), "extra": "ignored"}
            for w, v in zip(ids, row)
        ]})
    return out


def dump(path, obj):
    with open(path, "wb") as fh:
        pickle.dump(obj, fh)
    return path


def test_sgc_pickle_format(tmp_path, arr):
    prof = sgc_profile(arr)
    # results listed in any order; ids give the columns
    for rnd in prof:
        rnd["results"].reverse()
    got = load_trace(dump(tmp_path / "p.pkl", prof))
    np.testing.assert_allclose(got, arr, atol=1e-12)


def test_sgc_pickle_string_ids_and_datetimes(tmp_path):
    t0 = dt.datetime(2023, 1, 1, 12, 0, 0)
    prof = [{"results": [
        {"worker_id": "b", "started": t0, "finished": t0 + dt.timedelta(seconds=2.5)},
        {"worker_id": "a", "started": t0, "finished": t0 + dt.timedelta(seconds=1.0)},
    ]}]
    got = load_trace(dump(tmp_path / "p.pickle", prof))
    np.testing.assert_allclose(got, [[1.0, 2.5]])  # sorted ids: a, b


def test_load_adjustment_app_j():
    ref = np.array([[1.0, 2.0], [3.0, 0.5]])
    n = 4
    # App. J: add (L - 1/n) alpha to the uncoded reference profile
    out = adjust_trace_load(ref, from_load=1 / n, to_load=0.75, slope=2.0)
    np.testing.assert_allclose(out, ref + 1.0)
    down = adjust_trace_load(ref, from_load=0.75, to_load=0.25, slope=2.0)
    np.testing.assert_allclose(down, [[0.0, 1.0], [2.0, 0.0]])  # clipped at 0
    # the trace model applies the same rule
    m = make_delay_model("trace", delays=ref, trace_load=1 / n, load_slope=2.0)
    np.testing.assert_allclose(m.sample(2, 2, None, load=0.75), out)


def test_fit_load_slope_recovers_a_line():
    rng = np.random.default_rng(1)
    loads = np.linspace(0.05, 1.0, 12)
    times = 0.3 + 4.0 * loads[:, None] + rng.normal(0, 0.05, size=(12, 256))
    slope, intercept = fit_load_slope(loads, times)
    # noise of a row mean: 0.05/16; the fitted slope's error is far below 0.05
    assert slope == pytest.approx(4.0, abs=0.05) and intercept == pytest.approx(0.3, abs=0.05)
    s2, i2 = fit_load_slope([0.0, 1.0], [1.0, 3.0])
    assert (s2, i2) == pytest.approx((2.0, 1.0))
    with pytest.raises(ValueError, match="not all be equal"):
        fit_load_slope([0.5, 0.5], [1.0, 2.0])
    with pytest.raises(ValueError, match="one entry"):
        fit_load_slope([0.1, 0.2], [1.0, 2.0, 3.0])


def test_fit_load_line_says_how_well_the_line_fits():
    exact = fit_load_line([0.1, 0.5, 1.0], [1.2, 2.0, 3.0])
    assert (exact.slope, exact.intercept, exact.r2) == pytest.approx((2.0, 1.0, 1.0))
    assert "R^2 = 1.0000" in exact.line() and exact.to_dict()["means"] == [1.2, 2.0, 3.0]
    noisy = fit_load_line([0.0, 0.5, 1.0, 1.5], [1.0, 2.5, 2.5, 4.0])
    assert 0 < noisy.r2 < 1
    assert "exact line through 2 loads" in fit_load_line([0.0, 1.0], [1.0, 3.0]).line()
    assert np.isnan(fit_load_line([0.0, 1.0], [2.0, 2.0]).r2)  # no variance to explain


def test_app_j_fit_on_a_delay_model_gives_back_its_load_rule():
    """SGC App. J, Fig. 16 on the model the reproductions inject: a trace replayed with the
    additive load rule ``d + (L - 1/n) alpha`` has mean worker time linear in the load with slope
    alpha exactly (and intercept mean(d) - alpha / n); a message time is in the intercept only."""
    rng = np.random.default_rng(0)
    d = rng.exponential(1.0, size=(30, 8)) + 1.0
    fit = fit_model_slope(make_delay_model("trace", delays=d, trace_load=1 / 8, load_slope=3.0), n=8, rounds=30)
    assert fit.slope == pytest.approx(3.0) and fit.intercept == pytest.approx(d.mean() - 3.0 / 8)
    assert fit.r2 == pytest.approx(1.0) and fit.loads[0] == 1 / 8
    comm = fit_model_slope(make_delay_model("trace", delays=d, trace_load=1 / 8, load_slope=3.0, comm=0.5), n=8,
                           rounds=30)
    with pytest.raises(TypeError, match="must be a delay model"):
        fit_model_slope(("trace", {"delays": d}), n=8, rounds=30)
    assert comm.slope == pytest.approx(3.0) and comm.intercept > fit.intercept


# --------------------------------------------------------------------------- malformed input


def expect(path, *words, workers=None):
    with pytest.raises(TraceError) as info:
        load_trace(path, workers=workers)
    msg = str(info.value)
    assert str(path) in msg, msg
    for w in words:
        assert w in msg, msg
    assert isinstance(info.value, ValueError)
    return msg


def test_missing_file(tmp_path):
    expect(tmp_path / "nope.npy", "no such trace file")


def test_unknown_extension(tmp_path):
    p = tmp_path / "t.json"
    p.write_text("[]")
    expect(p, "unknown trace format", ".npy")


def test_csv_ragged_rows(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("1,2,3\n4,5\n")
    expect(p, "ragged rows", "line 2", "2 values", "3")


def test_csv_not_a_number_and_header(tmp_path):
    p = tmp_path / "h.csv"
    p.write_text("w0,w1\n# comment\n1,2\n\n3,4\n")
    np.testing.assert_array_equal(load_trace(p), [[1, 2], [3, 4]])
    q = tmp_path / "bad.csv"
    q.write_text("1,2\n3,abc\n")
    expect(q, "line 2", "'abc'", "not a number")
    e = tmp_path / "empty.csv"
    e.write_text("# nothing\n")
    expect(e, "no rows")


@pytest.mark.parametrize("ext", [".npy", ".csv"])
def test_negative_delay(tmp_path, ext):
    p = save_trace(tmp_path / f"ok{ext}", np.ones((3, 2)))
    if ext == ".npy":
        np.save(p, np.array([[1.0, 2.0], [0.5, -0.1]]))
    else:
        p.write_text("1,2\n0.5,-0.1\n")
    expect(p, "negative delay", "round 1, worker 1")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("ext", [".npy", ".csv"])
def test_non_finite_delay(tmp_path, ext, bad):
    a = np.ones((2, 3))
    a[0, 2] = bad
    p = tmp_path / f"nf{ext}"
    if ext == ".npy":
        np.save(p, a)
    else:
        p.write_text("\n".join(",".join(str(v) for v in row) for row in a))
    expect(p, "non-finite delay", "round 0, worker 2")


def test_worker_count_mismatch(tmp_path, arr):
    for ext in (".npy", ".csv", ".pkl"):
        p = save_trace(tmp_path / f"w{ext}", arr)
        if ext == ".pkl":
            expect(p, "outside 0..3", "workers=4", workers=4)
        else:
            expect(p, "5 workers", "expected workers=4", workers=4)


def test_npy_shapes_and_types(tmp_path):
    p = tmp_path / "one.npy"
    np.save(p, np.ones(4))
    expect(p, "2-D")
    q = tmp_path / "str.npy"
    np.save(q, np.array([["a", "b"]]))
    expect(q, "not numbers")
    r = tmp_path / "obj.npy"
    np.save(r, np.array([[1, 2], [3]], dtype=object), allow_pickle=True)
    expect(r, "not a numeric .npy array")
    s = tmp_path / "garbage.npy"
    s.write_bytes(b"not an npy file")
    expect(s, "cannot read")


def test_pickle_missing_worker_in_a_round(tmp_path, arr):
    prof = sgc_profile(arr)
    del prof[3]["results"][2]
    expect(dump(tmp_path / "m.pkl", prof), "round 3", "no result for worker(s) 2", "4 of 5")


def test_pickle_worker_absent_from_all_rounds_with_workers(tmp_path, arr):
    prof = sgc_profile(arr[:, :3])
    expect(dump(tmp_path / "m.pkl", prof), "no result for worker(s) 3, 4", workers=5)


def test_pickle_duplicates_and_bad_structure(tmp_path, arr):
    prof = sgc_profile(arr)
    prof[1]["results"].append(dict(prof[1]["results"][0]))
    expect(dump(tmp_path / "d.pkl", prof), "round 1", "listed twice")
    expect(dump(tmp_path / "s.pkl", {"results": []}), "expected a list over rounds")
    expect(dump(tmp_path / "e.pkl", []), "no rounds")
    expect(dump(tmp_path / "k.pkl", [{"res": []}]), "round 0", "'results'")
    expect(dump(tmp_path / "f.pkl", [{"results": [{"worker_id": 0, "started": 0.0}]}]),
           "missing key(s) finished")
    expect(dump(tmp_path / "n.pkl", [{"results": [{"worker_id": 0, "started": 0.0, "finished": "x"}]}]),
           "expected a number of seconds")
    neg = sgc_profile(arr)
    neg[2]["results"][1]["finished"] = neg[2]["results"][1]["started"] - 1.0
    expect(dump(tmp_path / "neg.pkl", neg), "negative delay", "round 2, worker 1")
    bad = tmp_path / "x.pkl"
    bad.write_bytes(b"\x80\x04garbage")
    expect(bad, "cannot unpickle")


def test_save_rejects_bad_arrays(tmp_path):
    with pytest.raises(TraceError, match="negative"):
        save_trace(tmp_path / "a.npy", [[1.0, -2.0]])
    with pytest.raises(TraceError, match="unknown trace format"):
        save_trace(tmp_path / "a.h5", [[1.0]])
    save_trace(tmp_path / "b.csv", [[1.0]])
    with pytest.raises(TraceError, match="exists"):
        save_trace(tmp_path / "b.csv", [[1.0]], overwrite=False)


def test_recorded_arrival_table_replays_with_stragglers_censored(tmp_path):
    """An arrival table (-1 = straggler) is a trace: each -1 becomes its round's latest arrival, a
    lower bound of the straggler's time; 'error' refuses it, and a round of only -1 is an error."""
    table = np.array([[0.2, -1.0, 0.3], [-1.0, 0.1, 0.4]])
    p = tmp_path / "arrivals.npy"
    np.save(p, table)
    np.testing.assert_array_equal(load_trace(p), [[0.2, 0.3, 0.3], [0.4, 0.1, 0.4]])
    with pytest.raises(TraceError, match="negative delay -1.0 in round 0, worker 1"):
        load_trace(p, stragglers="error")
    np.save(p, np.array([[0.2, 0.1], [-1.0, -1.0]]))
    with pytest.raises(TraceError, match="round 1 has no arrival"):
        load_trace(p)


def test_simulated_arrivals_load_as_a_trace(tmp_path):
    import gradcode

    res = gradcode.simulate(gradcode.make_code("crc", n=6, s=2), gradcode.make_delay_model("fixed", stragglers=2, delay=0.5), rounds=20, seed=1)
    assert (res.arrivals == -1).any()
    p = tmp_path / "arrivals.npy"
    np.save(p, res.arrivals)
    replay = load_trace(p, workers=6)
    # replaying the censored table gives the same round times: stragglers arrive no earlier than
    # the round's close, so the code decodes at the same instant
    again = gradcode.simulate(gradcode.make_code("crc", n=6, s=2), replay, rounds=20)
    np.testing.assert_allclose(again.round_times, res.round_times)


def test_trace_load_alone_is_refused_not_scaled_proportionally():
    """SGC App. J adjusts a trace by *adding* (L - L0) alpha seconds. trace_load without a slope
    used to switch silently to delay * L / L0, which makes CRC s = 15 at n = 256 (load 16/256)
    sixteen times slower than the uncoded profile it was recorded from."""
    ref = np.array([[1.0, 2.0], [3.0, 0.5]])
    with pytest.raises(ValueError) as info:
        make_delay_model("trace", delays=ref, trace_load=0.25)
    said = str(info.value)
    assert "load_slope" in said and "--load-slope" in said and "--trace-load" in said
    assert "fit_load_slope" in said and "load_rule='proportional'" in said
    # proportional scaling is still there, by name
    prop = make_delay_model("trace", delays=ref, trace_load=0.25, load_rule="proportional")
    np.testing.assert_allclose(prop.sample(2, 2, None, load=0.5), 2 * ref)
    assert prop != make_delay_model("trace", delays=ref, trace_load=0.25, load_slope=0.0)
    assert "proportional" in repr(prop)
    for bad, words in [
        (dict(trace_load=0.25, load_slope=1.0, load_rule="proportional"), "load_slope"),
        (dict(load_rule="proportional"), "trace_load"),
        (dict(trace_load=0.0, load_rule="proportional"), "trace_load"),
        (dict(trace_load=0.25, load_slope=1.0, load_rule="linear"), "load_rule"),
    ]:
        with pytest.raises(ValueError, match=words):
            make_delay_model("trace", delays=ref, **bad)


def test_trace_recorded_at_load_zero_is_accepted():
    """A profile extrapolated to load 0 (the intercept of the Fig. 16 fit) is a valid reference."""
    ref = np.array([[1.0, 2.0], [3.0, 0.5]])
    m = make_delay_model("trace", delays=ref, trace_load=0, load_slope=4.0)
    np.testing.assert_allclose(m.sample(2, 2, None, load=0.5), ref + 2.0)
    np.testing.assert_allclose(m.sample(2, 2, None, load=0.0), ref)
    assert m.trace_load == 0.0


def test_a_pickle_that_names_code_is_refused_not_run(tmp_path):
    """A trace pickle is read with only the types a delay profile holds: one whose load would call
    a function (os.system here) is refused naming it, and the function never runs; numpy arrays
    and datetimes still load."""
    import datetime
    import os

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {tmp_path / 'ran'}",)

    bad = tmp_path / "evil.pkl"
    bad.write_bytes(pickle.dumps([{"results": [Payload()]}]))
    with pytest.raises(TraceError, match="os.system|posix.system"):
        load_trace(bad)
    assert not (tmp_path / "ran").exists()
    start = datetime.datetime(2026, 1, 1)
    prof = [{"results": [{"worker_id": w, "started": start, "finished": start + datetime.timedelta(seconds=1 + w)}
                         for w in range(2)]} for _ in range(3)]
    np.testing.assert_allclose(load_trace(dump(tmp_path / "ok.pkl", prof)), [[1, 2]] * 3)
    arr = tmp_path / "arr.pkl"
    arr.write_bytes(pickle.dumps(np.arange(6.0).reshape(3, 2)))
    np.testing.assert_array_equal(load_trace(arr), np.arange(6.0).reshape(3, 2))
