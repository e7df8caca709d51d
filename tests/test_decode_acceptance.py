"""One acceptance rule for every decode, and a bound that either holds or says it is an estimate.

What this guards against: decodes of plain arrays without scales whose error was far beyond the
bound they reported (a worker's terms cancelling inside its message: 16 % off with a bound of
1.8e-11), and decodes accepted beyond their ``rtol`` (as no worse than a plain sum) returned
without a word. The contract tested here: a bound computed without the workers' scales is marked
``guaranteed=False`` and ``strict=True`` refuses it; a decode accepted beyond ``rtol`` says
``within_rtol=False``, is caught by :func:`loose_decodes` (a training run counts such rounds) and
is refused under ``strict=True``; the runtime's workers always send their scales."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradcode
from gradcode.codes import DEFAULT_RTOL, ImpreciseDecodeError, answer_check
from gradcode.codes.messages import to_wire
from gradcode.codes.precision import loose_decodes
from gradcode.errors import NotDecodableError
from gradcode.experiments.cli_train import summary_rows
from gradcode.runtime import InProcessEngine, RunConfig, TrainSpec, train

WIRE = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def cancelling_inside_workers(code, rng, d):
    """Partial gradients whose sum over each worker's stored partitions cancels (``x`` and ``-x``
    paired within every worker of an FRC group): each message is tiny next to its terms."""
    g = np.zeros((code.k, d))
    for p in code.placement:
        p = list(p)
        x = 1e3 * rng.standard_normal(d)
        g[p[0]], g[p[1]] = x, -x + 1e-3 * rng.standard_normal(d)
    return g


def messages(code, g, wire, workers, *, scaled: bool):
    """Each worker's messages, as plain arrays or as Messages carrying what they summed: computed
    from its partial gradients in float32 (float64 for a float64 wire), as a worker computes them,
    then cast to the wire type."""
    compute = np.float64 if wire == "float64" else np.float32
    out = {}
    for w in workers:
        part = g[list(code.placement[w])]
        values = code.encode(w, part.astype(compute))
        if scaled:
            scales = code.message_scales(w, part)
            out[w] = [to_wire(v, s, WIRE[wire]) for v, s in zip(values, scales)]
        else:
            with np.errstate(over="ignore"):  # a 16-bit overflow: the caller treats it as a straggler
                out[w] = values.astype(WIRE[wire])
    return out


@pytest.mark.parametrize("wire", ["float32", "float64"])
def test_a_bound_without_scales_is_an_estimate_and_strict_refuses_it(wire):
    """FRC with each worker's two partitions cancelling: without scales the message's own norm
    stands in for what it summed and the bound is far too small (the decode is off by much more);
    the decode says its bound is not guaranteed, and strict decoding refuses it. With the scales
    the bound holds and is guaranteed."""
    code = gradcode.make_code("frc", n=4, s=1)
    rng = np.random.default_rng(0)
    g = cancelling_inside_workers(code, rng, 40)
    truth = g.sum(axis=0)
    plain = messages(code, g, wire, [0, 1], scaled=False)
    rep = code.decode_report(plain, dim=40, rtol=1.0)
    assert not rep.guaranteed
    if wire == "float32":  # the estimate is wrong: the terms' rounding, not the tiny message's
        assert np.linalg.norm(rep.gradient - truth) > 10 * rep.error_bound
    with pytest.raises(ImpreciseDecodeError, match="an estimate, not a guarantee"):
        code.decode_report(plain, dim=40, rtol=1.0, strict=True)
    scaled = code.decode_report(messages(code, g, wire, [0, 1], scaled=True), dim=40, rtol=1.0)
    assert scaled.guaranteed and np.linalg.norm(scaled.gradient - truth) <= scaled.error_bound
    given_scales = {w: code.message_scales(w, g[list(code.placement[w])]) for w in (0, 1)}
    assert code.decode_report(plain, dim=40, rtol=1.0, scales=given_scales, strict=True).guaranteed


@pytest.mark.parametrize("wire", ["float32", "float16"])
def test_a_decode_beyond_rtol_is_flagged_counted_and_refused_when_strict(wire):
    """A plain sum of cancelling gradients (near an optimum) is beyond rtol but no worse than a
    plain sum: accepted, flagged ``within_rtol=False`` and caught by ``loose_decodes``; with
    ``strict=True`` (or the code's ``decode_strict``) it is refused, saying why."""
    code = gradcode.make_code("uncoded", n=8)
    rng = np.random.default_rng(2)
    g = rng.standard_normal((8, 30))
    g -= g.mean(axis=0)
    g[0] += 1e-6 * rng.standard_normal(30)
    msgs = messages(code, g, wire, range(8), scaled=True)
    with loose_decodes() as caught:
        rep = code.decode_report(msgs, dim=30)
    assert rep.guaranteed and not rep.within_rtol and rep.relative_bound > DEFAULT_RTOL[wire]
    assert len(caught) == 1 and caught[0].relative_bound == rep.relative_bound
    assert caught[0].rtol == DEFAULT_RTOL[wire]
    with pytest.raises(ImpreciseDecodeError, match="strict: no plain-sum allowance"):
        code.decode_report(msgs, dim=30, strict=True)
    strict = gradcode.make_code("uncoded", n=8)
    strict.decode_strict = True
    with pytest.raises(ImpreciseDecodeError):
        strict.decode(msgs, dim=30)
    with loose_decodes() as caught:  # within rtol: nothing flagged
        ok = code.decode_report(messages(code, rng.standard_normal((8, 30)), wire, range(8), scaled=True), dim=30)
    assert ok.within_rtol and caught == []


CODES = [
    ("uncoded", dict(n=6), 0),
    ("frc", dict(n=6, s=2), 2),
    ("crc", dict(n=6, s=2, seed=0), 2),
    ("cgc", dict(n=12, d=4, m=2), 2),
    ("agc", dict(n=8, d=3, L=6, seed=0), 2),
    ("commfr", dict(n=20, k=5, N=4, K=2, construction="mds-gaussian", seed=0), 2),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CODES), wire=st.sampled_from(list(WIRE)), cancel=st.booleans(),
       seed=st.integers(0, 2**31 - 1))
