"""Messages as workers send them (``gradcode.codes.messages``): the compiled sums against numpy,
16-bit messages scaled into range, decoding of Messages (the scales the workers send make the
error bound hold where a worker's own terms cancel), the bound's absolute term for values below a
16-bit type's normal range, and the runtime path: cancelling float32 gradients through real
rounds of the in-process engine, no accepted decode off by more than its bound."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from gradcode.codes import ImpreciseDecodeError, LinearCode, NonFiniteMessageError, make_code
from gradcode.codes.messages import Message, as_rows, sum_squares, to_wire, weighted_add
from gradcode.runtime import InProcessEngine
from gradcode.runtime.worker import limit_threads, worker_threads
from runtime_util import DATA, SEED

WIRE = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


# ------------------------------------------------------------------------ compiled sums


@pytest.mark.parametrize("dtype", list(WIRE.values()), ids=list(WIRE))
def test_weighted_add_and_sum_squares_match_numpy(dtype):
    rng = np.random.default_rng(0)
    v = (rng.standard_normal(1001) * 3).astype(dtype)
    wide = v.astype(np.float64)
    out = np.full(1001, 7.0)
    assert weighted_add(out, v, 0.5, True, True) == pytest.approx(float(wide @ wide), rel=1e-12)
    np.testing.assert_array_equal(out, 0.5 * wide)
    assert weighted_add(out, v, -2.0, False, False) == 0.0
    np.testing.assert_allclose(out, 0.5 * wide - 2.0 * wide, rtol=1e-15)
    assert sum_squares(v) == pytest.approx(float(wide @ wide), rel=1e-12)


# ------------------------------------------------------------------------ scaling into range


@pytest.mark.parametrize("wire", ["float16", "bfloat16"])
@pytest.mark.parametrize("size", [1e-9, 1e-3, 1.0, 1e4, 1e8])
def test_16_bit_messages_are_scaled_into_range_by_a_power_of_two(wire, size):
    rng = np.random.default_rng(1)
    values = (rng.standard_normal(64) * size).astype(np.float32)
    scale = float(np.linalg.norm(values.astype(np.float64)))
    msg = to_wire(values, scale, WIRE[wire])
    assert msg.values.dtype == np.dtype(WIRE[wire])
    assert np.log2(msg.factor) == int(np.log2(msg.factor))
    assert np.isfinite(msg.values.astype(np.float64)).all()
    # the largest element lands in the type's upper range: nothing underflows that need not
    assert np.abs(msg.values.astype(np.float64)).max() > 2.0 ** -4 * (65504 if wire == "float16" else 3e38) / 64
    np.testing.assert_allclose(np.asarray(msg), values, rtol=2 ** -7, atol=0)


def test_wide_types_are_not_scaled_unless_they_would_overflow():
    values = np.array([1e-30, 2.0])
    assert to_wire(values, 2.0, np.float32).factor == 1.0
    assert to_wire(values, 2.0, None).values is values
    big = np.array([1e39, -1e39])
    msg = to_wire(big, float(np.linalg.norm(big)), np.float32)
    assert msg.factor < 1 and np.isfinite(msg.values).all()
    np.testing.assert_allclose(np.asarray(msg), big, rtol=1e-7)


def test_a_message_reads_as_its_values_in_its_own_units():
    msg = Message(np.array([1.0, 2.0], dtype=np.float16), scale=3.0, factor=4.0)
    np.testing.assert_array_equal(np.asarray(msg), [0.25, 0.5])
    np.testing.assert_array_equal(sum([msg, msg]), [0.5, 1.0])
    np.testing.assert_array_equal(as_rows([msg, msg]), [[0.25, 0.5]] * 2)
    assert msg.finite and not Message(msg.values, float("nan")).finite


# ------------------------------------------------------------------------ decoding Messages


def _cancelling_partials(code, rng, size, spread=1e4):
    """Partials whose sum is ``size``-small while each is ``spread`` times larger: they cancel,
    also inside each worker's weighted sum."""
    k = code.k
    big = rng.standard_normal((k, 6)) * size * spread
    big[-1] = -big[:-1].sum(axis=0)
    return big + rng.standard_normal((k, 6)) * size


