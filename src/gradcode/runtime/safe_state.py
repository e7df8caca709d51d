"""Checkpoint documents without pickle: structure in JSON, arrays in one ``.npz``, SHA-256 over both.

Why not pickle: loading a pickle runs whatever code it names, so a run directory from elsewhere
could execute anything on ``--resume``; and a flipped bit in a pickle may load as different numbers
without a word. Here:

* :func:`encode` turns a document into JSON values and a list of arrays. Plain values (``None``,
  booleans, ints, floats, strings), lists and string-keyed dicts stay as they are; everything else
  becomes a one-key tagged dict: ``{"__nd": i}`` (array ``i`` of the ``.npz``; numpy scalars are
  0-d arrays with ``"scalar": true``), ``{"__float": "nan"}`` (non-finite floats, which strict JSON
  lacks), ``{"__tuple": [...]}``, ``{"__set": [...]}``, ``{"__frozenset": [...]}``,
  ``{"__dict": [[k, v], ...]}`` (other keys), ``{"__odict": ...}``, ``{"__defaultdict": ...}``
  (of a builtin type), ``{"__deque": ...}``, ``{"__fraction": [p, q]}``, ``{"__path": "..."}``,
  ``{"__bytes": i}`` (bytes or a bytearray, as an array of the ``.npz``), ``{"__rng": ...}`` (a
  numpy ``Generator``: its bit generator's name and state),
  ``{"__tensor": i, "dtype": ...}`` (a torch tensor, bit for bit), ``{"__enum": ..., "name": ...}``,
  ``{"__class": "module:qualname"}`` and ``{"__object": "module:qualname", "state": ...}`` (an
  instance: its ``__getstate__()``, restored by the class's ``__setstate__`` or, for the default
  state, into its ``__dict__`` and ``__slots__``; a dict subclass's items beside it, ``"items"``; a frozen dataclass, a config or spec, through its
  own constructor, so that it is checked as a constructed one is).
* Classes, enums and instances are limited to gradcode's own modules and those the user names with
  :func:`trust_modules` (a scheme or code class of their own): :func:`decode` imports nothing else
  and calls only ``cls.__new__`` and the class's ``__setstate__`` (or a ``__dict__`` update), or a
  trusted frozen dataclass's constructor, so a document cannot run foreign code. Arrays are
  numbers, booleans or text of non-zero item size. Anything else (a function, a class
  of an untrusted module) cannot be encoded: :class:`UnsafeStateError`.
* :func:`write_document` writes the arrays to ``STEM-<digest>.npz`` first, then ``STEM.json``
  atomically, holding the structure, the name and SHA-256 of its ``.npz`` and a SHA-256 of its own
  content; only then are the previous ``.npz`` files removed. At every moment ``STEM.json`` names a
  complete pair, so a crash mid-write leaves the previous checkpoint readable.
  :func:`read_document` checks both digests before decoding anything: any changed byte is a
  :class:`~gradcode.runtime.records.CheckpointError` naming the file.
* Digests detect damage, not edits: anyone who can write the run folder can recompute them. So both
  files also carry an HMAC-SHA256 under this user's checkpoint key (:func:`checkpoint_key`:
  ``$GRADCODE_CHECKPOINT_KEY``, or ``~/.gradcode/checkpoint.key``, created on first use readable by
  its owner only), and :func:`read_document` refuses a document whose MACs do not verify (written
  with another key, by another user, before keyed checkpoints, or edited) unless the caller trusts
  it deliberately (``trust=True``: ``RunConfig.trust_checkpoint``, ``--trust-checkpoint``). Threat
  model: someone who can write the run folder but not read the key (another user of a shared
  folder, a copied run directory) cannot make a run resume from a state of their choosing; someone
  who can read the key (this user, root) can, and a key given in the environment is as safe as the
  environment. The digests stay, so that damage and a foreign key are told apart.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import hmac
import importlib
import io
import json
import math
import os
import re
import zipfile
from collections import OrderedDict, defaultdict, deque
from fractions import Fraction
from pathlib import Path, PurePath

import numpy as np

from gradcode._validation import read_regular
from gradcode.errors import GradcodeError, UnsafeFileError


class CheckpointError(GradcodeError):
    """``resume`` found a checkpoint it cannot read (truncated, overwritten, not a checkpoint)."""


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, so that a crash leaves
    the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)

__all__ = ["UnsafeStateError", "decode", "encode", "read_document", "trust_modules", "write_document"]

#: the modules whose classes a document may name (and their submodules)
_TRUSTED = {"gradcode"}

_FORMAT = "gradcode-checkpoint"
#: the default factories a defaultdict may have
_FACTORIES = {f.__name__: f for f in (list, dict, set, int, float)}


class UnsafeStateError(GradcodeError, TypeError):
    """A value that a checkpoint cannot hold without pickle (a function, a class from outside
    gradcode, an object array), or a document naming one."""


def trust_modules(*modules: str) -> None:
    """Let checkpoints hold (and resume) instances of the classes of ``modules`` and their
    submodules, e.g. the module of a scheme class of your own. Call it before training and before
    resuming: a checkpoint naming a module that was not trusted is refused."""
    for m in modules:
        if not isinstance(m, str) or not m or m.startswith(".") or m.endswith("."):
            raise ValueError(f"trust_modules takes module names such as 'mypackage.schemes', got {m!r}")
        _TRUSTED.add(m)


def _trusted(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in _TRUSTED)


def _name_of(cls) -> str:
    module, qualname = getattr(cls, "__module__", ""), getattr(cls, "__qualname__", "")
    if not _trusted(module) or "<" in qualname:
        raise UnsafeStateError(f"{module}.{qualname} is not a gradcode class (nor one of a module given to"
                               " trust_modules): a checkpoint cannot hold it")
    return f"{module}:{qualname}"


def _lookup(name) -> type:
    if not isinstance(name, str) or ":" not in name:
        raise UnsafeStateError(f"not a class name: {name!r}")
    module, _, qualname = name.partition(":")
    if not _trusted(module):
        raise UnsafeStateError(f"the document names {module}.{qualname}, which is not a gradcode class nor one of"
                               " a module given to gradcode.runtime.trust_modules")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    # the class itself must be defined in a trusted module under that very name (a trusted
    # module's attribute chain may lead elsewhere: gradcode.runtime.engine:tempfile....), or in a
    # submodule of the named one that it re-exports (a module split into a package, as
    # gradcode.stragglers.models was: checkpoints written before name the package)
    if (not isinstance(obj, type) or not _trusted(obj.__module__) or obj.__qualname__ != qualname
            or not (obj.__module__ == module or obj.__module__.startswith(module + "."))):
        raise UnsafeStateError(f"{name} is not a gradcode class")
    return obj


# ----------------------------------------------------------------------------------------- encode
def encode(value, arrays: list):
    """``value`` as JSON values; arrays are appended to ``arrays`` and referred to by index."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return {"__enum": _name_of(type(value)), "name": value.name}
    if isinstance(value, int) and type(value) is int:
        return value
    if isinstance(value, float) and type(value) is float:
        return value if math.isfinite(value) else {"__float": repr(value)}
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise UnsafeStateError("an array of Python objects cannot be checkpointed without pickle")
        arrays.append(arr)
        return {"__nd": len(arrays) - 1, **({"scalar": True} if isinstance(value, np.generic) else {})}
    if isinstance(value, list):
        return [encode(v, arrays) for v in value]
    if isinstance(value, tuple) and type(value) is tuple:
        return {"__tuple": [encode(v, arrays) for v in value]}
    if isinstance(value, (set, frozenset)):
        key = "__frozenset" if isinstance(value, frozenset) else "__set"
        return {key: [encode(v, arrays) for v in sorted(value, key=repr)]}
    if isinstance(value, dict) and type(value) is dict:
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode(v, arrays) for k, v in value.items()}
        return {"__dict": [[encode(k, arrays), encode(v, arrays)] for k, v in value.items()]}
    if isinstance(value, OrderedDict):
        return {"__odict": [[encode(k, arrays), encode(v, arrays)] for k, v in value.items()]}
    if isinstance(value, defaultdict):
        if value.default_factory not in _FACTORIES.values():
            raise UnsafeStateError(f"a defaultdict of {value.default_factory!r} cannot be checkpointed")
        return {"__defaultdict": value.default_factory.__name__,
                "items": [[encode(k, arrays), encode(v, arrays)] for k, v in value.items()]}
    if isinstance(value, deque):
        return {"__deque": [encode(v, arrays) for v in value], "maxlen": value.maxlen}
    if isinstance(value, (bytes, bytearray)):
        arrays.append(np.frombuffer(bytes(value), dtype=np.uint8).copy())
        return {"__bytes": len(arrays) - 1, "mutable": isinstance(value, bytearray)}
    if isinstance(value, Fraction):
        return {"__fraction": [value.numerator, value.denominator]}
    if isinstance(value, PurePath):
        return {"__path": str(value)}
    if isinstance(value, np.random.Generator):
        bits = value.bit_generator
        return {"__rng": type(bits).__name__, "state": encode(bits.state, arrays)}
    if type(value).__module__ == "torch" and type(value).__name__ in ("Tensor", "Parameter"):
        return _encode_tensor(value, arrays)
    if isinstance(value, type):
        return {"__class": _name_of(value)}
    name = _name_of(type(value))  # refuses instances of foreign classes (functions included)
    out = {"__object": name, "state": encode(value.__getstate__(), arrays)}
    if isinstance(value, dict):  # a dict subclass: its items are not in its __getstate__
        out["items"] = [[encode(k, arrays), encode(v, arrays)] for k, v in value.items()]
    return out