def test_fuzz_decodes_without_scales_never_claim_a_guarantee(case, wire, cancel, seed):
    """Decodes of plain arrays, any code and wire type, terms cancelling or not: every accepted one
    whose messages sum several terms says its bound is an estimate (``guaranteed=False``) and
    strict decoding refuses it; with the scales carried by Messages the same decode's bound is
    guaranteed and holds."""
    name, params, s = case
    code = gradcode.make_code(name, **params)
    rng = np.random.default_rng(seed)
    d = 3 * code.chunks + 2
    g = rng.standard_normal((code.k, d))
    if cancel:
        g -= g.mean(axis=0)
    truth = g.sum(axis=0)
    late = set(rng.choice(code.n, size=s, replace=False).tolist()) if s else set()
    workers = [w for w in range(code.n) if w not in late]
    plain = messages(code, g, wire, workers, scaled=False)
    if not all(np.isfinite(np.asarray(m, dtype=np.float64)).all() for m in plain.values()):
        return  # a 16-bit type overflowed at the worker: such messages are stragglers
    try:
        rep = code.decode_report(plain, dim=d)
    except NotDecodableError:
        return  # refused (imprecise, or the pattern): never a wrong answer
    # a one-term message cannot cancel: its own norm is what it summed (the uncoded workers')
    assert rep.guaranteed == (name == "uncoded")
    if not rep.guaranteed:
        with pytest.raises(ImpreciseDecodeError):
            code.decode_report(plain, dim=d, strict=True)
    try:
        scaled = code.decode_report(messages(code, g, wire, workers, scaled=True), dim=d)
    except NotDecodableError:
        return
    assert scaled.guaranteed
    assert np.linalg.norm(scaled.gradient - truth) <= scaled.error_bound * (1 + 1e-9) + 1e-300


def test_runtime_workers_always_send_their_scales(monkeypatch, tmp_path):
    """Every decode of a training run has a guaranteed bound: the workers send Messages with what
    they summed, on the built-in problems and on a torch model alike."""
    seen = []
    real = answer_check.bound_decode

    def recording(*args, **kwargs):  # every decode's bound: held, streamed (FRC, uncoded) or operator
        rep = real(*args, **kwargs)
        seen.append(rep.guaranteed)
        return rep

    monkeypatch.setattr(answer_check, "bound_decode", recording)
    data = {"n_samples": 120, "n_features": 4}
    spec = TrainSpec("crc", workers=4, stragglers=1, delay=0.01, data_params=data)
    train(spec, run=RunConfig(rounds=3, eval_every=0, run_dir=tmp_path / "a"), engine=InProcessEngine())
    torch = pytest.importorskip("torch")
    from gradcode.torch import TorchConfig, fit

    X, y = torch.randn(64, 5), torch.randint(0, 2, (64,))
    fit(torch.nn.Linear(5, 2), (X, y), TrainSpec("frc", workers=4, stragglers=1),
        torch_config=TorchConfig(batch_size=16, wire_dtype="float16"),
        run=RunConfig(rounds=2, eval_every=0, run_dir=tmp_path / "b"), engine="inprocess")
    assert len(seen) >= 5 and all(seen)


def test_a_run_counts_its_rounds_accepted_beyond_rtol(tmp_path):
    """A code whose tolerance no decode can meet: every round's gradient is accepted as no worse
    than a plain sum, and the run's records say so (``loose``, ``loose_rounds``, the JSON)."""
    code = gradcode.make_code("frc", n=4, s=1)
    code.decode_rtol = 1e-300
    res = train(TrainSpec(code, data_params={"n_samples": 80, "n_features": 3}),
                run=RunConfig(rounds=3, eval_every=0, run_dir=tmp_path / "r"), engine=InProcessEngine())
    assert res.loose_rounds == 3 and (res.loose > 1e-300).all()
    doc = res.to_json()
    assert doc["loose_rounds"] == 3 and len(doc["loose"]) == 3
    assert summary_rows(res)[0]["loose_rounds"] == 3  # the command line's table shows them
    clean = train(TrainSpec("frc", workers=4, stragglers=1, data_params={"n_samples": 80, "n_features": 3}),
                  run=RunConfig(rounds=2, eval_every=0, run_dir=tmp_path / "c"), engine=InProcessEngine())
    assert clean.loose_rounds == 0 and np.isnan(clean.loose).all() and "loose_rounds" not in summary_rows(clean)[0]
