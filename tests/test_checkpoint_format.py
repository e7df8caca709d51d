"""Checkpoints without pickle (gradcode.runtime.safe_state): what the codec holds bit for bit, what
it refuses, that a document cannot make resume run foreign code, and that a crash while writing
leaves the previous checkpoint readable."""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict, defaultdict, deque
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import gradcode
from gradcode.runtime import CheckpointError, UnsafeStateError
from gradcode.runtime import safe_state
from gradcode.runtime.safe_state import decode, encode, read_document, write_document


def roundtrip(value):
    arrays: list = []
    doc = json.loads(json.dumps(encode(value, arrays), allow_nan=False))  # strict JSON on the way
    return decode(doc, {f"a{i}": a for i, a in enumerate(arrays)})


def test_plain_values_and_containers_come_back_as_they_were():
    value = {"a": [1, 2.5, None, True, "x"], "t": (1, (2, 3)), "s": {3, 1}, "f": frozenset({2}),
             "keys": {1: "one", (2, 3): "pair", "__x": 4}, "nan": math.nan, "inf": -math.inf,
             "o": OrderedDict([("b", 1), ("a", 2)]), "dd": defaultdict(list, {"k": [1]}),
             "q": deque([1, 2], maxlen=3), "frac": Fraction(2, 6), "path": Path("/tmp/x")}
    back = roundtrip(value)
    assert back["a"] == value["a"] and back["t"] == (1, (2, 3)) and back["s"] == {1, 3}
    assert back["f"] == frozenset({2}) and back["keys"] == value["keys"]
    assert math.isnan(back["nan"]) and back["inf"] == -math.inf
    assert isinstance(back["o"], OrderedDict) and list(back["o"]) == ["b", "a"]
    assert isinstance(back["dd"], defaultdict) and back["dd"]["new"] == []
    assert back["q"] == deque([1, 2]) and back["q"].maxlen == 3
    assert back["frac"] == Fraction(1, 3) and back["path"] == Path("/tmp/x")


def test_arrays_generators_and_gradcode_objects_come_back_bit_for_bit():
    rng = np.random.default_rng(5)
    rng.random(3)
    arr = np.array([[1.5, -0.0], [np.nan, 3]], dtype=np.float32)
    code = gradcode.make_code("crc", n=5, s=2, seed=1)
    back = roundtrip({"arr": arr, "scalar": np.int64(7), "rng": rng, "code": code})
    np.testing.assert_array_equal(back["arr"], arr)
    assert back["arr"].dtype == np.float32 and back["scalar"] == 7 and isinstance(back["scalar"], np.int64)
    assert back["rng"].random() == rng.random()
    assert repr(back["code"]) == repr(code) and back["code"].can_decode({0: 1, 1: 1, 2: 1})


def test_a_data_spec_keeps_its_parameters():
    """A DataSpec's params are a read-only dict subclass, whose items are not in its __getstate__:
    they came back empty, and a resumed run with a DataSpec was refused as another configuration."""
    spec = gradcode.DataSpec("tandon-synthetic", {"n_samples": 200, "n_features": 3})
    back = roundtrip(spec)
    assert back == spec and dict(back.params) == {"n_samples": 200, "n_features": 3}
    with pytest.raises(TypeError, match="read-only"):
        back.params["n_samples"] = 1


def test_bytes_and_slotted_objects_come_back():
    from gradcode.schemes.sgc.common import _Round

    r = _Round(3, np.array([0, 1, 1, 0]), np.array([-1, 3, 2, -1]), 3)
    r.counts[1] = 1
    back = roundtrip({"b": b"ab", "ba": bytearray(b"xy"), "round": r})
    assert back["b"] == b"ab" and isinstance(back["ba"], bytearray) and back["ba"] == bytearray(b"xy")
    assert back["round"].t == 3 and back["round"].cur.tolist() == [False, True, True, False]
    assert back["round"].plan.tolist() == [-1, 3, 2, -1] and back["round"].counts.tolist() == [0, 1, 0, 0]


def test_torch_tensors_come_back_bit_for_bit():
    torch = pytest.importorskip("torch")
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64):
        t = (torch.arange(6, dtype=torch.float32) / 7).to(dtype)
        back = roundtrip({"t": t})["t"]
        assert back.dtype == dtype and torch.equal(back, t)


@pytest.mark.parametrize("value,match", [
    (lambda x: x, "not a gradcode class"),
    (np.array([object()], dtype=object), "array of Python objects"),
    (defaultdict(lambda: 0), "defaultdict"),
    (Path, "not a gradcode class"),
])
def test_what_needs_pickle_is_refused(value, match):
    with pytest.raises(UnsafeStateError, match=match):
        encode({"x": value}, [])


