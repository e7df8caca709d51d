"""Decodes know the precision of what arrived and are checked against what they summed.

What this guards against: float32 messages through an ill-conditioned pattern decoded to a relative error
of 3.4, and cancelling float64 gradients (near an optimum) to 14.5, while the float64-only check
accepted them. The contract tested here: every accepted decode, in every wire precision and with
cancelling gradients, is within the error bound it reports (``Decoded.error_bound``), and that
bound is at most ``rtol`` of the result; anything else is refused with
:class:`ImpreciseDecodeError`."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradcode
from gradcode.codes import DEFAULT_RTOL, PLAIN_SUM_SLACK, ImpreciseDecodeError, wire_precision
from gradcode.errors import NotDecodableError
from gradcode.schemes import StaticScheme

WIRE = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def partials(rng, k, d, cancel: bool, compute=np.float64):
    """Partial gradients as a worker holds them (in its compute dtype); ``cancel``: they sum to
    almost nothing, as near an optimum (``g -= g.mean(0); g[0] += 1e-8``, scaled)."""
    g = rng.standard_normal((k, d))
    if cancel:
        g -= g.mean(axis=0)
        g[0] += 1e-6 * rng.standard_normal(d)
    return g.astype(compute)


def send(code, g, wire, workers):
    """Each worker encodes in its compute dtype, then casts to the wire dtype."""
    return {w: code.encode(w, g[list(code.placement[w])]).astype(WIRE[wire]) for w in workers}


def scales_of(code, g, workers):
    return {w: code.message_scales(w, g[list(code.placement[w])]) for w in workers}


def check_accepted_or_refused(code, msgs, truth, d, **kw):
    try:
        rep = code.decode_report(msgs, dim=d, **kw)
    except ImpreciseDecodeError as exc:
        assert exc.relative_bound > exc.rtol
        assert "rtol" in str(exc) and exc.precision in str(exc)
        return None
    err = float(np.linalg.norm(rep.gradient - truth))
    assert err <= rep.error_bound * (1 + 1e-9) + 1e-300, (err, rep.error_bound)
    assert (rep.relative_bound <= kw.get("rtol", DEFAULT_RTOL[rep.precision])
            or rep.error_bound <= PLAIN_SUM_SLACK * rep.plain_bound)
    return rep


def test_ill_conditioned_float32_cgc_is_refused_not_wrong():
    """The reported case: cgc n=16, d=8, m=4, float32 partial gradients, workers 4-15."""
    code = gradcode.make_code("cgc", n=16, d=8, m=4)
    rng = np.random.default_rng(0)
    g = partials(rng, code.k, 40, cancel=False, compute=np.float32)
    truth = g.astype(np.float64).sum(axis=0)
    msgs = send(code, g, "float32", range(4, 16))
    with pytest.raises(ImpreciseDecodeError, match="float32") as info:
        code.decode(msgs, dim=40)
    assert info.value.precision == "float32" and info.value.relative_bound > 1e-3
    # the float64-only check used to accept this decode; its answer is indeed far off
    loose = code.decode_report(msgs, dim=40, rtol=1e9)
    assert np.linalg.norm(loose.gradient - truth) / np.linalg.norm(truth) > 1e-3
    assert np.linalg.norm(loose.gradient - truth) <= loose.error_bound


def test_cancelling_float64_is_refused_not_wrong():
    """The second reported case: the same code in float64, gradients that cancel to 1e-8."""
    code = gradcode.make_code("cgc", n=16, d=8, m=4)
    rng = np.random.default_rng(1)
    g = rng.standard_normal((code.k, 40))
    g -= g.mean(axis=0)
    g[0] += 1e-8
    truth = g.sum(axis=0)
    msgs = send(code, g, "float64", range(4, 16))
    with pytest.raises(ImpreciseDecodeError, match="cancel"):
        code.decode(msgs, dim=40)
    loose = code.decode_report(msgs, dim=40, rtol=1e300)
    assert np.linalg.norm(loose.gradient - truth) <= loose.error_bound
    assert loose.summed / np.linalg.norm(loose.gradient) > 1e6  # reported: the terms cancelled


@pytest.mark.parametrize("wire", ["float64", "float32", "float16"])
def test_a_plain_sum_of_cancelling_gradients_is_accepted(wire):
    """A plain sum of cancelling gradients is as good as any single-process sum: accepted (a run
    near its optimum must not stop), with a bound relative to what was summed that says how far
    it can be off. The same data through CGC's amplifying coefficients is refused in float32."""
    code = gradcode.make_code("uncoded", n=8)
    rng = np.random.default_rng(2)
    compute = np.float64 if wire == "float64" else np.float32
    g = partials(rng, 8, 30, cancel=True, compute=compute)
    rep = check_accepted_or_refused(code, send(code, g, wire, range(8)), g.astype(np.float64).sum(axis=0), 30)
    assert rep is not None and rep.summed > 100 * np.linalg.norm(rep.gradient)
    if wire != "float64":  # accepted as a plain sum, not by rtol
        assert rep.relative_bound > DEFAULT_RTOL[wire]
    if wire == "float32":
        cgc = gradcode.make_code("cgc", n=16, d=8, m=4)
        g16 = partials(rng, 16, 30, cancel=True, compute=np.float32)
        with pytest.raises(ImpreciseDecodeError, match="adding the partial gradients themselves"):
            cgc.decode(send(cgc, g16, wire, range(4, 16)), dim=30)