def _encode_tensor(tensor, arrays: list) -> dict:
    import torch

    t = tensor.detach().cpu().contiguous()
    dtype = str(t.dtype)
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: keep its bits
        arr = t.view(torch.int16).numpy()
    else:
        arr = t.numpy()
    arrays.append(np.array(arr, copy=True))
    return {"__tensor": len(arrays) - 1, "dtype": dtype}


# ----------------------------------------------------------------------------------------- decode
def decode(doc, arrays):
    """Undo :func:`encode`; ``arrays`` maps ``"a<i>"`` to array ``i``."""
    if isinstance(doc, list):
        return [decode(v, arrays) for v in doc]
    if not isinstance(doc, dict):
        return doc
    if len(doc) >= 1:
        tag = next(iter(doc))
        if tag.startswith("__"):
            return _decode_tagged(tag, doc, arrays)
    return {k: decode(v, arrays) for k, v in doc.items()}


def _plain_array(name: str, arr: np.ndarray) -> np.ndarray:
    """An array as :func:`encode` writes them: numbers, booleans or text of non-zero item size. A
    crafted header of zero-sized items (``|V0`` of shape ``(10**18,)``) takes no bytes in the
    file but would make whatever iterates over it run for ever."""
    if arr.dtype.kind not in "biufcSU" or arr.dtype.itemsize == 0:
        raise ValueError(f"array {name} has dtype {arr.dtype.str!r}, which a checkpoint never holds")
    return arr