def _document(tmp_path, body) -> Path:
    """A document with correct digests around ``body``: what an attacker could write."""
    import io

    buf = io.BytesIO()
    np.savez(buf)
    blob = buf.getvalue()
    name = "checkpoint-" + "0" * 16 + ".npz"
    (tmp_path / name).write_bytes(blob)
    content = json.dumps({"format": "gradcode-checkpoint", "arrays": name,
                          "arrays_sha256": hashlib.sha256(blob).hexdigest(), "body": body})
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps({"sha256": hashlib.sha256(content.encode()).hexdigest(), "content": content}))
    return path


@pytest.mark.parametrize("body", [
    {"__object": "os:_wrap_close", "state": {}},
    # a trusted module's attribute chain leading to a foreign class (one that deletes a file when
    # collected): the class itself must be gradcode's
    {"__object": "gradcode.runtime.engine:tempfile._TemporaryFileCloser", "state": {"name": "/tmp/x"}},
    {"__object": "gradcode.runtime.safe_state:io.StringIO", "state": {}},
    {"__class": "subprocess:Popen"},
    {"__object": "gradcode.codes.base:np", "state": {}},  # a trusted module's non-class attribute
    {"__enum": "builtins:object", "name": "x"},
    {"__rng": "os", "state": {}},
])
def test_a_document_cannot_name_foreign_code(tmp_path, body):
    path = _document(tmp_path, body)
    with pytest.raises(CheckpointError, match="checkpoint.json: cannot be restored"):
        read_document(path, trust=True)  # even a document trusted deliberately runs no foreign code


def test_a_document_with_digests_but_bad_content_is_refused(tmp_path):
    """Malformed tags, a foreign arrays name and an array header claiming 745 GiB: each a
    CheckpointError, never a raw exception or an allocation."""
    for body in ({"__fraction": [1, 0]}, {"__nd": 3}, {"__enum": 5, "name": "x"}):
        with pytest.raises(CheckpointError, match="cannot be restored"):
            read_document(_document(tmp_path, body), trust=True)
    path = _document(tmp_path, {})
    outer = json.loads(path.read_text())
    inner = json.loads(outer["content"])
    inner["arrays"] = "../../etc/passwd"
    content = json.dumps(inner)
    path.write_text(json.dumps({"sha256": hashlib.sha256(content.encode()).hexdigest(), "content": content}))
    with pytest.raises(CheckpointError, match="not a gradcode checkpoint"):
        read_document(path, trust=True)
    import io

    buf = io.BytesIO()
    np.savez(buf, a0=np.zeros(4))
    huge = buf.getvalue().replace(b"'shape': (4,), ", b"'shape': (100000000000,), ")
    name = "checkpoint-" + "0" * 16 + ".npz"
    (tmp_path / name).write_bytes(huge)
    content = json.dumps({"format": "gradcode-checkpoint", "arrays": name,
                          "arrays_sha256": hashlib.sha256(huge).hexdigest(), "body": {"x": {"__nd": 0}}})
    path.write_text(json.dumps({"sha256": hashlib.sha256(content.encode()).hexdigest(), "content": content}))
    with pytest.raises(CheckpointError, match="cannot be restored"):
        read_document(path, trust=True)


def test_a_crash_while_writing_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.json"
    write_document(path, {"round": 1, "x": np.arange(3)})
    real = safe_state.atomic_write

    def crash_on_json(target, data):
        if target.suffix == ".json":
            raise OSError("disk full")
        real(target, data)

    monkeypatch.setattr(safe_state, "atomic_write", crash_on_json)
    with pytest.raises(OSError, match="disk full"):
        write_document(path, {"round": 2, "x": np.arange(4)})
    doc = read_document(path)
    assert doc["round"] == 1 and doc["x"].tolist() == [0, 1, 2]
    monkeypatch.setattr(safe_state, "atomic_write", real)
    write_document(path, {"round": 3, "x": np.arange(5)})
    assert read_document(path)["round"] == 3
    assert len(list(tmp_path.glob("checkpoint-*.npz"))) == 1  # the crashed write's arrays are gone too


def test_a_missing_arrays_file_is_named(tmp_path):
    path = tmp_path / "checkpoint.json"
    write_document(path, {"x": np.arange(3)})
    (blob,) = tmp_path.glob("checkpoint-*.npz")
    blob.unlink()
    with pytest.raises(CheckpointError, match=blob.name):
        read_document(path)


def test_trust_modules_checks_its_names():
    with pytest.raises(ValueError, match="module names"):
        gradcode.runtime.trust_modules("")