@pytest.mark.parametrize("wire", list(WIRE))
def test_precision_is_read_from_the_messages(wire):
    code = gradcode.make_code("crc", n=6, s=2, seed=0)
    g = partials(np.random.default_rng(3), code.k, 20, cancel=False, compute=np.float32)
    rep = code.decode_report(send(code, g, wire, range(6)), dim=20, rtol=1.0)
    assert rep.precision == wire
    assert rep.gradient.dtype == np.float64


def test_precision_argument_is_never_finer_than_the_arrays():
    code = gradcode.make_code("crc", n=6, s=2, seed=0)
    g = partials(np.random.default_rng(4), code.k, 20, cancel=False)
    msgs = send(code, g, "float16", range(6))
    assert code.decode_report(msgs, dim=20, precision="float64", rtol=1.0).precision == "float16"
    wide = {w: np.asarray(m, dtype=np.float32) for w, m in msgs.items()}
    assert code.decode_report(wide, dim=20, rtol=1.0).precision == "float32"
    assert code.decode_report(wide, dim=20, precision="bfloat16", rtol=1.0).precision == "bfloat16"


@pytest.mark.parametrize("bad", ["float8", "int4", object(), np.complex128])
def test_bad_precision_is_refused(bad):
    with pytest.raises(ValueError, match="precision must be one of"):
        wire_precision(bad)


def test_message_scales_bound_what_a_message_sums():
    code = gradcode.make_code("cgc", n=12, d=4, m=2)
    g = partials(np.random.default_rng(6), code.k, 9, cancel=True)
    for w in range(code.n):
        msgs = code.encode(w, g[list(code.placement[w])])
        assert (np.linalg.norm(msgs, axis=1) <= code.message_scales(w, g[list(code.placement[w])]) * (1 + 1e-12)).all()


def test_scales_must_cover_the_decoded_workers():
    code = gradcode.make_code("crc", n=4, s=1, seed=0)
    g = partials(np.random.default_rng(7), code.k, 5, cancel=False)
    msgs = send(code, g, "float64", range(4))
    with pytest.raises(ValueError, match="missing"):
        code.decode(msgs, dim=5, scales={0: [1.0]})
    with pytest.raises(ValueError, match="finite numbers"):
        code.decode(msgs, dim=5, scales={w: [np.nan] for w in range(4)})


def test_bad_rtol_is_refused():
    code = gradcode.make_code("uncoded", n=2)
    with pytest.raises(ValueError, match="rtol"):
        code.decode({0: np.ones(3), 1: np.ones(3)}, dim=3, rtol=0.0)


