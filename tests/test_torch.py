"""gradcode.torch.fit: a user's own nn.Module trained with gradient codes.

The references are single-process torch computations on the same samples: the decoded gradient is
the batch's gradient (per partition for BatchNorm: ghost batches, see gradcode.torch.problem), and
a coded run with stragglers reaches the weights of an uncoded run up to float32 rounding."""

from __future__ import annotations

import gzip
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import gradcode.torch as gt  # noqa: E402
from gradcode.errors import GradcodeError  # noqa: E402
from gradcode.runtime import RoundTimeoutError  # noqa: E402
from gradcode.torch.data import DataFileError  # noqa: E402
from torch_util import LNBNNet, NaNOnMarker, Unpicklable  # noqa: E402


@pytest.fixture(scope="module")
def digits():
    (X, y), test = gt.digits()
    return (X[:600], y[:600]), (test[0][:200], test[1][:200])


def flat(module) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(module.parameters()).detach()


def fit(model, data, *, engine="inprocess", callback=None, **kw):
    """gradcode.torch.fit with its options flat, split among its config objects
    (:func:`config_util.split_options`; held-out metrics after the last round, as fit's default)."""
    from config_util import split_options

    from gradcode.runtime import ClusterConfig, FaultConfig, RunConfig, TrainSpec

    kw.setdefault("workers", 6)
    kw.setdefault("batch_size", 60)
    kw.setdefault("eval_every", 0)
    configs = split_options(kw, {"torch_config": gt.TorchConfig, "spec": TrainSpec, "run": RunConfig,
                                 "faults": FaultConfig, "cluster": ClusterConfig})
    return gt.fit(model, data, **configs, engine=engine, callback=callback)


# ------------------------------------------------------------------------ exactness


def test_decoded_step_is_the_batch_gradient(digits):
    """One SGD step with lr 1: the change of the weights is minus the mean gradient of the batch,
    computed in one process over the same samples, partition by partition (BatchNorm normalises
    over each partition's samples)."""
    torch.manual_seed(0)
    net = LNBNNet(dropout=0.3)
    res = fit(net, digits[0], scheme="crc", stragglers=2, delay=0.5, optimizer="sgd", optimizer_params={"lr": 1.0},
              rounds=1)
    spec, (X, y) = res.spec, digits[0]
    ref = LNBNNet(dropout=0.3)
    ref.load_state_dict(net.state_dict())
    ref.train()
    total = None
    from gradcode.torch.problem import _seed

    for j in range(spec.sizes.size):
        idx = torch.from_numpy(spec.batch_indices(0, j))
        torch.manual_seed(_seed(spec.seed, 2, 0, j))
        loss = nn.functional.cross_entropy(ref(X[idx]), y[idx]) * idx.numel()
        grads = torch.autograd.grad(loss, list(ref.parameters()))
        g = torch.cat([t.reshape(-1) for t in grads])
        total = g if total is None else total + g
    step = flat(net) - flat(res.model)
    expected = total / spec.samples_per_job
    assert spec.samples_per_job == 60
    assert torch.allclose(step, expected, rtol=1e-4, atol=1e-6)
    assert res.history[0]["stragglers"] == 2


@pytest.mark.parametrize("code, kw, batch", [("crc", {"stragglers": 1, "workers": 4}, 130),
                                              ("frc", {"stragglers": 1, "workers": 6}, 100),
                                              ("uncoded", {"workers": 7}, 64)])
def test_the_decoded_batch_is_the_one_asked_for(digits, code, kw, batch):
    """A batch that does not split evenly over the code's partitions is apportioned by largest
    remainders (it was rounded per partition: 130 -> 128, 100 -> 102, 64 -> 63), and one smaller
    than the partitions is refused instead of silently grown (2 -> 4)."""
    res = fit(LNBNNet(), digits[0], scheme=code, rounds=1, batch_size=batch, engine="inprocess", **kw)
    assert res.spec.samples_per_job == batch
    assert sum(res.spec.batch_indices(0, j).size for j in range(res.spec.sizes.size)) == batch
    assert res.spec.per_job.max() - res.spec.per_job.min() <= 1
    with pytest.raises(ValueError, match="batch_size=2 is smaller than the code's 4 partitions"):
        fit(LNBNNet(), digits[0], scheme="crc", stragglers=1, workers=4, rounds=1, batch_size=2, engine="inprocess")


def test_batches_cover_each_partition_once_per_epoch(digits):
    spec = fit(LNBNNet(), digits[0], scheme="uncoded", rounds=1).spec
    steps = int(spec.shards[0] // spec.per_job[0])
    seen = np.concatenate([spec.batch_indices(job, 0) for job in range(steps)])
    assert np.unique(seen).size == seen.size == steps * spec.per_job[0]
    assert set(seen) <= set(spec.partition_samples(0))


@pytest.mark.parametrize("engine", ["inprocess", pytest.param("ray", marks=pytest.mark.ray)])
def test_crc_with_stragglers_reaches_the_uncoded_weights(digits, engine, request):
    """A realistic model and run: LayerNorm first, BatchNorm inside, Adam, mini-batches, stragglers
    injected; the same weights and buffers as uncoded up to float32 rounding."""
    if engine == "ray":
        request.getfixturevalue("ray_session")
    torch.manual_seed(1)
    net = LNBNNet()
    kw = dict(optimizer=torch.optim.Adam, optimizer_params={"lr": 1e-2}, rounds=8 if engine == "ray" else 20,
              engine=engine, eval_data=digits[1])
    delays = dict(stragglers=2, delay=0.05 if engine == "ray" else 1.0)  # the same injected delays
    coded = fit(net, digits[0], scheme="crc", **delays, **kw)
    plain = fit(net, digits[0], scheme="uncoded", **delays, **kw)
    assert type(coded.model) is LNBNNet
    assert torch.allclose(flat(coded.model), flat(plain.model), rtol=1e-4, atol=1e-5)
    assert torch.allclose(coded.model.bn.running_mean, plain.model.bn.running_mean, rtol=1e-4, atol=1e-5)
    assert int(coded.model.bn.num_batches_tracked) == kw["rounds"]
    assert coded.history[-1]["loss"] == pytest.approx(plain.history[-1]["loss"], rel=1e-4)
    assert coded.losses[-1] < coded.losses[0]
    assert "accuracy" in coded.history[-1]["metrics"][0]
    if engine == "inprocess":  # the coded rounds never waited for the injected stragglers
        assert coded.history[-1]["elapsed"] < kw["rounds"] * 1.0 < plain.history[-1]["elapsed"]
        assert sum(h["stragglers"] for h in coded.history) == 2 * kw["rounds"]


def test_the_users_module_keeps_its_own_initialisation(digits):
    net = LNBNNet()
    with torch.no_grad():
        net.fc2.weight.fill_(0.0)
    res = fit(net, digits[0], scheme="uncoded", optimizer="sgd", optimizer_params={"lr": 0.0}, rounds=1)
    assert torch.equal(res.model.fc2.weight, net.fc2.weight)
    assert res.model is not net


def test_fit_draws_a_progress_bar_on_a_terminal_or_when_asked_and_records_the_batch_size(digits, capsys,
                                                                                       monkeypatch):
    """fit showed no progress (only the command line drew a bar) and its history did not say the
    batch size. Now the command line's bar goes to stderr when it is a terminal, or when
    TorchConfig.progress says so (False: never); each record holds batch_size."""
    import sys

    def bar_of(**kw):
        res = fit(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)), digits[0], rounds=3, workers=4, stragglers=1,
                  **kw)
        return res, capsys.readouterr().err

    res, err = bar_of(progress=True)
    assert "training" in err and "3/3 rounds" in err and "loss" in err
    assert [h["batch_size"] for h in res.history] == [60, 60, 60]
    assert bar_of()[1] == ""  # stderr is no terminal here
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert "3/3 rounds" in bar_of()[1]
    assert bar_of(progress=False)[1] == ""
    with pytest.raises(TypeError, match="progress must be True, False or None"):
        gt.TorchConfig(progress="yes")
    with pytest.raises(ValueError, match="progress belong to your loop"):
        gt.Workers(nn.Linear(64, 10), digits[0], torch_config=gt.TorchConfig(progress=True))