def _encoded(code, partials, wire, *, scaled=True):
    """Each worker's message as the runtime sends it (computed in float32 for narrow types, then
    :func:`to_wire` with its scale), or cast by hand (``scaled=False``)."""
    compute = np.float64 if wire == "float64" else np.float32
    out = {}
    for w in range(code.n):
        p = partials[list(code.placement[w])].astype(compute)
        msg = code.encode(w, p)
        if scaled:
            out[w] = [to_wire(row, float(s), WIRE[wire]) for row, s in zip(msg, code.message_scales(w, p))]
        else:
            with np.errstate(over="ignore", under="ignore"):
                out[w] = msg.astype(WIRE[wire])
    return out


def _held(partials, wire):
    compute = np.float64 if wire == "float64" else np.float32
    return partials.astype(compute).astype(np.float64).sum(axis=0)


def _check(code, msgs, truth, d):
    """Accepted and within its bound, or refused: never accepted and off by more."""
    try:
        rep = code.decode_report(msgs, dim=d)
    except (ImpreciseDecodeError, NonFiniteMessageError):
        return False
    assert np.linalg.norm(rep.gradient - truth) <= rep.error_bound * (1 + 1e-9) + 1e-300
    return True


@pytest.mark.parametrize("wire", list(WIRE))
def test_no_accepted_decode_of_worker_messages_is_off_by_more_than_its_bound(wire):
    """The four wire types, gradients from 1e-9 to 1e4 and cancelling ones, CRC and AGC (large
    coefficients), a straggler pattern each: with the scales the workers send, every accepted
    decode is within its bound, and plain sizes are accepted."""
    rng = np.random.default_rng(5)
    accepted = 0
    for name, params in (("crc", dict(n=8, s=2, seed=0)), ("frc", dict(n=6, s=1)), ("agc", dict(n=6, d=3, L=2))):
        code = make_code(name, **params)
        for size, cancel in itertools.product((1e-9, 1e-5, 1.0, 1e4), (False, True)):
            g = _cancelling_partials(code, rng, size) if cancel else rng.standard_normal((code.k, 6)) * size
            msgs = _encoded(code, g, wire)
            alive = sorted(rng.choice(code.n, code.n - 1, replace=False).tolist())
            ok = _check(code, {w: msgs[w] for w in alive}, _held(g, wire), 6)
            accepted += ok
            if not cancel and name != "agc":
                assert ok, (name, size, wire)
    assert accepted > 0


@pytest.mark.parametrize("wire", ["float16", "bfloat16", "float32"])
def test_values_cast_by_hand_below_the_normal_range_are_bounded(wire):
    """The re-test's case: CRC n = 8, s = 2, gradients of ~1e-7 cast to float16 by hand (below its
    normal range). The bound now carries the absolute error of subnormals, so such decodes are
    refused (or, for wider types, accepted within their bound); scaled by their workers, they
    decode."""
    code = make_code("crc", n=8, s=2, seed=0)
    refused = 0
    for seed in range(30):
        g = np.random.default_rng(seed).standard_normal((code.k, 6)) * 1e-7
        by_hand = _encoded(code, g, wire, scaled=False)
        refused += not _check(code, by_hand, _held(g, wire), 6)
        assert _check(code, _encoded(code, g, wire), _held(g, wire), 6)
    assert refused == (30 if wire == "float16" else 0)


def test_messages_decode_as_their_arrays_and_need_no_scales_argument():
    code = make_code("crc", n=6, s=2, seed=0)
    g = np.random.default_rng(2).standard_normal((code.k, 40))
    arrays = {w: code.encode(w, g[list(code.placement[w])]) for w in range(4)}
    msgs = {w: Message(a[0], float(code.message_scales(w, g[list(code.placement[w])])[0])) for w, a in arrays.items()}
    np.testing.assert_array_equal(code.decode(msgs, dim=40), code.decode(arrays, dim=40))
    # a worker without a Message needs its scales passed, or its norm stands in
    mixed = {**msgs, 3: arrays[3]}
    np.testing.assert_allclose(code.decode(mixed, dim=40), g.sum(axis=0), rtol=1e-12)
    with pytest.raises(ValueError, match="missing \\[3\\]"):
        code.decode(mixed, dim=40, scales={0: [1.0]})