def _restore_dataclass(cls, state):
    """A frozen dataclass (a config or a spec: a value) rebuilt through its constructor, so that a
    restored one is checked as a constructed one is (ranges, types, missing fields); its other
    attributes (set by ``__post_init__``) as saved."""
    if not isinstance(state, dict):
        raise UnsafeStateError(f"{_name_of(cls)}: cannot restore a state of type {type(state).__name__}")
    init = {f.name for f in dataclasses.fields(cls) if f.init}
    missing = sorted(f.name for f in dataclasses.fields(cls)
                     if f.init and f.name not in state and f.default is dataclasses.MISSING
                     and f.default_factory is dataclasses.MISSING)
    if missing:
        raise UnsafeStateError(f"{_name_of(cls)}: the document lacks {', '.join(missing)}")
    obj = cls(**{k: v for k, v in state.items() if k in init})
    for key, value in state.items():
        if key not in init:
            object.__setattr__(obj, key, value)
    return obj


def _decode_tagged(tag: str, doc: dict, arrays):
    value = doc[tag]
    if tag == "__nd":
        arr = arrays[f"a{int(value)}"]
        return arr[()] if doc.get("scalar") else arr
    if tag == "__float":
        return float(value)
    if tag == "__tuple":
        return tuple(decode(v, arrays) for v in value)
    if tag == "__set":
        return {decode(v, arrays) for v in value}
    if tag == "__frozenset":
        return frozenset(decode(v, arrays) for v in value)
    if tag == "__dict":
        return {decode(k, arrays): decode(v, arrays) for k, v in value}
    if tag == "__odict":
        return OrderedDict((decode(k, arrays), decode(v, arrays)) for k, v in value)
    if tag == "__defaultdict":
        out = defaultdict(_FACTORIES[value])
        out.update((decode(k, arrays), decode(v, arrays)) for k, v in doc["items"])
        return out
    if tag == "__deque":
        return deque((decode(v, arrays) for v in value), maxlen=doc["maxlen"])
    if tag == "__bytes":
        data = arrays[f"a{int(value)}"].tobytes()
        return bytearray(data) if doc.get("mutable") else data
    if tag == "__fraction":
        return Fraction(int(value[0]), int(value[1]))
    if tag == "__path":
        return Path(value)
    if tag == "__rng":
        if value not in ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937"):
            raise UnsafeStateError(f"unknown bit generator {value!r}")
        bits = getattr(np.random, value)()
        bits.state = decode(doc["state"], arrays)
        return np.random.Generator(bits)
    if tag == "__tensor":
        import torch

        arr = arrays[f"a{int(value)}"]
        if doc["dtype"] == "torch.bfloat16":
            return torch.from_numpy(arr.copy()).view(torch.bfloat16)
        return torch.from_numpy(arr.copy())
    if tag == "__enum":
        return _lookup(value)[doc["name"]]
    if tag == "__class":
        return _lookup(value)
    if tag == "__object":
        cls = _lookup(value)
        state = decode(doc["state"], arrays)
        frozen = dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
        if frozen and getattr(cls, "__setstate__", None) is None:
            return _restore_dataclass(cls, state)
        obj = cls.__new__(cls)
        if "items" in doc:  # a dict subclass (a read-only one too: dict's own update)
            if not isinstance(obj, dict):
                raise UnsafeStateError(f"{value}: items for a class that is not a dict")
            dict.update(obj, ((decode(k, arrays), decode(v, arrays)) for k, v in doc["items"]))
        if getattr(cls, "__setstate__", None) is not None:
            obj.__setstate__(state)
            return obj
        # object.__getstate__'s forms: the __dict__, or (__dict__ or None, {slot: value})
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state, slots = state
            for key, val in slots.items():
                object.__setattr__(obj, key, val)
        if isinstance(state, dict):
            obj.__dict__.update(state)
        elif state is not None:
            raise UnsafeStateError(f"{value}: cannot restore a state of type {type(state).__name__}")
        return obj
    raise UnsafeStateError(f"unknown tag {tag!r} in the document")