def test_loss_reduction_sum_is_the_same_training(digits):
    torch.manual_seed(2)
    net = LNBNNet()
    mean = fit(net, digits[0], scheme="frc", stragglers=1, rounds=5)
    summed = fit(net, digits[0], scheme="frc", stragglers=1, rounds=5, loss_reduction="sum",
                 loss=lambda out, y: nn.functional.cross_entropy(out, y, reduction="sum"))
    assert torch.allclose(flat(mean.model), flat(summed.model), rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------ every scheme


@pytest.mark.parametrize("code,params,models", [
    ("frc", {}, 1),
    ("agc", {"d": 3, "L": 6, "wire": "float64"}, 1),
    ("partial", {"alpha": 2}, 1),
    ("commfr", {"k": 3, "N": 2, "K": 1, "construction": "mds-gaussian"}, 1),
    ("gc-dc", {"clusters": 2, "r": 2}, 1),
    ("sr-sgc", {"B": 1, "W": 2, "lam": 1}, 3),
    ("m-sgc", {"B": 1, "W": 2, "lam": 1}, 3),
])
def test_every_scheme_trains_a_torch_model_exactly(digits, code, params, models):
    """Multi-message codes, GC-DC and the sequential codes (pipelined models) train through the same
    scheme objects; every exact scheme reaches the uncoded weights of the same jobs."""
    torch.manual_seed(3)
    net = LNBNNet()
    params = dict(params)
    kw = dict(optimizer="sgd", optimizer_params={"lr": 0.1}, rounds=6 * models, models=models)
    res = fit(net, digits[0], scheme=code, scheme_params=params, stragglers=1, delay=1.0,
              wire_dtype=params.pop("wire", "float32"), **kw)
    assert len(res.models) == models and all(np.isfinite(h["loss"] if models == 1 else h["loss"][0])
                                             for h in res.history[-models:])
    if models == 1:
        ref = fit(net, digits[0], scheme="uncoded", workers=res.spec.sizes.size if code != "commfr" else 3, **kw)
        if np.allclose(res.spec.sizes, ref.spec.sizes):  # the same partitions, hence the same batches
            # codes with amplifying coefficients decode float32 messages within float32's accepted
            # bound (rtol 1e-3 of the gradient a round); repetition codes add partials as they are
            tol = 1e-6 if code in ("frc", "gc-dc", "agc") else 2e-3
            assert torch.allclose(flat(res.model), flat(ref.model), rtol=1e-4, atol=tol)


# ------------------------------------------------------------------------ precision


@pytest.mark.parametrize("wire", ["float16", "bfloat16", "float64"])
def test_16_bit_messages_train_close_to_float32(digits, wire):
    torch.manual_seed(4)
    net = LNBNNet()
    kw = dict(scheme="crc", workers=4, stragglers=1, delay=1.0, optimizer="sgd", optimizer_params={"lr": 0.2},
              rounds=6)
    f32 = fit(net, digits[0], **kw)
    low = fit(net, digits[0], wire_dtype=wire, **kw)
    tol = {"float16": 1e-2, "bfloat16": 5e-2, "float64": 1e-5}[wire]
    assert torch.allclose(flat(low.model), flat(f32.model), rtol=tol, atol=tol)
    assert low.result.config["data"]["wire_dtype"] == wire


@pytest.mark.parametrize("cast", ["bfloat16", "float16"])
def test_autocast_runs_the_workers_forward_in_16_bits_close_to_float32(digits, cast):
    """TorchConfig(autocast=...) reaches the workers: the forward pass runs in the 16-bit type (the
    weights differ from float32's by its rounding, not more), and the run's config records it."""
    torch.manual_seed(4)
    net = LNBNNet()
    kw = dict(scheme="crc", workers=4, stragglers=1, optimizer="sgd", optimizer_params={"lr": 0.2}, rounds=6)
    f32 = fit(net, digits[0], **kw)
    low = fit(net, digits[0], autocast=cast, **kw)
    assert not torch.equal(flat(low.model), flat(f32.model))  # it did run in 16 bits
    drift = float((flat(low.model) - flat(f32.model)).norm() / flat(f32.model).norm())
    assert drift < 5e-2, drift  # a few rounds of 16-bit forward passes: percent-level drift, no divergence
    assert low.result.config["data"]["autocast"] == cast and "autocast" not in f32.result.config["data"]
    with pytest.raises(ValueError, match="autocast"):
        gt.TorchConfig(autocast="float8")


def test_float16_loss_scaling_overflows_are_run_again_at_a_smaller_scale(digits, monkeypatch):
    """float16 autocast scales each worker's loss as GradScaler does: started far too high, every
    backward pass overflows, is run again at half the scale from the same buffers and seed, and the
    run trains exactly as one started at a scale that never overflows; the scale grows back after
    clean passes (GROWTH_INTERVAL)."""
    from gradcode.torch.problem import TorchWorkerProblem

    torch.manual_seed(5)
    net = LNBNNet()
    kw = dict(scheme="frc", workers=4, stragglers=1, optimizer="sgd", optimizer_params={"lr": 0.2}, rounds=5,
              autocast="float16")
    monkeypatch.setattr(TorchWorkerProblem, "INITIAL_SCALE", 2.0**8)
    calm = fit(net, digits[0], **kw)
    seen = []
    real = TorchWorkerProblem._scaled

    def counting(self, *, clean):
        seen.append(clean)
        return real(self, clean=clean)

    monkeypatch.setattr(TorchWorkerProblem, "_scaled", counting)
    monkeypatch.setattr(TorchWorkerProblem, "INITIAL_SCALE", 2.0**40)
    monkeypatch.setattr(TorchWorkerProblem, "GROWTH_INTERVAL", 3)
    history = []
    wild = fit(net, digits[0], callback=history.append, **kw)
    assert seen.count(False) >= 4 and seen.count(True) >= 4  # overflows halved it; clean passes counted
    assert torch.allclose(flat(wild.model), flat(calm.model), rtol=1e-6, atol=1e-7)
    res = wild.result  # recorded by round, in the records and the history
    assert 0 < res.total_overflows <= seen.count(False) and res.overflows[0] > 0
    assert [r["overflows"] for r in history] == res.overflows.tolist()
    assert res.to_json()["total_overflows"] == res.total_overflows and calm.result.total_overflows == 0


def test_float16_overflows_are_recorded_for_the_messages_received(digits, monkeypatch, tmp_path):
    """Each round records the overflowed backward passes behind the messages it received (every
    worker's, uncoded), not the clock's timed gradients (which leave the scale as it was), in
    ``TrainResult.overflows``, ``rounds.jsonl`` and the history records."""
    from gradcode.runtime.worker import WorkerCore
    from gradcode.torch.problem import TorchWorkerProblem

    monkeypatch.setattr(TorchWorkerProblem, "INITIAL_SCALE", 2.0**40)
    timing, per_round = [False], []
    real_time, real_gradient = WorkerCore.time_gradients, TorchWorkerProblem.gradient

    def timed(self, *args, **kwargs):
        timing[0] = True
        try:
            return real_time(self, *args, **kwargs)
        finally:
            timing[0] = False

    def gradient(self, x, batch):
        before = self.overflows
        out = real_gradient(self, x, batch)
        if not timing[0]:
            per_round.append(self.overflows - before)
        return out

    monkeypatch.setattr(WorkerCore, "time_gradients", timed)
    monkeypatch.setattr(TorchWorkerProblem, "gradient", gradient)
    torch.manual_seed(5)
    history = []
    res = fit(LNBNNet(), digits[0], scheme="uncoded", workers=4, optimizer="sgd", optimizer_params={"lr": 0.2},
              rounds=3, autocast="float16", callback=history.append, run_dir=tmp_path).result
    assert len(per_round) == 12 and sum(per_round[:4]) > 0  # four partial gradients a round
    assert res.overflows.tolist() == [sum(per_round[4 * t:4 * t + 4]) for t in range(3)]
    assert [r["overflows"] for r in history] == res.overflows.tolist()
    lines = [json.loads(line) for line in (Path(res.run_dir) / "rounds.jsonl").read_text().splitlines()]
    assert [line["overflows"] for line in lines] == res.overflows.tolist()


def test_agc_in_float32_is_refused_unless_its_bound_is_accepted(digits):
    """AGC's coefficients (L = 16) amplify float32 rounding past 1e-3 in the worst case: refused by
    default, trained when the user accepts the looser bound (and then close to float64). (With
    L = 6 and one straggler, the weighted E·M decode of every message now stays within float32's
    bound, so this takes a larger L.)"""
    kw = dict(scheme="agc", scheme_params={"d": 3, "L": 16}, stragglers=1, delay=1.0, optimizer="sgd",
              optimizer_params={"lr": 0.1}, rounds=3)
    with pytest.raises(GradcodeError, match="float64"):
        fit(LNBNNet(), digits[0], **kw)
    torch.manual_seed(5)
    net = LNBNNet()
    loose = fit(net, digits[0], decode_rtol=0.5, **kw)
    exact = fit(net, digits[0], wire_dtype="float64", **kw)
    # the worst-case bound is not far from the real error here: weights off by up to ~3e-3 relative
    assert float((flat(loose.model) - flat(exact.model)).norm()) < 1e-2 * float(flat(exact.model).norm())


def test_an_imprecise_code_for_the_wire_type_is_refused_with_a_safer_choice(digits):
    """AGC's coefficients grow with L: its float16 messages are scaled into range by their workers
    (none overflows, none is blamed), but the decoding coefficients amplify float16's rounding past
    any tolerance, so no round decodes; the run says why and which types or codes would do,
    instead of training on a wrong gradient."""
    from gradcode.runtime import ImpreciseWaitWarning

    with pytest.raises(GradcodeError, match="float32 or float64") as info, \
            pytest.warns(ImpreciseWaitWarning, match="round 0 waits for more workers.*float16"):
        fit(LNBNNet(), digits[0], scheme="agc", scheme_params={"d": 3, "L": 16}, stragglers=1, delay=1.0,
            wire_dtype="float16", rounds=2)
    assert "not accurate enough" in str(info.value) and "65504" not in str(info.value)


# ------------------------------------------------------------------------ bad input


def test_bad_inputs_are_named(digits):
    X, y = digits[0]
    with pytest.raises(GradcodeError, match="model: the forward pass on .*: RuntimeError: mat1 and mat2"):
        fit(nn.Linear(3, 2), digits[0], rounds=1)
    with pytest.raises(GradcodeError, match="loss must return a scalar"):
        fit(LNBNNet(), digits[0], rounds=1, loss=lambda out, t: nn.functional.cross_entropy(out, t, reduction="none"))
    with pytest.raises(GradcodeError, match="targets' dtype"):
        fit(LNBNNet(), (X, y.float()), rounds=1, loss=nn.functional.cross_entropy)
    with pytest.raises(ValueError, match="fewer than one batch"):
        fit(LNBNNet(), (X[:10], y[:10]), rounds=1, batch_size=60)
    with pytest.raises(ValueError, match="same number|as many targets"):
        fit(LNBNNet(), (X, y[:5]), rounds=1)
    with pytest.raises(TypeError, match="model must be"):
        fit("resnet", digits[0], rounds=1)
    with pytest.raises(ValueError, match="wire_dtype"):
        fit(LNBNNet(), digits[0], rounds=1, wire_dtype="int8")
    with pytest.raises(TypeError, match="IterableDataset"):
        class Stream(torch.utils.data.IterableDataset):
            def __iter__(self):
                yield from ()
        fit(LNBNNet(), Stream(), rounds=1)


def test_an_unpicklable_model_is_named(digits):
    with pytest.raises((GradcodeError, TypeError), match="model"):
        fit(Unpicklable(), digits[0], rounds=1, engine="ray")


def test_a_nan_loss_makes_its_workers_stragglers(digits):
    """A NaN loss on one partition's samples: every worker holding it is a straggler of the round;
    with FRC (each partition on s + 1 workers, all of them poisoned) the round cannot decode and the
    run stops as soon as every worker has answered (not at the round timeout), naming the workers
    whose results were not finite; nothing is applied."""
    from gradcode.runtime import TrainingStopped

    X, y = digits[0]
    X = X.clone()
    X[0, 0, 0, 0] = -7.0  # the model's output for this sample is NaN (finite data: the data check passes)
    with pytest.raises(TrainingStopped, match=r"the results of workers \[\d, \d\] of 6 held NaN") as info:
        fit(NaNOnMarker(nn.Sequential(nn.Flatten(), nn.Linear(64, 10))), (X, y), scheme="frc", stragglers=1,
            batch_size=None, rounds=1, round_timeout=1000)
    assert not isinstance(info.value, RoundTimeoutError)


# ------------------------------------------------------------------------ data files


def _idx(array: np.ndarray) -> bytes:
    head = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, dtype=">i4").tobytes()
    return head + array.astype(np.uint8).tobytes()