def test_bad_messages_are_named():
    code = make_code("crc", n=4, s=1, seed=0)
    g = np.random.default_rng(3).standard_normal((code.k, 5))
    msgs = {w: Message(code.encode(w, g[list(code.placement[w])])[0], 1.0) for w in range(4)}
    with pytest.raises(NonFiniteMessageError) as info:
        code.decode({**msgs, 2: Message(msgs[2].values, float("inf"))}, dim=5)
    assert info.value.workers == (2,)
    nan = msgs[1].values.copy()
    nan[0] = np.nan
    with pytest.raises(NonFiniteMessageError) as info:
        code.decode({**msgs, 1: Message(nan, 1.0)}, dim=5)
    assert info.value.workers == (1,)
    with pytest.raises(ValueError, match="factors > 0"):
        code.decode({**msgs, 0: Message(msgs[0].values, 1.0, 0.0)}, dim=5)
    with pytest.raises(ValueError, match="shape"):
        code.decode({0: Message(np.zeros(3), 1.0)}, dim=5)
    with pytest.raises(TypeError, match="mix dtypes"):
        make_code("partial", n=4, s=1, alpha=2.0, inner="frc").decode(
            {0: [Message(np.zeros(6), 0.0), Message(np.zeros(6, np.float32), 0.0)]}, dim=6)


# ------------------------------------------------------------------------ the runtime path


class CancellingFloat32:
    """The runtime tests' logistic problem, computed in float32 and sent as float32, with partial
    gradients that cancel: partition ``j`` adds ``(-1)^j * 1e5 * v`` (k = 4, so the offsets sum to
    zero; a partial gradient itself is a few units to a few hundred), also inside each worker's
    weighted sum. Every partial computed is kept in
    ``computed`` by (parameters, partition): the in-process engine's workers run in this process."""

    computed: dict = {}

    def build(self):
        from gradcode.problems import DataSpec, make_dataset, make_problem

        ds = make_dataset(DataSpec("tandon-synthetic", DATA, seed=SEED))
        problem = make_problem("logistic", ds)
        v = np.random.default_rng(9).standard_normal(problem.dim)
        true_gradient, per_part = problem.gradient, len(ds.y_train) // 4

        def gradient(params, rows=None):
            g = true_gradient(params, rows)
            j = int(np.min(rows)) // per_part
            out = (g + (-1) ** j * 1e5 * v).astype(np.float32)
            CancellingFloat32.computed[(np.asarray(params).tobytes(), j)] = out
            return out

        problem.gradient = gradient
        problem.wire_dtype = np.dtype(np.float32)
        return problem, ds


@pytest.mark.parametrize("code, params, cancels", [("frc", {"s": 1}, 100), ("crc", {"s": 2}, 2)])
def test_cancelling_float32_gradients_through_real_rounds_stay_within_their_bound(tmp_path, monkeypatch, code,
                                                                                  params, cancels):
    """A regression: accepted float32 decodes of cancelling gradients were off by more than
    their bound when the master measured the messages' norms. With the scales the workers send,
    every round's decode (n = 4, the in-process engine's real workers) is within it. FRC's workers
    add partitions 2i and 2i + 1, whose offsets cancel exactly in every message."""
    from test_driver import run

    from gradcode.schemes import StaticScheme

    checked, cancelled, bounded, on_result = [], [], LinearCode._bounded, StaticScheme.on_result

    def recording(self, sol, gradient, *args, **kwargs):
        rep = bounded(self, sol, gradient, *args, **kwargs)
        assert rep.guaranteed  # the workers sent their scales
        params = {key for key, _ in CancellingFloat32.computed}
        held = [CancellingFloat32.computed[(p, j)] for p in params for j in range(4)
                if all((p, i) in CancellingFloat32.computed for i in range(4))]
        truth = np.sum([h.astype(np.float64) for h in held[-4:]], axis=0)
        checked.append((np.linalg.norm(rep.gradient - truth), rep.error_bound))
        CancellingFloat32.computed.clear()
        return rep

    def receiving(self, t, w, i, payload, time):
        cancelled.append(payload.scale / np.linalg.norm(np.asarray(payload)))
        return on_result(self, t, w, i, payload, time)

    monkeypatch.setattr(LinearCode, "_bounded", recording)
    monkeypatch.setattr(StaticScheme, "on_result", receiving)
    CancellingFloat32.computed.clear()
    run(tmp_path, scheme=code, scheme_params=params, rounds=4, data=CancellingFloat32())
    assert len(checked) == 4
    assert max(cancelled) > cancels  # the workers' scales saw the cancellation the messages' norms hide
    for error, bound in checked:
        assert error <= bound