CODES = [
    ("uncoded", dict(n=8), 0),
    ("frc", dict(n=8, s=3), 3),
    ("crc", dict(n=10, s=3, seed=0), 3),
    ("crc", dict(n=40, s=10, seed=0), 10),
    ("cgc", dict(n=16, d=8, m=4), 4),
    ("cgc", dict(n=12, d=4, m=2), 2),
    ("agc", dict(n=8, d=3, L=6, seed=0), 2),
    ("commfr", dict(n=20, k=5, N=4, K=2, construction="mds-gaussian", seed=0), 2),
]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(CODES),
    wire=st.sampled_from(list(WIRE)),
    cancel=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_no_accepted_decode_is_off_by_more_than_its_bound(case, wire, cancel, seed):
    """The contract: any code, any wire precision, cancelling or not
    (with the workers' scales, what each message summed, the bound holds whatever the data)."""
    name, params, s = case
    code = gradcode.make_code(name, **params)
    rng = np.random.default_rng(seed)
    d = 3 * code.chunks + 2
    compute = np.float64 if wire == "float64" else np.float32
    g = partials(rng, code.k, d, cancel, compute)
    truth = g.astype(np.float64).sum(axis=0)
    stragglers = set(rng.choice(code.n, size=s, replace=False).tolist()) if s else set()
    workers = [w for w in range(code.n) if w not in stragglers]
    msgs = send(code, g, wire, workers)
    if not all(np.isfinite(m.astype(np.float64)).all() for m in msgs.values()):
        return  # a 16-bit type overflowed at the worker: non-finite messages are stragglers
    try:
        check_accepted_or_refused(code, msgs, truth, d, scales=scales_of(code, g, workers))
    except NotDecodableError as exc:
        assert not isinstance(exc, ImpreciseDecodeError)  # pattern refusals: amplification etc.


def test_static_scheme_waits_for_more_rows_after_an_imprecise_decode():
    """A refused decode keeps the round open; with every worker in, the minimum-norm coefficients
    over all rows are smaller and decode it (CRC n=40, s=10, float32: the bound falls from 2e-3
    to 6e-5)."""
    code = gradcode.make_code("crc", n=40, s=10, seed=0)
    scheme = StaticScheme(code, dim=30)
    rng = np.random.default_rng(4)
    g = rng.standard_normal((code.k, 30)).astype(np.float32)
    msgs = send(code, g, "float32", range(code.n))
    stragglers = set(rng.choice(code.n, 10, replace=False).tolist())
    first = [w for w in range(code.n) if w not in stragglers]
    scheme.plan(0)
    for w in first:
        scheme.on_result(0, w, 0, msgs[w][0], 1.0)
    assert scheme.ready(0)
    with pytest.raises(ImpreciseDecodeError):
        scheme.close(0, frozenset(first))
    assert not scheme.ready(0)  # nothing new arrived: not ready again
    for w in sorted(stragglers):
        scheme.on_result(0, w, 0, msgs[w][0], 2.0)
    assert scheme.ready(0)
    ((job, grad),) = scheme.close(0, frozenset(range(code.n)))
    truth = g.astype(np.float64).sum(axis=0)
    assert np.linalg.norm(grad - truth) <= 1e-4 * np.linalg.norm(truth)


def test_huge_finite_messages_name_their_senders():
    """A worker whose result is x1e300 (finite) made the bound NaN and no culprit was named; now it
    is a NonFiniteMessageError naming it, which a static scheme drops like a NaN worker."""
    from gradcode.codes import NonFiniteMessageError

    code = gradcode.make_code("crc", n=6, s=2, seed=0)
    g = np.random.default_rng(0).standard_normal((6, 50))
    msgs = {w: code.encode(w, g[list(code.placement[w])]) for w in range(6)}
    msgs[1] = msgs[1] * 1e300
    with pytest.raises(NonFiniteMessageError, match=r"workers \[1\]") as info:
        code.decode(msgs, dim=50)
    assert info.value.workers == (1,)
    scheme = StaticScheme(code, dim=50)
    scheme.plan(0)
    for w in range(6):
        scheme.on_result(0, w, 0, msgs[w][0], 1.0)
    ((_, grad),) = scheme.close(0, frozenset(range(6)))
    np.testing.assert_allclose(grad, g.sum(axis=0), rtol=1e-9)
    assert scheme.stragglers[0, 1]