def test_a_class_named_by_the_module_it_was_split_from_comes_back():
    """Checkpoints written before gradcode.stragglers.models became a package name its classes
    there; the package re-exports them from its submodules, and they resolve. A name that leads
    outside the named module's own submodules still does not."""
    from gradcode.runtime.safe_state import UnsafeStateError, _lookup
    from gradcode.stragglers.models import GilbertElliot, TraceDelays

    assert _lookup("gradcode.stragglers.models:GilbertElliot") is GilbertElliot
    assert _lookup("gradcode.stragglers.models:TraceDelays") is TraceDelays
    assert _lookup("gradcode.stragglers.models.markov:GilbertElliot") is GilbertElliot
    with pytest.raises(UnsafeStateError):
        _lookup("gradcode.stragglers.models:np")  # the package's numpy import
    with pytest.raises(UnsafeStateError):
        _lookup("gradcode.schemes:KOfN")  # re-exported from gradcode.codes.rules, not a submodule


# ------------------------------------------------------------------------ crafted checkpoints


def _checkpointed_run(tmp_path):
    from gradcode.problems import DataSpec
    from gradcode.runtime import RunConfig, TrainSpec, train

    train(TrainSpec("crc", workers=4, stragglers=1, data=DataSpec("tandon-synthetic", {"n_samples": 200})),
          run=RunConfig(rounds=2, checkpoint_every=1, run_dir=tmp_path), engine="inprocess")
    return tmp_path / "checkpoint.json"


def _rewrite_body(path, edit):
    """Edit a checkpoint's JSON body in place and give it valid digests again (not the MACs: the
    editor has no key)."""
    outer = json.loads(path.read_text())
    inner = json.loads(outer["content"])
    edit(inner["body"])
    content = json.dumps(inner, sort_keys=True)
    path.write_text(json.dumps({"sha256": hashlib.sha256(content.encode()).hexdigest(), "content": content}))


def _objects(doc, suffix):
    """The encoded objects of a class whose name ends with ``suffix``, anywhere in ``doc``."""
    if isinstance(doc, dict):
        if str(doc.get("__object", "")).endswith(suffix):
            yield doc
        for v in doc.values():
            yield from _objects(v, suffix)
    elif isinstance(doc, list):
        for v in doc:
            yield from _objects(v, suffix)


def test_crafted_checkpoints_are_refused_at_once(tmp_path):
    """Valid digests, crafted content: a spec training 10**7 models, a spec missing a field, a
    state whose tables disagree, and an array of zero-sized items claiming 10**18 of them: each a
    CheckpointError within a second, nothing large allocated (they hung, ran 369 s, or raised
    AttributeError)."""
    import time

    from gradcode.runtime import resume

    cases = {
        "models": (lambda body: next(_objects(body, ":TrainSpec"))["state"].update(models=10**7),
                   "holds 1 model\\(s\\), its spec 10000000"),
        "missing field": (lambda body: next(_objects(body, ":DataSpec"))["state"].pop("dataset"),
                          "DataSpec: the document lacks dataset"),
        "bad tables": (lambda body: body["state"].update(next_round=99),
                       "next_round 99 of 2 rounds"),
    }
    for name, (edit, match) in cases.items():
        run_dir = tmp_path / name.replace(" ", "-")
        path = _checkpointed_run(run_dir)
        _rewrite_body(path, edit)
        start = time.perf_counter()
        with pytest.raises(CheckpointError, match=match):
            resume(run_dir, engine="inprocess", trust_checkpoint=True)  # past the MAC: the checks after it
        assert time.perf_counter() - start < 1.0, name


def test_an_array_of_zero_sized_items_is_refused(tmp_path):
    import io
    import zipfile

    npy = io.BytesIO()  # an .npy header only: 10**18 items of zero bytes need no data
    np.lib.format.write_array_header_1_0(npy, {"descr": "|V0", "fortran_order": False, "shape": (10**18,)})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("a0.npy", npy.getvalue())
    crafted = buf.getvalue()
    name = "checkpoint-" + "0" * 16 + ".npz"
    (tmp_path / name).write_bytes(crafted)
    content = json.dumps({"format": "gradcode-checkpoint", "arrays": name,
                          "arrays_sha256": hashlib.sha256(crafted).hexdigest(), "body": {"x": {"__nd": 0}}})
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps({"sha256": hashlib.sha256(content.encode()).hexdigest(), "content": content}))
    with pytest.raises(CheckpointError, match="dtype '\\|V0', which a checkpoint never holds"):
        read_document(path, trust=True)


def test_a_checkpoint_edited_with_its_digests_recomputed_is_refused_without_the_key(tmp_path):
    """Digests detect damage, not edits: run B's arrays written into run A's checkpoint with both
    digests recomputed used to resume with exit 0 and B's loss. The MACs under this user's key
    refuse it, naming how to accept it deliberately; accepted so, it resumes."""
    from gradcode.runtime import resume

    path = _checkpointed_run(tmp_path / "a")
    _rewrite_body(path, lambda body: None)  # not even a change: the MAC is gone with the rewrite
    with pytest.raises(CheckpointError, match="not written with this user's checkpoint key.*--trust-checkpoint"):
        resume(tmp_path / "a", engine="inprocess")
    assert resume(tmp_path / "a", engine="inprocess", trust_checkpoint=True).losses.shape[0] == 2