def test_read_mnist_idx_files(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (7, 28, 28))
    labels = rng.integers(0, 10, 7)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx(images)))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(_idx(labels))
    X, y = gt.read_mnist(tmp_path)
    assert X.shape == (7, 1, 28, 28) and X.dtype == torch.float32 and y.dtype == torch.int64
    assert torch.allclose(X[3, 0], torch.from_numpy(images[3] / 255.0).float())
    assert y.tolist() == labels.tolist()
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(_idx(labels)[:-2])
    with pytest.raises(DataFileError, match="train-labels-idx1-ubyte"):
        gt.read_mnist(tmp_path)
    with pytest.raises(DataFileError, match="never downloaded"):
        gt.read_mnist(tmp_path, train=False)


def test_read_cifar_batches_and_refuse_code_in_them(tmp_path):
    rng = np.random.default_rng(1)
    for i in range(1, 6):
        doc = {b"data": rng.integers(0, 256, (4, 3072)).astype(np.uint8), b"labels": list(range(4))}
        (tmp_path / f"data_batch_{i}").write_bytes(pickle.dumps(doc))
    X, y = gt.read_cifar(tmp_path)
    assert X.shape == (20, 3, 32, 32) and y.tolist() == list(range(4)) * 5

    class Evil:
        def __reduce__(self):
            import os

            return (os.system, ("echo pwned",))

    (tmp_path / "data_batch_2").write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}))
    with pytest.raises(DataFileError, match="refusing to load"):
        gt.read_cifar(tmp_path)


