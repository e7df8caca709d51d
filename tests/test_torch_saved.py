"""A torch run's files for other torch code: ``model.pt`` (the module's ``state_dict``) and
``optimizer.pt`` beside the records, loadable by plain torch with ``weights_only=True``;
:func:`gradcode.torch.load_run`; the run's JSON naming the files instead of embedding the
parameters."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import gradcode.torch as gt  # noqa: E402
from gradcode.errors import StopTraining, UnsafeFileError  # noqa: E402
from gradcode.runtime import ClusterConfig, RunConfig, TrainSpec  # noqa: E402
from gradcode.torch.saved import ModelMismatchError, RunFilesError  # noqa: E402
from torch_util import LNBNNet  # noqa: E402


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(3)
    X = torch.randn(240, 64, generator=g)
    return X, (X[:, :10].argmax(1) + (X[:, 10] > 1).long()) % 10


def run(data, tmp_path, name="run", *, rounds=4, models=1, cluster=None, callback=None, **tconf):
    torch.manual_seed(0)
    setup = gt.TorchConfig(**{"optimizer": "adam", "optimizer_params": {"lr": 1e-2}, "batch_size": 60, **tconf})
    return gt.fit(LNBNNet, data, TrainSpec("crc", workers=4, stragglers=1, delay=0.1, models=models),
                  torch_config=setup, run=RunConfig(rounds=rounds, eval_every=0, run_dir=tmp_path / name),
                  cluster=cluster, engine="inprocess", callback=callback)


def same_state(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_model_and_optimizer_files_load_into_plain_torch(data, tmp_path):
    """What the README shows: a fresh module of the run's class loads ``model.pt`` with torch
    alone and predicts as the trained one; Adam built on it loads ``optimizer.pt`` and steps on
    from the run's moments; the scheduler's state is ``scheduler.pt``."""
    res = run(data, tmp_path, scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5))
    folder = Path(res.run_dir)
    net = LNBNNet()
    net.load_state_dict(torch.load(folder / "model.pt", weights_only=True))
    assert same_state(net.state_dict(), res.model.state_dict())
    assert int(net.bn.num_batches_tracked) == 4  # the batch counters too, not only the float vector
    net.eval(), res.model.eval()
    assert torch.equal(net(data[0][:20]), res.model(data[0][:20]))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    opt.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=True))
    assert float(opt.state[opt.param_groups[0]["params"][0]]["step"]) == 4
    assert torch.load(folder / "scheduler.pt", weights_only=True)["last_epoch"] == 4
    assert res.result.files == {kind: str(folder / f"{kind}.{ext}") for kind, ext in (
        ("model", "pt"), ("optimizer", "pt"), ("scheduler", "pt"), ("params", "npy"))}


def test_load_run_fills_a_module_and_refuses_one_that_does_not_fit(data, tmp_path):
    res = run(data, tmp_path)
    saved = gt.load_run(res.run_dir)
    assert saved.model is None and saved.models == 1 and saved.index == 0 and saved.scheduler_state is None
    assert same_state(saved.state_dict, res.model.state_dict())
    net = LNBNNet()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    loaded = gt.load_run(res.run_dir, net, optimizer=opt)
    assert loaded.model is net and same_state(net.state_dict(), res.model.state_dict())
    assert float(opt.state[net.fc1.weight]["step"]) == 4
    other = LNBNNet(hidden=12)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(ModelMismatchError, match=r"shapes that differ: fc1\.weight saved \(24, 64\), module \(12,"):
        gt.load_run(res.run_dir, other)
    assert same_state(other.state_dict(), before)  # left as it was
    with pytest.raises(ModelMismatchError, match=r"keys the file has and the module lacks: .*bn\.running_mean"):
        gt.load_run(res.run_dir, nn.Sequential())
    with pytest.raises(RunFilesError, match="trained 1 model"):
        gt.load_run(res.run_dir, index=1)
    with pytest.raises(RunFilesError, match="no model.pt in .*params.npy"):
        gt.load_run(tmp_path)


def test_load_run_reads_data_only(data, tmp_path):
    """A model.pt that is a pickle naming a function is refused, and the function never runs; a
    model.pt that is not a regular file is refused before it is read."""
    folder = tmp_path / "forged"
    folder.mkdir()
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (folder / "model.pt").write_bytes(pickle.dumps({"w": Payload()}, protocol=2))
    with pytest.raises(RunFilesError, match="weights_only=True"):
        gt.load_run(folder)
    assert not marker.exists()
    (folder / "model.pt").unlink()
    os.mkfifo(folder / "model.pt")
    with pytest.raises(UnsafeFileError, match="model.pt"):
        gt.load_run(folder)


def test_json_names_the_files_instead_of_the_parameters(data, tmp_path):
    res = run(data, tmp_path, rounds=2)
    doc = res.result.to_json()
    assert "final_params" not in doc and doc["files"]["model"].endswith("model.pt")
    x = np.load(doc["files"]["params"])
    assert x.shape == (1, res.result.final_params.size) and np.array_equal(x[0], res.result.final_params)
    assert len(json.dumps(doc)) < 10_000  # 1,900 parameters: the vector alone was 40 KB of JSON
    assert np.array_equal(res.result.to_json(params=True)["final_params"], res.result.final_params)
    on_disk = json.loads((Path(res.run_dir) / "result.json").read_text())
    assert on_disk["files"] == doc["files"] and "final_params" not in on_disk


def test_several_models_each_their_files(data, tmp_path):
    res = run(data, tmp_path, models=2)
    folder = Path(res.run_dir)
    assert res.result.files["model"] == [str(folder / "model-0.pt"), str(folder / "model-1.pt")]
    for m in range(2):
        saved = gt.load_run(folder, LNBNNet(), index=m)
        assert saved.models == 2 and same_state(saved.state_dict, res.models[m].state_dict())
    assert not (folder / "model.pt").exists()
    assert not torch.equal(gt.load_run(folder, index=0).state_dict["fc1.weight"],
                           gt.load_run(folder, index=1).state_dict["fc1.weight"])


def test_a_stopped_run_and_the_collective_path_write_them_too(data, tmp_path):
    """A run stopped by its callback keeps the weights it reached; on the collective path, where
    the workers' replicas step the model, the files hold the replica's weights and moments."""
    def stop(record):
        if record["round"] == 1:
            raise StopTraining

    stopped = run(data, tmp_path, "stopped", callback=stop)
    assert len(stopped.history) == 2
    assert same_state(gt.load_run(stopped.run_dir).state_dict, stopped.model.state_dict())

    def fail(record):
        if record["round"] == 1:
            raise RuntimeError("the callback failed")

    with pytest.raises(RuntimeError, match="the callback failed") as caught:
        run(data, tmp_path, "failed", callback=fail)
    assert caught.value.result.files["model"] == str(tmp_path / "failed" / "model.pt")
    saved = gt.load_run(tmp_path / "failed")
    assert float(saved.optimizer_state["state"][0]["step"]) == 2

    star = run(data, tmp_path, "star")
    collective = run(data, tmp_path, "collective", cluster=ClusterConfig(transport="collective"))
    a, b = gt.load_run(star.run_dir), gt.load_run(collective.run_dir)
    assert list(a.state_dict) == list(b.state_dict)
    for key in a.state_dict:
        assert torch.allclose(a.state_dict[key].float(), b.state_dict[key].float(), rtol=1e-4, atol=1e-5), key
    assert float(b.optimizer_state["state"][0]["step"]) == 4
