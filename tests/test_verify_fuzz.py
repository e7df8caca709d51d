"""Verification holds within its capacity, in every wire type: a fuzz of 1,000 rounds per type.

What this guards against: one corrupted bfloat16 worker passed silently in 42 of 1,000 rounds (the
threshold was the decode's tolerance, far above 16-bit rounding), and with two corrupted float64
workers in an FRC group an honest worker was excluded (the third copy: two copies corrupted alike
look like one corrupted copy). The contract tested here, per round (``Verification.locates`` ``t``
and ``detects`` ``D - 1 - t`` from the round's distance ``D``, :mod:`gradcode.codes.verify`):

* honest workers only: never an exclusion, never an error (rounding is agreement, in every type);
* ``e <= t`` workers corrupted above their type's rounding: named exactly and the gradient decoded
  without them, within that decode's own error bound, or the round raises;
* ``t < e <= D - 1 - t``: the round raises;
* within ``D - 1 - t``, an honest worker is never excluded.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import gradcode
from gradcode.codes import InconsistentMessagesError, UNIT_ROUNDOFF
from gradcode.codes.messages import to_wire
from gradcode.errors import NotDecodableError

WIRE = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
CODES = [("crc", dict(n=6, s=2, seed=0)), ("frc", dict(n=6, s=2)), ("crc", dict(n=7, s=3, seed=1)),
         ("crc", dict(n=8, s=4, seed=2)), ("frc", dict(n=8, s=3))]
CASES = 1000


def send(code, g, wire):
    """Every worker's message as the runtime sends it: computed in float32 (float64 for a float64
    wire) with its scale, cast to the wire type."""
    compute = np.float64 if wire == "float64" else np.float32
    out = {}
    for w in range(code.n):
        part = g[list(code.placement[w])]
        value = code.encode(w, part.astype(compute))[0]
        out[w] = to_wire(value, float(code.message_scales(w, part)[0]), WIRE[wire])
    return out


def corrupt(msg, wire, rng):
    """The message changed far above what its rounding allows, so that every worker's checks see
    it: 1e4x to 1e6x its type's unit roundoff plus the float64 checks' own (64 eps a row), at most
    10x itself; scaled, or one element moved by that share of the message's norm. (What is caught
    near the rounding level is tested on its own in tests/test_verify.py.)"""
    values = np.asarray(msg, dtype=np.float64)
    rounding = UNIT_ROUNDOFF[wire] + 64 * 8 * np.finfo(np.float64).eps
    size = min(rounding * 10 ** rng.uniform(4, 6), 10.0) * rng.choice([-1, 1])
    if rng.random() < 0.5:
        bad = values * (1 + size)
    else:
        bad = values.copy()
        bad[rng.integers(values.size)] += size * np.linalg.norm(values)
    # a faulty worker's scale is what it computed from its partials (the decode needs only
    # ||m_i|| <= S_i, kept here so that the 16-bit cast stays in range)
    return to_wire(bad, max(msg.scale, float(np.linalg.norm(bad))), WIRE[wire])


@pytest.mark.parametrize("wire", list(WIRE))
def test_fuzz_verification_names_or_refuses_within_its_capacity(wire):
    rng = np.random.default_rng(sum(map(ord, wire)))
    tally = {"honest": 0, "named": 0, "refused": 0, "skipped": 0}
    for case in range(CASES):
        name, params = CODES[case % len(CODES)]
        code = gradcode.make_code(name, **params)
        d = int(rng.integers(4, 24))
        g = rng.standard_normal((code.k, d)) * 10 ** rng.uniform(-3, 3)
        truth = g.sum(axis=0)
        msgs = send(code, g, wire)
        try:
            out, v = code.decode_verified(msgs, dim=d, seed=case)
        except NotDecodableError as exc:  # a 16-bit decode refused as imprecise: nothing to verify
            assert not isinstance(exc, InconsistentMessagesError), (case, name, exc)
            tally["skipped"] += 1
            continue
        assert v.excluded == (), (case, name, "an honest round excluded", v)
        t, detects = v.locates, v.detects
        e = int(rng.integers(0, detects + 1))
        if e == 0:
            tally["honest"] += 1
            continue
        bad = sorted(rng.choice(code.n, size=e, replace=False).tolist())
        sent = dict(msgs)
        for w in bad:
            sent[w] = corrupt(msgs[w], wire, rng)
        try:
            out, v = code.decode_verified(sent, dim=d, seed=case)
        except InconsistentMessagesError:
            tally["refused"] += 1
            continue
        assert e <= t, (case, name, f"{e} corrupted beyond the {t} it can name returned", v.excluded, bad)
        assert sorted(v.excluded) == bad, (case, name, "named", v.excluded, "corrupted", bad)
        rep = code.decode_report({w: m for w, m in msgs.items() if w not in bad}, dim=d)
        assert np.linalg.norm(out - truth) <= rep.error_bound * (1 + 1e-9) + 1e-300, (case, name)
        tally["named"] += 1
    # the fuzz reached every branch, and skipped few rounds
    assert tally["honest"] > 100 and tally["named"] > 100 and tally["refused"] > 20, tally
    assert tally["skipped"] < CASES // 10, tally