def test_load_data_names_what_it_takes(tmp_path):
    (train, test) = gt.load_data("digits")
    assert train[0].shape[1:] == (1, 8, 8)
    with pytest.raises(ValueError, match="mnist:DIR"):
        gt.load_data("imagenet")


# ------------------------------------------------------------------------ command line


def test_cli_trains_a_model_file_side_by_side(tmp_path):
    """gradcode train --model FILE.py:NAME: crc with stragglers and uncoded, the same weights."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from gradcode.cli import app

    model_file = Path(__file__).with_name("torch_util.py")
    res = CliRunner().invoke(app, [
        "train", "--model", f"{model_file}:LNBNNet", "--scheme", "crc,uncoded", "--workers", "6", "--stragglers",
        "2", "--delay", "0.5", "--rounds", "6", "--optimizer", "adam", "--optimizer-params", "lr=0.01",
        "--batch-size", "60",
        "--engine", "inprocess", "--run-dir", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    crc, plain = doc["runs"]
    assert crc["config"]["scheme"] == "crc" and crc["config"]["data"]["batch_size"] == 60
    # the JSON names the files holding the weights (params.npy; model.pt, optimizer.pt for torch code)
    assert np.allclose(np.load(crc["files"]["params"]), np.load(plain["files"]["params"]), rtol=1e-4, atol=1e-5)
    assert Path(crc["files"]["model"]) == tmp_path / "crc" / "model.pt" and Path(crc["files"]["optimizer"]).is_file()
    assert doc["rows"][0]["speedup"] > 1


def test_cli_builtin_model_and_refusals(tmp_path):
    import json

    from typer.testing import CliRunner

    from gradcode.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["train", "--model", "cnn", "--rounds", "2", "--engine", "inprocess", "--wire-dtype",
                              "bfloat16", "--run-dir", str(tmp_path / "a"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["config"]["data"]["wire_dtype"] == "bfloat16"
    assert json.loads(res.stdout)["exit_code"] == 0  # a successful run's document says so (it once said nothing)
    # the in-process clock as --compute declares it: seconds per sample, the same times on any machine
    declared = [runner.invoke(app, ["train", "--model", "cnn", "--rounds", "3", "--engine", "inprocess", "--compute",
                                    "2e-4", "--stragglers", "1", "--delay", "0.1", "--inject", "full", "--run-dir",
                                    str(tmp_path / f"d{i}"), "--json"]) for i in range(2)]
    docs = [json.loads(r.stdout) for r in declared]
    assert docs[0]["clock"] == {"clock": "virtual", "compute": "declared", "per_sample": 2e-4, "per_message": 0.0}
    assert docs[0]["round_times"] == docs[1]["round_times"] and docs[0]["config"]["inject"] == "full"
    (tmp_path / "raises.py").write_text("raise RuntimeError('boom')\n")  # a model file that fails to import
    for args, text in ((["--batch-size", "32"], "go with --model"),
                       (["--model", "cnn", "--verify"], "cannot be used with --model"),
                       (["--model", "transformer"], "unknown model"),
                       (["--model", "nowhere.py:Net"], "no such file"),
                       (["--model", str(tmp_path / "raises.py") + ":Net"], "raised RuntimeError: boom"),
                       (["--model", "cnn", "--data", "mnist:" + str(tmp_path)], "never downloaded"),
                       (["--model", "cnn", "--compute", "fast"], "--compute takes calibrated, measured or seconds"),
                       (["--model", "cnn", "--engine", "ray", "--compute", "measured"], "sets the virtual clock"),
                       (["--load-slope", "2"], "go with --model")):
        res = runner.invoke(app, ["train", "--engine", "inprocess", "--rounds", "1", *args]
                            if "--model" in args and "--engine" not in args else ["train", "--rounds", "1", *args])
        assert res.exit_code == 2, (args, res.output)
        assert text in res.output, (args, res.output)


def test_checkpoint_and_resume_reach_the_uninterrupted_weights(digits, tmp_path):
    """Adam's moments, a step LR scheduler and BatchNorm's counters survive a resume: 4 rounds,
    then resumed to 8, equal 8 rounds straight."""
    torch.manual_seed(6)
    net = LNBNNet()
    kw = dict(scheme="crc", stragglers=1, delay=1.0, optimizer="adam", optimizer_params={"lr": 1e-2},
              scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5))
    straight = fit(net, digits[0], rounds=8, **kw)
    fit(net, digits[0], rounds=4, checkpoint_every=2, run_dir=tmp_path, **kw)
    resumed = fit(net, digits[0], rounds=8, checkpoint_every=2, run_dir=tmp_path, resume=True, **kw)
    assert resumed.result.resumed_from == 4 and [h["round"] for h in resumed.history] == list(range(8))
    assert torch.allclose(flat(resumed.model), flat(straight.model), rtol=1e-5, atol=1e-6)
    assert int(resumed.model.bn.num_batches_tracked) == 8
    assert torch.allclose(resumed.model.bn.running_var, straight.model.bn.running_var, rtol=1e-5)


def test_a_resnet_with_batchnorm_trains():
    """The CIFAR ResNet-18 (narrow, for CI) on small random images: BatchNorm everywhere, the
    running statistics move, the loss is finite and the weights equal uncoded's."""
    torch.manual_seed(7)
    X, y = torch.rand(64, 3, 32, 32), torch.randint(0, 10, (64,))
    net = gt.ResNet18(10, width=4)
    kw = dict(workers=4, batch_size=16, rounds=2, optimizer="sgd", optimizer_params={"lr": 0.05, "momentum": 0.9})
    coded = fit(net, (X, y), scheme="crc", stragglers=1, delay=1.0, **kw)
    plain = fit(net, (X, y), scheme="uncoded", **kw)
    assert all(np.isfinite(h["loss"]) for h in coded.history)
    assert not torch.equal(coded.model.stem[1].running_mean, net.stem[1].running_mean)
    assert torch.allclose(flat(coded.model), flat(plain.model), rtol=1e-4, atol=1e-5)