def test_a_checkpoint_written_with_another_key_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(safe_state.KEY_ENV, "a" * 32)
    path = tmp_path / "checkpoint.json"
    write_document(path, {"x": np.arange(3)})
    assert read_document(path)["x"].tolist() == [0, 1, 2]
    monkeypatch.setenv(safe_state.KEY_ENV, "b" * 32)
    with pytest.raises(CheckpointError, match="not written with this user's checkpoint key"):
        read_document(path)
    assert read_document(path, trust=True)["x"].tolist() == [0, 1, 2]
    monkeypatch.setenv(safe_state.KEY_ENV, "short")
    with pytest.raises(CheckpointError, match="at least 16 characters"):
        read_document(path)


def test_the_key_file_is_made_owner_only_and_one_others_may_read_is_refused(tmp_path, monkeypatch):
    import os
    import stat

    monkeypatch.delenv(safe_state.KEY_ENV, raising=False)
    monkeypatch.setenv(safe_state.KEY_FILE_ENV, str(tmp_path / "home" / "checkpoint.key"))
    key = safe_state.checkpoint_key()
    made = tmp_path / "home" / "checkpoint.key"
    assert len(key) == 64 and stat.S_IMODE(os.stat(made).st_mode) == 0o600
    assert safe_state.checkpoint_key() == key  # the same key from then on
    os.chmod(made, 0o644)
    with pytest.raises(CheckpointError, match="may be read or written by others.*chmod 600"):
        safe_state.checkpoint_key()


def _rewrite_arrays(path, edit):
    """Edit a checkpoint's body and arrays (``edit(body, arrays)``) and give both valid digests."""
    import io

    outer = json.loads(path.read_text())
    inner = json.loads(outer["content"])
    blob_path = path.with_name(inner["arrays"])
    with np.load(blob_path) as z:
        arrays = {k: z[k] for k in z.files}
    edit(inner["body"], arrays)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    blob_path.write_bytes(buf.getvalue())
    inner["arrays_sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    content = json.dumps(inner, sort_keys=True)
    path.write_text(json.dumps({"sha256": hashlib.sha256(content.encode()).hexdigest(), "content": content}))


def _params_key(body) -> str:
    return f"a{body['state']['params'][0]['__nd']}"


def _set_params(body, arrays, value):
    arrays[_params_key(body)] = value(arrays[_params_key(body)]) if callable(value) else value


FORGED = {  # what a forger wrote, and what the refusal names (each was a traceback in a later round)
    "a negative step count": (lambda body, arrays: body["state"].update(steps=[-7]), r"step counts \[-7\]"),
    "more steps than rounds": (lambda body, arrays: body["state"].update(steps=[9]), r"step counts \[9\] after 2"),
    "parameters of another shape": (lambda body, arrays: _set_params(body, arrays, np.zeros(7)),
                                    r"model 0's parameters are float64 \(7,\), the problem's float64 \(\d+,\)"),
    "parameters of another type": (lambda body, arrays: _set_params(body, arrays, lambda x: x.astype(np.int64)),
                                   r"model 0's parameters are int64"),
    "NaN parameters": (lambda body, arrays: _set_params(body, arrays, lambda x: np.full_like(x, np.nan)),
                       "model 0's parameters hold NaN or infinity"),
    "the code's _k": (lambda body, arrays: next(_objects(body, ":CRC"))["state"].update(_k=3), "the code's k"),
    "the code's _n": (lambda body, arrays: next(_objects(body, ":CRC"))["state"].update(_n=5), "the code's n"),
    "the code's placement": (lambda body, arrays: next(_objects(body, ":CRC"))["state"].update(
        _placement={"__tuple": [{"__tuple": [0, 1]}] * 4}), "the code's placement"),
}


@pytest.mark.parametrize("case", sorted(FORGED))
def test_every_value_a_checkpoint_restores_is_checked_before_the_run_starts(tmp_path, case):
    """Forged values behind valid digests, trusted deliberately (the MAC is not what stops them):
    each a CheckpointError naming it, within a second, before any round (``steps=[-7]``, a (7,)
    parameter vector, NaN parameters and the code's ``_k`` set to 3 used to be tracebacks
    mid-run)."""
    import time

    from gradcode.runtime import resume

    edit, match = FORGED[case]
    path = _checkpointed_run(tmp_path / "run")
    _rewrite_arrays(path, edit)
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=match):
        resume(tmp_path / "run", engine="inprocess", trust_checkpoint=True)
    assert time.perf_counter() - start < 1.0