# ----------------------------------------------------------------------------------------- files
def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


#: the environment variable that gives the checkpoint key (a shared cluster's, say); else the file
KEY_ENV = "GRADCODE_CHECKPOINT_KEY"
#: the environment variable that names the key file (default ``~/.gradcode/checkpoint.key``)
KEY_FILE_ENV = "GRADCODE_CHECKPOINT_KEY_FILE"


def key_file() -> Path:
    """Where this user's checkpoint key lives: ``$GRADCODE_CHECKPOINT_KEY_FILE``, else
    ``~/.gradcode/checkpoint.key``."""
    named = os.environ.get(KEY_FILE_ENV)
    return Path(named).expanduser() if named else Path.home() / ".gradcode" / "checkpoint.key"


def checkpoint_key() -> bytes:
    """This user's key for the checkpoints' MACs (module docstring): ``$GRADCODE_CHECKPOINT_KEY``
    (at least 16 characters) when set, else the key file (:func:`key_file`), created on first use
    with 32 random bytes, readable and writable by its owner only. A key file others may read or
    write is refused (they could forge checkpoints): :class:`CheckpointError` saying how to fix it."""
    given = os.environ.get(KEY_ENV)
    if given is not None:
        if len(given) < 16:
            raise CheckpointError(f"${KEY_ENV} must hold at least 16 characters (a checkpoint key); got {len(given)}")
        return given.encode()
    path = key_file()
    if not os.path.lexists(path):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it meanwhile
            pass
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(os.urandom(32).hex())
    try:
        mode = os.stat(path).st_mode
        key = read_regular(path, 4096).strip()
    except (OSError, UnsafeFileError) as exc:
        raise CheckpointError(f"the checkpoint key {path} cannot be read ({exc})") from None
    if mode & 0o077:
        raise CheckpointError(f"the checkpoint key {path} may be read or written by others (mode {mode & 0o777:o}):"
                              f" anyone who can read it can forge checkpoints; chmod 600 {path}")
    if len(key) < 16:
        raise CheckpointError(f"the checkpoint key {path} holds {len(key)} bytes; remove it to make a new one")
    return key