def test_each_pipelined_model_has_its_own_epochs(digits):
    spec = fit(LNBNNet(), digits[0], scheme="uncoded", rounds=1, models=2).spec
    steps = int(spec.shards[0] // spec.per_job[0])
    for model in range(2):
        seen = np.concatenate([spec.batch_indices(model + 2 * step, 0) for step in range(steps)])
        assert np.unique(seen).size == seen.size == steps * spec.per_job[0]


class _Augmented(torch.utils.data.Dataset):
    """A data set with a random transform, as torchvision's RandomCrop."""

    def __init__(self, X, y):
        self.X, self.y = X, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.X[i] + 0.1 * torch.randn_like(self.X[i]), self.y[i]


def test_random_transforms_give_every_copy_of_a_partition_the_same_samples(digits):
    """Every worker holding a partition reads the same augmented samples (whatever its own random
    state), and the augmentation is drawn anew each epoch (it was drawn once for the run)."""
    from gradcode.torch.problem import Batch

    X, y = digits[0]
    res = fit(LNBNNet(), _Augmented(X[:120], y[:120]), scheme="crc", stragglers=2, rounds=1, batch_size=None)
    parts = {0: np.arange(0, 20)}
    a, rows = res.spec.build_partitions(parts)
    torch.randn(100)  # the global generator moved on
    b, _ = res.spec.build_partitions(parts)
    first = Batch(rows[0], 0, 0, 0)
    assert torch.equal(a.read(first)[0], b.read(first)[0])
    later = Batch(rows[0], 1, 0, 1)  # the same samples in the next epoch
    assert not torch.equal(a.read(first)[0], a.read(later)[0])
    assert torch.equal(a.read(first)[1], a.read(later)[1])


def test_unsupported_models_are_refused_up_front(digits):
    with pytest.raises(GradcodeError, match="float32"):
        fit(LNBNNet().double(), digits[0], rounds=1)
    net = LNBNNet()
    net.bn.momentum = None
    with pytest.raises(GradcodeError, match="momentum=None"):
        fit(net, digits[0], rounds=1)


def test_the_callers_code_object_is_not_changed(digits):
    import gradcode

    code = gradcode.make_code("crc", n=4, s=1, seed=0)
    fit(LNBNNet(), digits[0], scheme=code, workers=None, stragglers=1, rounds=1, decode_rtol=0.5)
    assert code.decode_rtol is None


def test_only_user_code_travels_by_value_and_only_during_the_run(digits):
    """A loss from the standard library pickles by reference (registering functools by value broke
    it); the test module's class goes by value while the run lasts, then the registration is undone."""
    import functools

    pytest.importorskip("ray")
    import ray.cloudpickle as cloudpickle
    from ray.cloudpickle import cloudpickle as impl

    import torch_util
    from gradcode.torch.training import _user_code_by_value

    res = fit(LNBNNet(), digits[0], scheme="uncoded", rounds=1,
              loss=functools.partial(nn.functional.cross_entropy, label_smoothing=0.1))
    with _user_code_by_value(res.spec):
        assert torch_util.__name__ in impl._PICKLE_BY_VALUE_MODULES
        assert "functools" not in impl._PICKLE_BY_VALUE_MODULES
        cloudpickle.dumps(res.spec)
    assert torch_util.__name__ not in impl._PICKLE_BY_VALUE_MODULES


# ------------------------------------------------------------------------ scheme="auto" (SGC App. K)


def test_auto_probes_uncoded_then_switches_without_losing_a_job(digits):
    """Uncoded for the probe, then the scheme the paper's search predicts fastest; every job is
    decoded exactly through the switch (CRC keeps the probe's partitions: the weights are
    uncoded's), the rounds after the switch no longer wait for the stragglers, and the report
    says what was chosen and why."""
    torch.manual_seed(8)
    net = LNBNNet()
    kw = dict(optimizer="sgd", optimizer_params={"lr": 0.1}, rounds=14, stragglers=2, delay=1.0)
    auto = fit(net, digits[0], scheme="auto", probe=6, **kw)
    plain = fit(net, digits[0], scheme="uncoded", **kw)
    report = auto.auto
    assert report["probe_rounds"] == 6 and report["jobs"] == 8 and report["chosen"]["family"] == "crc"
    assert report["chosen"]["params"]["s"] >= 2  # tolerates the two injected stragglers
    assert [c["scheme"] for c in report["candidates"]] == ["crc", "uncoded"]  # one model: no sequential codes
    assert report["candidates"][0]["time"] < report["candidates"][1]["time"]
    assert auto.result.config["auto"]["chosen"] == report["chosen"]
    assert torch.allclose(flat(auto.model), flat(plain.model), rtol=1e-4, atol=1e-5)
    probe, after = auto.history[:6], auto.history[6:]
    assert min(h["time"] for h in probe) >= 1.0 > max(h["time"] for h in after)
    # the prediction against the rounds after the switch, and why it may be off
    assert report["ran_total"] == pytest.approx(sum(h["time"] for h in after))
    assert report["predicted_error"] == pytest.approx(report["chosen"]["predicted_total"] / report["ran_total"] - 1)
    assert ("off_because" in report) == (abs(report["predicted_error"]) > 0.2)


def test_auto_with_pipelined_models_can_switch_to_other_partitions(digits, monkeypatch):
    """A switch to M-SGC changes the partitions (unequal sizes): tasks carry the layout, workers
    hold every sample, and the master divides by the decoded batch size."""
    from gradcode.schemes import make_scheme
    from gradcode.schemes import switch

    def to_msgc(times, **kw):
        return make_scheme("m-sgc", n=times.shape[1], B=1, W=2, lam=2), {"chosen": {"family": "m-sgc"}}

    monkeypatch.setattr(switch, "choose_after_probe", to_msgc)
    res = fit(LNBNNet(), digits[0], scheme="auto", probe=3, models=3, rounds=15, stragglers=1, delay=1.0,
              optimizer="sgd", optimizer_params={"lr": 0.1})
    assert res.auto["chosen"]["family"] == "m-sgc"
    losses = [h["loss"] for h in res.history]
    assert len(losses) == 15 and np.isfinite(losses[-1]).all()  # (NaN: a model before its first step)
    assert np.mean(losses[-1]) < np.mean(losses[3])


def test_choose_after_probe_follows_the_measurements():
    from gradcode.schemes.switch import choose_after_probe

    rng = np.random.default_rng(0)
    calm = 1.0 + 0.01 * rng.random((20, 8))  # every worker alike, computing is all the time
    _, report = choose_after_probe(calm, jobs=30)
    assert report["chosen"]["family"] == "uncoded" or report["chosen"]["params"] == {"s": 0}
    stormy = 0.1 + 0.01 * rng.random((20, 8))
    stormy[np.arange(20), rng.integers(0, 8, 20)] += 2.0  # one slow worker a round
    scheme, report = choose_after_probe(stormy, jobs=30)
    assert report["chosen"]["family"] == "crc" and report["chosen"]["params"]["s"] >= 1
    _, with_models = choose_after_probe(stormy, jobs=30, models=4)
    assert {c["scheme"] for c in with_models["candidates"]} >= {"sr-sgc", "m-sgc"}
    assert all(c["delay"] < 4 for c in with_models["candidates"])


def test_auto_refusals(digits):
    with pytest.raises(ValueError, match="go with scheme='auto'"):
        fit(LNBNNet(), digits[0], scheme="crc", probe=5, rounds=2)
    with pytest.raises(ValueError, match="needs more rounds"):
        fit(LNBNNet(), digits[0], scheme="auto", probe=5, rounds=5)


@pytest.mark.ray
def test_auto_switches_on_ray(digits, ray_session):
    """The switch on real workers: the layout travels with each task, the actors are not restarted."""
    torch.manual_seed(9)
    res = fit(LNBNNet(), digits[0], scheme="auto", probe=3, rounds=6, stragglers=1, delay=0.3, engine="ray",
              workers=4, optimizer="sgd", optimizer_params={"lr": 0.1})
    assert res.auto["chosen"]["family"] in ("crc", "uncoded") and len(res.history) == 6
    assert np.isfinite(res.history[-1]["loss"])


def test_reproduce_sgc_probe_switch_small(tmp_path):
    """gradcode reproduce sgc-probe-switch at a CI size: every scheme starts uncoded, the coded ones
    switch to their family's best parameters, the JSON and the plot are written."""
    from gradcode.experiments.reproduce import run_reproduction

    doc = run_reproduction("sgc-probe-switch", workers=8, jobs=24, probe=6, out=str(tmp_path), scale_workers=32,
                           scale_jobs=60, scale_repeats=2)
    rows = {r["scheme"]: r for r in doc["rows"]}
    assert set(rows) == {"uncoded", "GC", "SR-SGC", "M-SGC"}
    # the search is on the clock (App. K's times by default), and the table is also given at a larger scale
    assert [rows[k]["search_charged"] for k in ("GC", "SR-SGC", "M-SGC")] == [1.0, 8.0, 2.0]
    assert "The search is charged to the clock" in doc["notes"][0]
    scale = doc["at_scale"]
    assert (scale["workers"], scale["jobs"], scale["probe"], scale["repeats"]) == (32, 60, 40, 2)
    assert all(len(r["times"]) == 2 and r["time_sd"] >= 0 for r in scale["rows"])
    assert doc["notes"][-1].startswith("At the paper's scale (times only): n = 32, T_probe = 40")
    assert rows["uncoded"]["speedup_vs_uncoded"] == 1 and rows["M-SGC"]["parameters"].startswith("B=")
    assert all(np.isfinite(r["time_to_jobs"]) and 0 < r["accuracy"] <= 1 for r in rows.values())
    assert (tmp_path / "sgc-probe-switch.json").exists() and (tmp_path / "sgc-probe-switch.png").exists()
    assert "M-SGC finishes the jobs" in doc["notes"][0]


def test_reproduce_sgc_training_small(tmp_path):
    """gradcode reproduce sgc-training at a CI size: parameters from the reference profile, coded
    from round 1; on its declared clock the same table on an idle machine and beside two processes
    that keep every core busy (only the search's own wall time, search_ms, may differ)."""
    import subprocess
    import sys

    from gradcode.experiments.reproduce import run_reproduction

    def table():
        doc = run_reproduction("sgc-training", workers=8, jobs=20, probe=10, out=str(tmp_path), plot=False,
                               model="mlp", time_scale=0.5, repeats=1, scale_repeats=0)
        return doc, [{k: v for k, v in r.items() if k != "search_ms"} for r in doc["rows"]]

    doc, idle = table()
    assert "4 x mlp on digits" in doc["notes"][0] and "declared clock" in doc["notes"][0]
    rows = {r["scheme"]: r for r in doc["rows"]}
    assert set(rows) == {"uncoded", "GC", "SR-SGC", "M-SGC"}
    assert rows["GC"]["parameters"].startswith("s=") and rows["GC"]["search_ms"] is not None
    assert all(np.isfinite(r["time_to_jobs"]) for r in rows.values())
    assert doc["files"] == [str(tmp_path / "sgc-training.json")]
    # App. J's fit on the injected delays gives back their rule (load_slope 2 x time_scale 0.5), and the
    # predicted ordering is shown at 0.25x, 1x and 4x of it
    assert doc["alpha_fit"]["slope"] == pytest.approx(1.0) and "alpha = 1 s per unit load" in doc["notes"][1]
    assert [o["factor"] for o in doc["alpha_sensitivity"]] == [0.25, 1.0, 4.0] and "Sensitivity" in doc["notes"][2]
    assert all(f in (0.25, 1.0, 4.0) for f in doc["paper_order_holds_at"])
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        loaded_doc, loaded = table()
    finally:
        for h in hogs:
            h.kill()
    assert loaded == idle and loaded_doc["curves"] == doc["curves"]


def test_reproduce_agc_training_small(tmp_path):
    """gradcode reproduce agc-training at a CI size: every scheme decodes the same gradients (equal
    accuracies), each iteration takes the restart model's time for the epoch the run decoded in
    (recomputed here from the same draw), and the JSON and the figure are written."""
    from gradcode.analysis import agc_comm_vector, draw_restart_epochs, uncoded_comm_vector
    from gradcode.experiments.repro_analysis import agc_timing
    from gradcode.experiments.reproduce import run_reproduction

    p, iterations = 0.3, 5
    doc = run_reproduction("agc-training", ps=[p], iterations=iterations, workers=9, batch_size=45,
                           schemes=["uncoded", "CGC(1)", "AGC", "G-AGC"], out=str(tmp_path))
    rows = {r["scheme"]: r for r in doc["rows"]}
    assert set(rows) == {"uncoded", "CGC(1)", "AGC", "G-AGC"}
    assert len({r["accuracy"] for r in rows.values()}) == 1
    assert all(r["paper_aet"] is None for r in rows.values())  # the paper's values are for n = 20
    e = draw_restart_epochs(iterations, 9, p, np.random.default_rng([0, round(p * 1e6)]))
    uncoded = agc_timing("uncoded").execution_time(uncoded_comm_vector(), e.max(axis=1), 0)
    assert rows["uncoded"]["time_per_iteration"] == pytest.approx(uncoded.mean(), abs=1e-3)
    if rows["AGC"]["later_decodes"] == 0:  # AGC decodes once at most d - 1 = 2 workers are out
        y = np.sort(e, axis=1)[:, -3]
        s = (e > y[:, None]).sum(axis=1)
        agc = agc_timing("agc").execution_time(agc_comm_vector(3), y, s)
        assert rows["AGC"]["time_per_iteration"] == pytest.approx(agc.mean(), abs=1e-3)
    assert (tmp_path / "agc-training.json").exists() and (tmp_path / "agc-training.png").exists()
    assert "G-AGC" in doc["notes"][1]
    assert doc["notes"][2] == f"p = {p:g}: final test accuracies agree across the 4 schemes" \
        f" ({rows['AGC']['accuracy']:.4f}: the same decoded gradients)."  # computed, not a fixed string
    assert "not measured here" in doc["time_source"]
    with pytest.raises(ValueError, match="unknown scheme"):
        run_reproduction("agc-training", schemes=["GC (Tandon, s=2)"], out=str(tmp_path))  # CGC(2) by construction
    with pytest.raises(ValueError, match="unknown scheme"):
        run_reproduction("agc-training", schemes=["BGC"], out=str(tmp_path))


def test_auto_families_are_checked_up_front(digits):
    with pytest.raises(ValueError, match="need models >= 2"):
        fit(LNBNNet(), digits[0], scheme="auto", probe=2, rounds=4, families=("m-sgc",))
    with pytest.raises(ValueError, match="families must name"):
        fit(LNBNNet(), digits[0], scheme="auto", probe=2, rounds=4, families=("bogus",))


def test_fit_takes_config_objects_and_refuses_what_fit_does_not_use(digits, tmp_path):
    """optimizer is TorchConfig's (not a clash with TrainSpec's); a RunConfig without rounds leaves
    them to the epochs; TrainSpec fields that fit does not use are refused, not dropped; the flat
    keywords of 0.1 are gone."""
    from gradcode.runtime import RunConfig, TrainSpec

    spec = TrainSpec("crc", workers=6, stragglers=1)
    res = gt.fit(LNBNNet(), digits[0], spec, torch_config=gt.TorchConfig(optimizer="adam", batch_size=60),
                 run=RunConfig(rounds=1), engine="inprocess")
    assert "Adam" in res.result.config["optimizer"][0]
    epoch = gt.fit(LNBNNet(), digits[0], spec, torch_config=gt.TorchConfig(batch_size=300),
                   run=RunConfig(run_dir=tmp_path / "r"), engine="inprocess")
    plain = gt.fit(LNBNNet(), digits[0], spec, torch_config=gt.TorchConfig(batch_size=300), engine="inprocess")
    assert len(epoch.history) == len(plain.history) < 10  # one epoch of whole batches, not 100 rounds
    assert epoch.result.config["optimizer_params"][0]["lr"] == 0.01  # the resolved step size, recorded
    with pytest.raises(ValueError, match="verify is not used by a torch model's run"):
        gt.fit(LNBNNet(), digits[0], TrainSpec("crc", workers=6, verify=True), engine="inprocess")
    with pytest.raises(TypeError, match="unexpected keyword argument 'lr'"):
        gt.fit(LNBNNet(), digits[0], lr=0.1)


def test_auto_load_slope_is_the_injected_delays_plus_the_workers_own_time():
    """scheme="auto" without load_slope: the injected delays' slope, fitted as App. J does when they
    are injected in full (the trace rule's alpha, exactly; 0 for "excess" or nothing injected), plus
    n x the probe's fastest worker's own time (arrival less injected delay); a given slope as given."""
    from gradcode.runtime import TrainSpec
    from gradcode.schemes.switch import ProbeThenSwitch, SlopeSource
    from gradcode.torch.training import _injected_slope

    d = np.ones((12, 4))
    rule = {"delays": d, "trace_load": 0.25, "load_slope": 1.5}
    slope, source = _injected_slope(TrainSpec("uncoded", workers=4, delay_model="trace", delay_params=rule,
                                              inject="full"), 4, 12)
    assert slope == pytest.approx(1.5) and "fitted as App. J does" in source and "R^2" in source
    assert _injected_slope(TrainSpec("uncoded", workers=4, delay_model="trace", delay_params=rule), 4, 12)[0] == 0.0
    assert _injected_slope(TrainSpec("uncoded", workers=4), 4, 12)[0] == 0.0
    switch = ProbeThenSwitch(4, 2, 6, slope=SlopeSource(injected=1.5, injected_from="rule"))
    switch.observe_times(0, [1.25, 1.5, 2.0, -1.0], injected=[1.0, 1.0, 1.0, 1.0])  # own: 0.25, 0.5, 1.0, late
    switch.observe_times(1, [1.75, 1.5, 1.25, 1.5], injected=[1.0, 1.0, 1.0, 1.0])  # own: fastest 0.25
    assert switch.report["alpha"] == pytest.approx(1.5 + 4 * 0.25) and switch.report["alpha_from"].startswith("rule")
    given = ProbeThenSwitch(4, 1, 3, slope=SlopeSource(0.7, injected=1.5))
    given.observe_times(0, [1.0, 1.0, 1.0, 1.0])
    assert (given.report["alpha"], given.report["alpha_from"]) == (0.7, "given")


def test_sgc_training_repetitions_are_averaged_in_table_1s_form(tmp_path):
    """repeats = R: R independent repetitions (new delays, reference, choice and training each),
    each scheme's time as mean, standard deviation and the R runs."""
    from gradcode.experiments.repro_training import _mean_rows
    from gradcode.experiments.reproduce import run_reproduction

    rows = _mean_rows([[{"scheme": "GC", "parameters": "s=1", "load": 0.25, "time_to_jobs": 10.0, "search_ms": 1.0,
                         "accuracy": 0.5}],
                       [{"scheme": "GC", "parameters": "s=2", "load": 0.375, "time_to_jobs": 14.0, "search_ms": 3.0,
                         "accuracy": 0.7}]])
    assert rows == [{"scheme": "GC", "parameters": "s=1; s=2", "load": 0.3125, "time_to_jobs": 12.0,
                     "time_sd": pytest.approx(2.83, abs=0.01), "times": [10.0, 14.0], "search_ms": 2.0,
                     "accuracy": 0.6}]
    doc = run_reproduction("sgc-training", workers=8, jobs=12, probe=6, out=str(tmp_path), plot=False,
                           model="mlp", repeats=2, scale_repeats=0)
    assert doc["repeats"] == 2 and all(len(r["times"]) == 2 for r in doc["rows"])
    assert "over 2 repetitions" in doc["notes"][0] and "M-SGC is ahead of GC in" in doc["notes"][0]
    with pytest.raises(ValueError, match="repeats"):
        run_reproduction("sgc-training", repeats=0, out=str(tmp_path))


@pytest.mark.parametrize("name,size", [("sgc-training", dict(jobs=12, probe=6, repeats=1)),
                                       ("sgc-probe-switch", dict(jobs=16, probe=6))])
def test_the_table_at_scale_is_the_trained_runs_clock(tmp_path, name, size):
    """The paper-scale table plays the schemes in the simulator instead of training them: at the
    trained run's own size and seed it gives every scheme the trained run's time to the jobs, its
    parameters and (Fig. 18) the same search charged, so at n = 256 it is what the training would
    have timed."""
    from gradcode.experiments.repro_training import PAPER_SEARCH_SECONDS
    from gradcode.experiments.reproduce import run_reproduction

    doc = run_reproduction(name, workers=8, out=str(tmp_path), plot=False, model="mlp", scale_workers=8,
                           scale_jobs=size["jobs"], scale_probe=size["probe"], scale_repeats=1, **size)
    trained, timed = doc["rows"], doc["at_scale"]["rows"]
    assert [r["scheme"] for r in trained] == [r["scheme"] for r in timed]
    for a, b in zip(trained, timed):
        assert (a["parameters"], a["load"]) == (b["parameters"], b["load"])
        assert a["time_to_jobs"] == pytest.approx(b["time_to_jobs"], rel=1e-9)
        assert a["search_charged"] == b["search_charged"]
        if name == "sgc-probe-switch" and a["scheme"] != "uncoded":
            assert a["search_charged"] == PAPER_SEARCH_SECONDS[{"GC": "crc", "SR-SGC": "sr-sgc",
                                                                "M-SGC": "m-sgc"}[a["scheme"]]]


def test_the_switch_search_clock_is_declared_or_labelled(tmp_path):
    """search_clock: none charges nothing; measured charges the search's own wall time and says
    so; anything else is refused by name."""
    from gradcode.experiments.reproduce import run_reproduction

    common = dict(workers=8, jobs=12, probe=6, out=str(tmp_path), plot=False, model="mlp", scale_repeats=0)
    none = run_reproduction("sgc-probe-switch", search_clock="none", **common)
    assert all(r["search_charged"] in (None, 0.0) for r in none["rows"])
    assert "charged to the clock" not in none["notes"][0]
    measured = run_reproduction("sgc-probe-switch", search_clock="measured", **common)
    assert "depends on the host's load" in measured["notes"][0]
    for r in measured["rows"][1:]:
        assert r["search_charged"] == pytest.approx(r["search_ms"] / 1e3, abs=1e-3)
    with pytest.raises(ValueError, match="search_clock"):
        run_reproduction("sgc-probe-switch", search_clock="wall", **common)


def test_reproduce_sgc_resnet_small(tmp_path):
    """gradcode reproduce sgc-resnet (SGC App. L) at a CI size: its own rule (mu = 5), 16-bit
    messages, batch 512, a 20-round reference by default; the note compares with App. L's claim."""
    from gradcode.experiments.reproduce import run_reproduction

    doc = run_reproduction("sgc-resnet", workers=8, jobs=12, probe=6, out=str(tmp_path), plot=False, model="mlp",
                           repeats=1, scale_repeats=0)
    note = doc["notes"][0]
    assert "mu = 5" in note and "float16 messages" in note and "batch 512" in note and "11.6 %" in note
    assert "-" not in note.split("Here M-SGC")[1].split("(")[0]  # "0.4 % slower", never "-0.4 % slower"
    assert doc["stragglers_identified"] == 0 and "no code has a straggler to tolerate" in doc["notes"][2]
    assert {r["scheme"] for r in doc["rows"]} == {"uncoded", "GC", "SR-SGC", "M-SGC"}
    assert all(np.isfinite(r["time_to_jobs"]) for r in doc["rows"])
    assert doc["title"].startswith("SGC App. L") and doc["files"] == [str(tmp_path / "sgc-resnet.json")]


def test_a_step_writes_its_gradient_into_the_last_steps_buffer_while_the_grads_are_still_its_views():
    """``apply_decoded`` without accumulation reuses the buffer whose views the parameters' ``.grad``
    are (no gradient-sized allocation a step), with the same values as a fresh one; a ``.grad``
    replaced or dropped since, or accumulation, gets a buffer of its own."""
    from gradcode.torch.problem import ModelLayout, apply_decoded

    net = LNBNNet()
    layout = ModelLayout(net)
    rng = np.random.default_rng(0)

    def decoded():
        g = rng.standard_normal(layout.dim).astype(np.float32)
        g[-1] = 32.0
        return g

    g1, g2 = decoded(), decoded()
    apply_decoded(net, layout, g1)
    first = layout.grads
    assert first is not None and all(p.grad._base is first for p in net.parameters())
    apply_decoded(net, layout, g2)
    assert layout.grads is first  # reused, and holds g2 / B
    assert torch.equal(flat_grads(net), torch.from_numpy(g2[:layout.d_params]) / 32.0)
    net.fc2.bias.grad = None  # zero_grad(set_to_none=True) on one parameter: a buffer of its own
    apply_decoded(net, layout, g1)
    assert layout.grads is not first and torch.equal(flat_grads(net), torch.from_numpy(g1[:layout.d_params]) / 32.0)
    assert pickle.loads(pickle.dumps(layout)).grads is None  # a copy's parameters have no .grad to back
    before = flat_grads(net).clone()
    apply_decoded(net, layout, g2, accumulate=True)  # an own loop's: added to what is there
    assert torch.allclose(flat_grads(net), before + torch.from_numpy(g2[:layout.d_params]) / 32.0)


def flat_grads(module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in module.parameters()])