def test_workers_and_the_master_run_with_the_threads_they_were_given():
    import threadpoolctl
    import torch

    assert worker_threads(0) == 1 and worker_threads(0.5) == 1 and worker_threads(3) == 3
    before = torch.get_num_threads()
    restore = limit_threads(1)
    try:
        assert torch.get_num_threads() == 1
        assert all(p["num_threads"] == 1 for p in threadpoolctl.threadpool_info())
    finally:
        restore()
    assert torch.get_num_threads() == before


def test_complex_partials_and_integer_wire_types_are_refused():
    """A regression: ``code.encode`` took complex partials, and ``decode(precision="int8")`` was read
    as float64 (integer arrays are exact; an integer wire type is not one)."""
    code = make_code("crc", n=4, s=1, seed=0)
    g = np.ones((code.k, 3))
    msgs = {w: code.encode(w, g[list(code.placement[w])]) for w in range(4)}
    with pytest.raises(TypeError, match="real numbers, got dtype complex128"):
        code.encode(0, g[list(code.placement[0])].astype(complex))
    for bad in ("int8", np.int32, bool):
        with pytest.raises(ValueError, match="precision names the float type"):
            code.decode(msgs, dim=3, precision=bad)
    assert code.decode_report(msgs, dim=3, precision=ml_dtypes.bfloat16).precision == "bfloat16"
    assert code.decode_report(msgs, dim=3, precision="float16").precision == "float16"


def test_threaded_sums_decode_the_same_values():
    """The decode's sums cut into parts summed at once (several threads): the same decoded
    vector bit for bit, held or streamed; the norms for the bound agree to rounding."""
    import gradcode
    from gradcode.codes.messages import set_decode_threads, weighted_add

    code = gradcode.make_code("crc", n=6, s=2, seed=0)
    rng = np.random.default_rng(3)
    d = 3 * (1 << 17) + 11  # three parts and a remainder
    partials = rng.standard_normal((code.k, d)).astype(np.float32)
    msgs = {w: code.encode(w, partials[list(code.placement[w])]) for w in range(2, code.n)}
    v = partials[0]
    results = {}
    for threads in (1, 3):
        before = set_decode_threads(threads)
        try:
            report = code.decode_report(msgs, dim=d)
            out = np.zeros(d)
            sq = weighted_add(out, v, 0.5, True, True)
        finally:
            set_decode_threads(before)
        results[threads] = (report.gradient, report.error_bound, out, sq)
    one, three = results[1], results[3]
    assert np.array_equal(one[0], three[0]) and np.array_equal(one[2], three[2])
    assert three[1] == pytest.approx(one[1], rel=1e-12) and three[3] == pytest.approx(one[3], rel=1e-12)


def test_master_threads_leave_small_machines_to_the_workers():
    from gradcode.runtime.worker import master_threads

    assert [master_threads(c) for c in (1, 2, 3, 4, 8, 16, 64)] == [1, 1, 1, 2, 4, 8, 8]


def test_a_message_pickled_before_its_overflow_count_existed_restores_and_pickles_again(monkeypatch):
    """A checkpoint of a sequential scheme holds Message payloads: one written before
    ``overflows`` was added (three pickled fields) restores with none counted, and can be
    written again (a resumed run's next checkpoint)."""
    import pickle

    from gradcode.codes.messages import Note

    with monkeypatch.context() as patch:  # pickled as the earlier Message was: its three field values
        patch.setattr(Message, "__getstate__", lambda self: [self.values, self.scale, self.factor])
        blob = pickle.dumps(Message(np.arange(3.0), 2.0, 1.0, 9))
    old = pickle.loads(blob)
    assert isinstance(old, Message) and old.overflows == 0 and old.scale == 2.0
    again = pickle.loads(pickle.dumps(old))
    assert again.overflows == 0 and np.array_equal(np.asarray(again), np.arange(3.0))
    note = Note.__new__(Note)
    note.__setstate__([1.0, 1.0, np.dtype(np.float32), 7])
    assert note.overflows == 0 and pickle.loads(pickle.dumps(note)) == note
    fresh = Message(np.ones(2, np.float32), 1.0, overflows=3)
    assert pickle.loads(pickle.dumps(fresh)).overflows == 3
