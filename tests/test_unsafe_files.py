"""Files that are not files: every reader of a run's files (checkpoints and their arrays, traces,
data files) refuses a FIFO, a device (a symbolic link to ``/dev/zero``) and an oversized file by
name, within a second, before reading it; a symbolic link loop given as data is named as one."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

import gradcode
from gradcode import _validation
from gradcode.errors import GradcodeError
from gradcode.problems.files import data_source, read_csv, read_npz, read_svmlight
from gradcode.runtime import safe_state
from gradcode.runtime.safe_state import CheckpointError, read_document, write_document


def _checkpoint(folder: Path) -> Path:
    path = folder / "checkpoint.json"
    write_document(path, {"x": np.arange(4.0)})
    return path


def _arrays_of(path: Path) -> Path:
    return next(p for p in path.parent.iterdir() if p.suffix == ".npz")


# (what, the file to spoil, how it is read, the error expected): the file a reader opens
READERS = {
    "checkpoint document": (lambda d: _checkpoint(d), lambda p: read_document(p), CheckpointError),
    "checkpoint arrays": (lambda d: _arrays_of(_checkpoint(d)), lambda p: read_document(p.parent / "checkpoint.json"),
                          CheckpointError),
    "trace .npy": (lambda d: d / "t.npy", lambda p: gradcode.load_trace(p), gradcode.TraceError),
    "trace .csv": (lambda d: d / "t.csv", lambda p: gradcode.load_trace(p), gradcode.TraceError),
    "data .csv": (lambda d: d / "d.csv", lambda p: read_csv(str(p), "y"), ValueError),
    "data .npz": (lambda d: d / "d.npz", lambda p: read_npz(str(p)), ValueError),
    "data .svm": (lambda d: d / "d.svm", lambda p: read_svmlight(str(p)), ValueError),
}


def _within_a_second(fn) -> BaseException | None:
    """``fn()``'s exception, or a failure when it did not return within a second (a read that
    blocks on a FIFO or streams a device would hang here)."""
    out: list = []

    def call():
        try:
            fn()
            out.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)

    th = threading.Thread(target=call, daemon=True)
    th.start()
    th.join(1.0)
    assert out, "the reader did not return within a second"
    return out[0]


def _spoil(path: Path, kind: str) -> str:
    if path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
        return "not a regular file"
    if kind == "device":
        os.symlink("/dev/zero", path)
        return "not a regular file"
    path.write_bytes(b"0" * 4096)  # "oversized": the limit is made smaller than this below
    return "more than the"


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"), reason="POSIX only")
@pytest.mark.parametrize("kind", ["fifo", "device", "oversized"])
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_file_that_is_not_a_regular_file_of_bounded_size_is_refused_by_name(reader, kind, tmp_path, monkeypatch):
    where, read, error = READERS[reader]
    path = where(tmp_path)
    said = _spoil(path, kind)
    if kind == "oversized":
        monkeypatch.setattr(_validation, "memory_bytes", lambda: 2048.0)  # files read here: at most 1 KiB
        monkeypatch.setattr(safe_state, "DOCUMENT_BYTES", 1024)  # a checkpoint's JSON has a limit of its own
    exc = _within_a_second(lambda: read(path))
    assert isinstance(exc, error), exc
    assert isinstance(exc, GradcodeError) and said in str(exc) and path.name in str(exc)


def test_a_symbolic_link_loop_given_as_data_is_named_as_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.symlink("loop1", "loop1")
    with pytest.raises(ValueError, match="'loop1': a symbolic link loop"):
        data_source("loop1")
    assert data_source("tandon-synthetic") == ("tandon-synthetic", {})  # a name that is not there: a dataset


def test_read_regular_reads_a_regular_file_whole(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc" * 1000)
    assert _validation.read_regular(path) == b"abc" * 1000


def test_non_finite_data_is_refused_before_the_first_round_naming_its_rows():
    """NaN in the data used to surface at the round whose batch first read it (round 7); every
    data source is checked as it is built: a Dataset (generated, CSV, .npz, svmlight, dense or
    sparse) and a torch model's (X, y)."""
    import scipy.sparse as sp

    from gradcode.problems.data import Dataset

    X, y = np.ones((6, 3)), np.zeros(6)
    X[2, 1], y[4] = np.nan, np.inf
    with pytest.raises(ValueError, match=r"train split of 'd' holds NaN or infinity in 2 row\(s\) \(2, 4,"):
        Dataset("d", "binary", X, y, np.ones((2, 3)), np.zeros(2))
    Xs = sp.csr_matrix(np.eye(4))
    Xs.data[3] = -np.inf
    with pytest.raises(ValueError, match=r"test split of 's' holds NaN or infinity in 1 row\(s\) \(3,"):
        Dataset("s", "binary", sp.csr_matrix(np.eye(4)), np.zeros(4), Xs, np.zeros(4))
    torch = pytest.importorskip("torch")
    from gradcode.torch.problem import as_samples

    Xt = torch.ones(8, 2, 2)
    Xt[5, 1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"data holds NaN or infinity in 1 sample\(s\) \(rows 5,"):
        as_samples((Xt, torch.zeros(8, dtype=torch.long)), "data")