def _mac(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def write_document(path: Path, document: dict) -> None:
    """Write ``document`` as ``path`` (JSON) and its arrays' ``.npz`` beside it (module docstring)."""
    path = Path(path)
    key = checkpoint_key()
    arrays: list = []
    body = encode(document, arrays)
    buf = io.BytesIO()
    np.savez(buf, **{f"a{i}": a for i, a in enumerate(arrays)})
    blob = buf.getvalue()
    blob_digest = _digest(blob)
    blob_name = f"{path.stem}-{blob_digest[:16]}.npz"
    atomic_write(path.with_name(blob_name), blob)
    content = json.dumps({"format": _FORMAT, "arrays": blob_name, "arrays_sha256": blob_digest,
                          "arrays_mac": _mac(key, blob), "body": body}, sort_keys=True, allow_nan=False)
    atomic_write(path, json.dumps({"sha256": _digest(content.encode()), "mac": _mac(key, content.encode()),
                                   "content": content}).encode())
    for stale in path.parent.glob(f"{path.stem}-*.npz"):  # the previous arrays, or a crashed write's
        if stale.name != blob_name:
            stale.unlink(missing_ok=True)


#: largest checkpoint document (its JSON) read back: its arrays are in their own file
DOCUMENT_BYTES = 256 * 2**20


def read_document(path: Path, *, trust: bool = False) -> dict:
    """The document written by :func:`write_document`, after checking both digests and, unless
    ``trust``, both MACs under this user's key (module docstring); a mismatch or anything
    unreadable is a :class:`CheckpointError` naming the file."""
    path = Path(path)
    advice = "restore it from a copy, or start the run again without --resume"
    key = None if trust else checkpoint_key()
    try:
        outer = json.loads(read_regular(path, DOCUMENT_BYTES))
        content = outer["content"]
        ok = _digest(content.encode()) == outer["sha256"]
    except Exception as exc:
        raise CheckpointError(f"resume: the checkpoint {path} is damaged ({type(exc).__name__}: {exc}); {advice}") from None
    if not ok:
        raise CheckpointError(f"resume: the checkpoint {path} is damaged: its content does not match its SHA-256;"
                              f" {advice}")
    try:
        inner = json.loads(content)
        ok = inner.get("format") == _FORMAT and re.fullmatch(rf"{re.escape(path.stem)}-[0-9a-f]{{16}}\.npz",
                                                               str(inner["arrays"]))
    except Exception:
        ok = False
    if not ok:
        raise CheckpointError(f"resume: {path} is not a gradcode checkpoint; {advice}")
    blob_path = path.with_name(inner["arrays"])
    try:
        blob = read_regular(blob_path)
    except (OSError, UnsafeFileError) as exc:
        raise CheckpointError(f"resume: the checkpoint's arrays {blob_path} cannot be read ({exc}); {advice}") from None
    if _digest(blob) != inner["arrays_sha256"]:
        raise CheckpointError(f"resume: the checkpoint's arrays {blob_path} are damaged: they do not match the"
                              f" SHA-256 recorded in {path.name}; {advice}")
    if key is not None and not (
            hmac.compare_digest(str(outer.get("mac", "")), _mac(key, content.encode()))
            and hmac.compare_digest(str(inner.get("arrays_mac", "")), _mac(key, blob))):
        raise CheckpointError(
            f"resume: the checkpoint {path} was not written with this user's checkpoint key ({key_file()} or"
            f" ${KEY_ENV}): another user or key wrote it, a gradcode before keyed checkpoints did, or its files"
            " were edited. Resume it only if you know where it came from, deliberately:"
            " RunConfig(trust_checkpoint=True), --trust-checkpoint")
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as z:  # written stored, never compressed: no zip bombs
            if any(i.compress_type != zipfile.ZIP_STORED or i.file_size > len(blob) for i in z.infolist()):
                raise ValueError("an array entry is compressed or larger than the file")
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            arrays = {k: _plain_array(k, z[k]) for k in z.files}
        return decode(inner["body"], arrays)
    except Exception as exc:  # a document that passed its digests but is not ours to read
        raise CheckpointError(f"resume: {path}: cannot be restored ({type(exc).__name__}: {exc}); {advice}") from None
