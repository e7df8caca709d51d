"""gradcode.torch.Workers (a user's own loop), StopTraining, resumed histories and devices.

The references: fit with the same settings (one round is the same code path), and single-process
torch on the same samples."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import gradcode  # noqa: E402
import gradcode.torch as gt  # noqa: E402
from gradcode.errors import GradcodeError  # noqa: E402
from gradcode.runtime import ClusterConfig, RunConfig, TrainingStopped, TrainSpec  # noqa: E402
from gradcode.torch.problem import _seed, check_device, model_device  # noqa: E402
from torch_util import LNBNNet, NaNOnMarker, loud_loss  # noqa: E402


@pytest.fixture(scope="module")
def digits():
    (X, y), _ = gt.digits()
    return X[:480], y[:480]


def flat(module) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(module.parameters()).detach()


SPEC = TrainSpec("crc", workers=4, stragglers=1, delay=1.0, seed=3)


def step_lr(opt):
    return torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)


def test_own_loop_with_clipping_and_a_scheduler_reaches_fits_weights(digits, tmp_path):
    """A practitioner's loop: SGD with momentum, gradient clipping and StepLR in the user's loop
    train the model to fit's weights and BatchNorm statistics with the same settings."""
    torch.manual_seed(0)
    net = LNBNNet(dropout=0.2)
    start = LNBNNet(dropout=0.2)
    start.load_state_dict(net.state_dict())
    rounds, clip = 6, 0.05
    fitted = gt.fit(net, digits, SPEC, engine="inprocess", run=RunConfig(rounds=rounds, eval_every=0,
                                                                          run_dir=tmp_path / "fit"),
                    torch_config=gt.TorchConfig(optimizer=torch.optim.SGD, batch_size=48,
                                                optimizer_params={"lr": 0.5, "momentum": 0.9},
                                                scheduler=step_lr, clip_grad_norm=clip))
    opt = torch.optim.SGD(start.parameters(), lr=0.5, momentum=0.9)
    sched = step_lr(opt)
    losses, norms = [], []
    with gt.Workers(start, digits, SPEC, torch_config=gt.TorchConfig(batch_size=48), engine="inprocess",
                    run=RunConfig(rounds=rounds, run_dir=tmp_path / "loop")) as workers:
        assert workers.rounds == rounds
        for _ in range(workers.rounds):
            opt.zero_grad()
            losses.append(workers.backward())
            norms.append(float(torch.nn.utils.clip_grad_norm_(start.parameters(), clip)))
            opt.step()
            sched.step()
    assert max(norms) > clip  # the clipping did something
    assert torch.allclose(flat(start), flat(fitted.model), rtol=1e-5, atol=1e-6)
    assert torch.allclose(start.bn.running_mean, fitted.model.bn.running_mean, rtol=1e-5, atol=1e-6)
    assert int(start.bn.num_batches_tracked) == rounds
    assert losses == pytest.approx(fitted.losses, rel=1e-5)
    assert len(workers.history) == rounds and workers.result.round_times.size == rounds
    assert sum(h["stragglers"] for h in workers.history) == rounds  # one injected straggler a round
    assert (tmp_path / "loop" / "result.json").is_file()


def test_backward_adds_the_exact_batch_gradient_and_updates_batchnorm(digits, tmp_path):
    """.grad gains the batch-mean gradient computed in one process (per partition: ghost batches),
    added to what is there as loss.backward() adds; BatchNorm's running mean moves as a forward pass
    would move it."""
    torch.manual_seed(1)
    net = LNBNNet(dropout=0.3)
    ref = LNBNNet(dropout=0.3)
    ref.load_state_dict(net.state_dict())
    with gt.Workers(net, digits, TrainSpec("frc", workers=4, stragglers=1, seed=5),
                    torch_config=gt.TorchConfig(batch_size=40),
                    engine="inprocess", run=RunConfig(rounds=2, run_dir=tmp_path)) as workers:
        loss = workers.backward()
        first = torch.cat([p.grad.reshape(-1) for p in net.parameters()]).clone()
        spec = workers.spec
        total, total_loss = None, 0.0
        X, y = digits
        ref.train()
        for j in range(spec.sizes.size):
            idx = torch.from_numpy(spec.batch_indices(0, j))
            torch.manual_seed(_seed(spec.seed, 2, 0, j))
            part = nn.functional.cross_entropy(ref(X[idx]), y[idx]) * idx.numel()
            g = torch.cat([t.reshape(-1) for t in torch.autograd.grad(part, list(ref.parameters()))])
            total = g if total is None else total + g
            total_loss += float(part.detach())
        assert torch.allclose(first, total / 40, rtol=1e-4, atol=1e-6)
        assert loss == pytest.approx(total_loss / 40, rel=1e-5)
        assert not torch.equal(net.bn.running_mean, torch.zeros_like(net.bn.running_mean))
        workers.backward()  # no zero_grad: the second batch's gradient is added
        second = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
        assert not torch.allclose(second, first)
        with pytest.raises(TrainingStopped, match="has done its 2 rounds"):
            workers.backward()


def test_workers_refuse_what_belongs_to_the_loop_and_misuse(digits, tmp_path):
    net = LNBNNet()
    with pytest.raises(ValueError, match="TorchConfig.optimizer, scheduler belong to your loop"):
        gt.Workers(net, digits, SPEC, torch_config=gt.TorchConfig(optimizer="adam", scheduler=step_lr))
    with pytest.raises(ValueError, match="writes no checkpoints"):
        gt.Workers(net, digits, SPEC, run=RunConfig(rounds=2, checkpoint_every=1))
    with pytest.raises(ValueError, match="models=1"):
        gt.Workers(net, digits, TrainSpec("crc", workers=4, stragglers=1, models=2))
    with pytest.raises(TypeError, match="nn.Module your loop trains"):
        gt.Workers(lambda: net, digits, SPEC)
    workers = gt.Workers(net, digits, SPEC, engine="inprocess", run=RunConfig(rounds=1, run_dir=tmp_path))
    with pytest.raises(GradcodeError, match="inside `with Workers"):
        workers.backward()


def test_an_error_in_the_loop_keeps_the_rounds_done(digits, tmp_path):
    net = LNBNNet()
    workers = gt.Workers(net, digits, SPEC, engine="inprocess", run=RunConfig(rounds=5, run_dir=tmp_path))
    with pytest.raises(KeyError):
        with workers:
            workers.backward()
            raise KeyError("the user's bug")
    assert workers.result.round_times.size == 1 and workers.result.error_type == "KeyError"


def test_workers_without_rounds_run_as_many_rounds_as_the_loop_makes(digits, tmp_path):
    """Workers once had a round budget: one epoch by default (10 rounds of 48 here), so a loop of
    more steps stopped with TrainingStopped unless it knew to pass RunConfig(rounds=...). Without
    rounds a static code runs every backward() the loop makes, past the first tables (64 rounds)
    too, one injected straggler a round throughout; each record holds its batch size; workers.rounds
    is a length for the loop (one epoch), not a limit."""
    torch.manual_seed(4)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.2)
    with gt.Workers(net, digits, SPEC, torch_config=gt.TorchConfig(batch_size=48), engine="inprocess",
                    run=RunConfig(run_dir=tmp_path)) as workers:
        assert workers.rounds == 10 and workers.limit is None
        for _ in range(70):
            opt.zero_grad()
            workers.backward()
            opt.step()
    assert len(workers.history) == 70 and [h["round"] for h in workers.history] == list(range(70))
    assert {h["batch_size"] for h in workers.history} == {48}
    assert workers.result.round_times.size == 70 and (workers.result.round_times > 0).all()
    assert [h["stragglers"] for h in workers.history] == [1] * 70
    assert workers.result.config["rounds"] is None


def test_schemes_that_plan_jobs_ahead_need_rounds_under_workers(digits, tmp_path):
    """SR-SGC's jobs span rounds, and auto chooses its code for the rounds after its probe: both say
    why they need the run's length; with RunConfig.rounds SR-SGC runs and the rounds are a limit."""
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    sgc = TrainSpec("sr-sgc", workers=4, stragglers=1, scheme_params={"B": 1, "W": 2, "lam": 1})
    with pytest.raises(ValueError, match="sr-sgc plans its jobs ahead .* give run=RunConfig\\(rounds=...\\)"):
        gt.Workers(net, digits, sgc, engine="inprocess")
    with pytest.raises(ValueError, match="scheme='auto' plans its run ahead"):
        gt.Workers(net, digits, TrainSpec("auto", workers=4), engine="inprocess")
    with gt.Workers(net, digits, sgc, torch_config=gt.TorchConfig(batch_size=48), engine="inprocess",
                    run=RunConfig(rounds=3, run_dir=tmp_path)) as workers:
        for _ in range(3):
            workers.backward()
        with pytest.raises(TrainingStopped, match="has done its 3 rounds"):
            workers.backward()


def test_an_open_ended_run_grows_its_delays_keeping_those_drawn():
    """The runtime under Workers: prepare(rounds=None) holds 64 rounds of tables and injected delays,
    refuses a scheme whose jobs span rounds, takes a failure in any round; grow_setup keeps the rows
    drawn and adds the longer draw's; a session of rounds=None refuses checkpoints."""
    from gradcode.runtime import FaultConfig
    from gradcode.runtime.session import open_session
    from gradcode.runtime.setup import OPEN_ROUNDS, grow_setup, prepare

    data = {"n_samples": 90, "n_features": 3}
    setup = prepare(TrainSpec("crc", workers=4, stragglers=1, delay=0.1, data_params=data), rounds=None,
                    faults=FaultConfig(fail=["1@500"]))
    assert setup.open_ended and setup.rounds == OPEN_ROUNDS and setup.config["rounds"] is None
    assert setup.failures == {(1, 500)}
    first = setup.draw.intercept.copy()
    grow_setup(setup, 2 * OPEN_ROUNDS)
    assert setup.rounds == 2 * OPEN_ROUNDS and setup.draw.intercept.shape == (2 * OPEN_ROUNDS, 4)
    assert np.array_equal(setup.draw.intercept[:OPEN_ROUNDS], first)
    assert ((setup.draw.intercept > 0).sum(axis=1) == 1).all()  # one slowed worker a round, after too
    with pytest.raises(ValueError, match="fail round"):
        prepare(TrainSpec("crc", workers=4, data_params=data), rounds=10, faults=FaultConfig(fail=["1@500"]))
    with pytest.raises(ValueError, match="m-sgc plans its jobs ahead"):
        prepare(TrainSpec("m-sgc", workers=4, stragglers=1, data_params=data,
                          scheme_params={"B": 1, "W": 2, "lam": 1}), rounds=None)
    with pytest.raises(ValueError, match="writes no checkpoint"):
        open_session(TrainSpec("crc", workers=4, data_params=data), cluster=ClusterConfig(), faults=FaultConfig(),
                     run=RunConfig(checkpoint_every=5), engine="inprocess")


@pytest.mark.ray
def test_workers_on_ray(digits, ray_session, tmp_path):
    torch.manual_seed(2)
    net = LNBNNet()
    plain = LNBNNet()
    plain.load_state_dict(net.state_dict())
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    with gt.Workers(net, digits, TrainSpec("crc", workers=4, stragglers=1, delay=0.05),
                    torch_config=gt.TorchConfig(batch_size=48),
                    run=RunConfig(rounds=3, run_dir=tmp_path)) as workers:
        for _ in range(3):
            opt.zero_grad()
            workers.backward()
            opt.step()
    fitted = gt.fit(plain, digits, TrainSpec("uncoded", workers=4), engine="inprocess",
                    torch_config=gt.TorchConfig(optimizer=torch.optim.Adam, optimizer_params={"lr": 1e-2},
                                                batch_size=48), run=RunConfig(rounds=3, eval_every=0,
                                                                              run_dir=tmp_path / "fit"))
    # uncoded over 4 partitions and CRC over 4: the same batches, the same exact gradient
    assert torch.allclose(flat(net), flat(fitted.model), rtol=1e-4, atol=1e-5)


@pytest.mark.ray
def test_float16_overflows_on_ray_are_recorded_as_in_process(digits, ray_session, tmp_path):
    """A loss whose float16 backward pass overflows at the first loss scale: each worker on Ray
    lowers its scale and says so with its message, and the rounds record the same overflows, and
    train the same weights, as the in-process engine (uncoded: every message is received)."""
    conf = dict(batch_size=48, autocast="float16", loss=loud_loss)
    runs = {}
    for engine in ("ray", "inprocess"):
        torch.manual_seed(3)
        net = LNBNNet()
        opt = torch.optim.SGD(net.parameters(), lr=1e-4)
        with gt.Workers(net, digits, TrainSpec("uncoded", workers=4), torch_config=gt.TorchConfig(**conf),
                        engine=engine, run=RunConfig(rounds=2, run_dir=tmp_path / engine)) as workers:
            for _ in range(2):
                opt.zero_grad()
                workers.backward()
                opt.step()
        runs[engine] = (flat(net), [r["overflows"] for r in workers.history], workers.result.overflows.tolist())
    (ray_net, ray_history, ray_rounds), (local_net, local_history, local_rounds) = runs["ray"], runs["inprocess"]
    assert ray_history == ray_rounds == local_history == local_rounds and ray_rounds[0] >= 4
    assert torch.allclose(ray_net, local_net, rtol=1e-5, atol=1e-6)


@pytest.mark.ray
def test_a_second_workers_block_reuses_the_cluster_and_workers_and_trains_as_on_new_ones(digits, ray_session,
                                                                                         tmp_path, monkeypatch):
    """Two ``with Workers(...)`` blocks in one process: the second starts no Ray (the embedded
    cluster the first ran on is kept) and creates no worker process (it takes the idle ones,
    reset with its own data), yet reaches bit for bit the weights of the same loop on workers
    created for it (a restart limit keeps a run out of the pool): nothing of the first run's
    model, data, channels or tokens carries over, though the first loop stopped with an error
    after its first round, its straggler's 2 s delay not slept out."""
    from gradcode.runtime import FaultConfig, cluster

    starts = []
    monkeypatch.setattr(cluster, "init_ray", lambda **kw: starts.append(kw))

    def idle() -> set:  # the processes of the workers runs have left to the next
        # a bounded wait: an idle worker that does not answer fails the test instead of hanging it
        return {ray_session.get(a.ping.remote(), timeout=60) for actors in cluster.session["pool"].values()
                for a, _ in actors}

    def loop(name, spec, data, faults=None, stop=None):
        torch.manual_seed(7)
        net = LNBNNet()
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
        with gt.Workers(net, data, spec, torch_config=gt.TorchConfig(batch_size=48), faults=faults,
                        run=RunConfig(rounds=3, run_dir=tmp_path / name)) as workers:
            engine = workers._session.engine
            pids = engine.pids()
            for r in range(3):
                if r == stop:  # the loop's own error, between two rounds
                    raise KeyError(pids)
                opt.zero_grad()
                workers.backward()
                opt.step()
        assert engine.connection == "embedded"
        return flat(net), pids

    spec = TrainSpec("crc", workers=4, stragglers=1, delay=0.05, seed=3)
    with pytest.raises(KeyError) as stopped:
        loop("first", TrainSpec("crc", workers=4, stragglers=1, delay=2.0, seed=11),
             (digits[0][:240].flip(0), digits[1][:240].flip(0)), stop=1)
    first = stopped.value.args[0]
    left = idle()
    assert set(first) <= left  # the first block left its workers to the next
    reused, second = loop("second", spec, digits)
    assert set(second) <= left and len(set(second)) == 4  # no process started
    fresh, third = loop("fresh", spec, digits, faults=FaultConfig(max_restarts=3))
    assert not set(third) & left
    assert starts == []
    assert torch.equal(reused, fresh)


# ------------------------------------------------------------------------ stopping and resuming


def test_stop_training_in_a_callback_returns_the_model_of_that_round(digits, tmp_path):
    torch.manual_seed(4)
    net = LNBNNet()
    config = gt.TorchConfig(optimizer="adam", optimizer_params={"lr": 1e-2}, batch_size=48)

    def stop_at_3(record):
        if record["round"] == 2:
            raise gradcode.StopTraining

    stopped = gt.fit(net, digits, SPEC, engine="inprocess", torch_config=config, callback=stop_at_3,
                     run=RunConfig(rounds=10, eval_every=0, run_dir=tmp_path / "a"))
    three = gt.fit(net, digits, SPEC, engine="inprocess", torch_config=config,
                   run=RunConfig(rounds=3, eval_every=0, run_dir=tmp_path / "b"))
    assert len(stopped.history) == 3 and stopped.result.error is None
    assert stopped.result.round_times.size == 3
    assert torch.allclose(flat(stopped.model), flat(three.model), rtol=1e-5, atol=1e-6)


def test_a_resumed_runs_history_holds_every_round(digits, tmp_path):
    torch.manual_seed(6)
    net = LNBNNet()
    config = gt.TorchConfig(optimizer="adam", optimizer_params={"lr": 1e-2}, batch_size=48)
    first = gt.fit(net, digits, SPEC, engine="inprocess", torch_config=config,
                   run=RunConfig(rounds=4, eval_every=2, checkpoint_every=2, run_dir=tmp_path))
    resumed = gt.fit(net, digits, SPEC, engine="inprocess", torch_config=config,
                     run=RunConfig(rounds=8, eval_every=2, checkpoint_every=2, run_dir=tmp_path, resume=True))
    assert [h["round"] for h in resumed.history] == list(range(8))
    for old, new in zip(first.history, resumed.history[:4]):
        assert new["loss"] == old["loss"] and new["time"] == old["time"]
        assert new["stragglers"] == old["stragglers"]
        assert ("metrics" in new) == ("metrics" in old)


# ------------------------------------------------------------------------ devices


def test_a_cuda_device_without_cuda_is_one_clear_error(digits):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(GradcodeError, match=r"device='cuda': torch sees no CUDA GPU here") as info:
        gt.fit(LNBNNet(), digits, SPEC, engine="inprocess", torch_config=gt.TorchConfig(device="cuda"))
    assert "\n" not in str(info.value)
    with pytest.raises(GradcodeError, match="no CUDA GPU"):
        gt.Workers(LNBNNet(), digits, SPEC, torch_config=gt.TorchConfig(device="cuda:1"))
    with pytest.raises(GradcodeError, match="device must be 'cpu', 'cuda' or 'cuda:N'"):
        check_device("tpu")
    with pytest.raises(GradcodeError, match="device must be"):
        check_device("cuda:x")


def test_the_device_follows_the_model_and_is_recorded(digits, tmp_path):
    assert model_device(LNBNNet()) == "cpu" and model_device(LNBNNet) == "cpu"
    res = gt.fit(LNBNNet(), digits, SPEC, engine="inprocess", torch_config=gt.TorchConfig(device="cpu"),
                 run=RunConfig(rounds=1, eval_every=0, run_dir=tmp_path))
    assert res.spec.device == "cpu" and res.result.config["data"]["device"] == "cpu"
    with pytest.raises(ValueError, match="worker_gpus"):
        ClusterConfig(worker_gpus=-1)


@pytest.mark.ray
def test_ray_workers_ask_for_gpus_only_for_a_cuda_device(ray_session):
    from gradcode.runtime.engine import RayEngine
    from gradcode.torch.problem import TorchSpec

    class Spec:  # what _gpus_each reads of a problem spec
        def __init__(self, device):
            self.device = device

    engine = RayEngine()
    assert engine._gpus_each([(Spec("cpu"), {}, 1)]) == 0.0
    with pytest.raises(GradcodeError, match="the Ray cluster has no GPUs"):
        engine._gpus_each([(Spec("cuda"), {}, 1)] * 4)
    assert RayEngine(worker_gpus=0.25)._gpus_each([(Spec("cuda"), {}, 1)]) == 0.25
    assert "device" in TorchSpec.__dataclass_fields__


# ------------------------------------------------------------------------ CLI: the torch options, TensorBoard


def test_cli_loss_scheduler_clipping_and_tensorboard(tmp_path):
    """train --model with --loss, --scheduler, --clip-grad-norm and --tensorboard: the run equals fit
    with the same settings, and the event files hold the loss and the held-out accuracy."""
    import json

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from typer.testing import CliRunner

    from gradcode.cli import app

    (tmp_path / "parts.py").write_text(
        "import torch\n"
        "def smooth(out, y):\n    return torch.nn.functional.cross_entropy(out, y, label_smoothing=0.1)\n")
    res = CliRunner().invoke(app, [
        "train", "--model", "mlp", "--scheme", "crc", "--workers", "4", "--stragglers", "1", "--rounds", "6",
        "--optimizer", "sgd", "--optimizer-params", "lr=0.5", "--optimizer-params", "momentum=0.9",
        "--batch-size", "48",
        "--eval-every", "3",
        "--loss", f"{tmp_path / 'parts.py'}:smooth", "--scheduler", "step:step_size=2,gamma=0.5",
        "--clip-grad-norm", "0.05", "--device", "cpu", "--tensorboard", str(tmp_path / "tb"),
        "--engine", "inprocess", "--run-dir", str(tmp_path / "run"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["config"]["data"]["loss"] == "smooth" and doc["config"]["data"]["device"] == "cpu"
    events = EventAccumulator(str(tmp_path / "tb" / "crc")).Reload()
    assert [e.step for e in events.Scalars("train/loss")] == list(range(6))
    assert [e.step for e in events.Scalars("eval/accuracy")] == [2, 5]
    assert events.Scalars("train/loss")[-1].value == pytest.approx(doc["losses"][-1][0], rel=1e-6)


def test_cli_torch_option_refusals(tmp_path):
    from typer.testing import CliRunner

    from gradcode.cli import app

    runner = CliRunner()
    for args, text in ((["--loss", "hinge"], "loss must be one of"),
                       (["--scheduler", "linear"], "scheduler must be one of"),
                       (["--scheduler", "step:gamma=x,step_size=-1"], "scheduler step"),
                       (["--clip-grad-norm", "0"], "clip_grad_norm"),
                       (["--loss", "nowhere.py:f"], "no such file")):
        res = runner.invoke(app, ["train", "--model", "mlp", "--engine", "inprocess", "--rounds", "1", *args,
                                  "--run-dir", str(tmp_path / "r")])
        assert res.exit_code == 2, (args, res.output)
        assert text in res.output, (args, res.output)
    res = runner.invoke(app, ["train", "--rounds", "1", "--clip-grad-norm", "1"])
    assert res.exit_code == 2 and "go with --model" in res.output
    if not torch.cuda.is_available():
        res = runner.invoke(app, ["train", "--model", "mlp", "--engine", "inprocess", "--rounds", "1", "--device",
                                  "cuda", "--run-dir", str(tmp_path / "c")])
        assert res.exit_code == 2 and "torch sees no CUDA GPU here" in res.output
        assert len([line for line in res.output.splitlines() if line.strip()]) == 1, res.output


def test_cli_optimizer_is_any_torch_optim_class_and_its_params_take_commas(tmp_path):
    """--optimizer took only sgd, adam and adamw, and --optimizer-params lr=0.1,momentum=0.9 gave lr
    the string "0.1,momentum=0.9". Now any torch.optim class by name in any case, or FILE.py:NAME;
    an unknown name lists them, LBFGS (a closure) and parameters the class refuses are named."""
    import json

    from typer.testing import CliRunner

    from gradcode.cli import app

    runner = CliRunner()
    (tmp_path / "opt.py").write_text("import torch\n\nclass Mine(torch.optim.SGD):\n    pass\n")

    def train(*args, name="r"):
        return runner.invoke(app, ["train", "--model", "mlp", "--engine", "inprocess", "--rounds", "1",
                                   "--batch-size", "48", *args, "--run-dir", str(tmp_path / name), "--json"])

    for args, expected in (
            (["--optimizer-params", "lr=0.1,momentum=0.9"], {"class": "SGD", "lr": 0.1, "momentum": 0.9}),
            (["--optimizer", "RMSprop", "--optimizer-params", "lr=0.01,alpha=0.9"],
             {"class": "RMSprop", "lr": 0.01, "alpha": 0.9}),
            (["--optimizer", "adagrad"], {"class": "Adagrad", "lr": 0.01}),  # the class's own lr
            (["--optimizer", f"{tmp_path / 'opt.py'}:Mine", "--optimizer-params", "lr=0.3"],
             {"class": "Mine", "lr": 0.3})):
        res = train(*args, name=expected["class"])
        assert res.exit_code == 0, (args, res.output)
        params = json.loads(res.stdout)["config"]["optimizer_params"][0]
        assert {k: params[k] for k in expected} == expected, params
    for args, text in ((["--optimizer", "nope"], "'nope' is not a torch.optim optimizer; give one of"),
                       (["--optimizer", "nope"], "RMSprop, Rprop, SGD"),
                       (["--optimizer", "lbfgs"], "LBFGS cannot step here"),
                       (["--optimizer", "adam", "--optimizer-params", "momentum=0.9"],
                        "optimizer_params {'momentum': 0.9}: Adam refuses them"),
                       (["--optimizer-params", "lr=fast"], "optimizer_params {'lr': 'fast'}: SGD refuses them")):
        res = train(*args, name="bad")
        assert res.exit_code == 2, (args, res.output)
        said = " ".join(res.output.split())
        assert text in said and "Traceback" not in said, (args, res.output)


def test_an_exception_in_the_users_model_or_loss_is_one_line_naming_the_file(tmp_path):
    """A --model whose constructor raises (a module moving itself to CUDA on a CPU-only torch)
    printed a 78-line traceback. An exception raised by the user's model (constructor, forward) or
    loss at set-up is one line naming the user's file and line and the exception, exit status 2;
    --debug prints the traceback first."""
    from typer.testing import CliRunner

    from gradcode.cli import app

    path = tmp_path / "mynet.py"
    path.write_text(
        "from torch import nn\n"
        "\n"
        "class OnCuda(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        raise RuntimeError('Torch not compiled with CUDA enabled')\n"
        "\n"
        "class Flat(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(64, 10)\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)  # not flattened\n"
        "\n"
        "def loss(out, y):\n"
        "    return out.sum() / undefined\n")
    runner = CliRunner()
    for args, where, what in (
            ([f"{path}:OnCuda"], f"{path}:6", "RuntimeError: Torch not compiled with CUDA enabled (model: building"),
            ([f"{path}:Flat"], f"{path}:13", "RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
            (["mlp", "--loss", f"{path}:loss"], f"{path}:16", "NameError: name 'undefined' is not defined")):
        res = runner.invoke(app, ["train", "--model", *args, "--engine", "inprocess", "--rounds", "1",
                                  "--run-dir", str(tmp_path / "r")])
        lines = [line for line in res.output.splitlines() if line.strip()]
        assert res.exit_code == 2 and len(lines) == 1, res.output
        assert lines[0].startswith(f"error: {where}: {what}"), res.output
    res = runner.invoke(app, ["train", "--model", f"{path}:OnCuda", "--engine", "inprocess", "--rounds", "1",
                              "--run-dir", str(tmp_path / "r"), "--debug"])
    assert res.exit_code == 2 and "Traceback (most recent call last)" in res.output, res.output
    assert "raise RuntimeError('Torch not compiled with CUDA enabled')" in res.output
    assert res.output.strip().splitlines()[-1].startswith(f"error: {path}:6: RuntimeError")


def test_an_exception_in_the_users_data_reader_is_named_with_its_file(tmp_path):
    """fit(data=factory): the user's reader raising at set-up is a UserCodeError (a ValueError)
    naming this file and line, the reader's exception as its cause."""
    from gradcode.errors import UserCodeError

    def reader():
        raise OSError("the share is not mounted")

    with pytest.raises(UserCodeError, match=r"test_torch_workers\.py:\d+: OSError: the share is not mounted "
                                             r"\(data: reading the samples of") as info:
        gt.fit(nn.Linear(64, 10), reader, SPEC, engine="inprocess", run=RunConfig(rounds=1, run_dir=tmp_path))
    assert isinstance(info.value, ValueError) and isinstance(info.value.__cause__, OSError)


def test_an_output_size_below_the_classes_is_named(digits):
    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 3)

        def forward(self, x):
            return self.fc(x.reshape(x.shape[0], -1))

    with pytest.raises(GradcodeError, match="outputs 3 values per sample, but the targets hold 10 classes"):
        gt.fit(Small(), digits, SPEC, engine="inprocess")


# ------------------------------------------------------------------------ data the way PyTorch reads it


def _digits_source():
    (X, y), _ = gt.digits()
    return X[:480], y[:480]


def test_a_data_source_is_read_by_each_worker_not_shipped(digits, tmp_path):
    """data=a factory: the spec that travels holds no samples, every worker keeps only its
    partitions' rows, and training equals training on the same (X, y) passed whole."""
    import ray.cloudpickle as cloudpickle

    torch.manual_seed(7)
    net = LNBNNet()
    config = gt.TorchConfig(optimizer="adam", optimizer_params={"lr": 1e-2}, batch_size=48)
    sourced = gt.fit(net, _digits_source, SPEC, engine="inprocess", torch_config=config,
                     run=RunConfig(rounds=4, eval_every=0, run_dir=tmp_path / "a"))
    whole = gt.fit(net, digits, SPEC, engine="inprocess", torch_config=config,
                   run=RunConfig(rounds=4, eval_every=0, run_dir=tmp_path / "b"))
    assert torch.allclose(flat(sourced.model), flat(whole.model), rtol=1e-5, atol=1e-6)
    shipped, light = len(cloudpickle.dumps(whole.spec)), len(cloudpickle.dumps(sourced.spec))
    assert light < 20_000 < digits[0].numel() * 4 < shipped
    worker, rows = sourced.spec.build_partitions({0: np.arange(0, 120), 1: np.arange(120, 240)})
    assert worker.X.shape[0] == 240 and worker.y.shape[0] == 240  # its two partitions of four, no more


def test_a_path_is_read_by_the_workers(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((300, 64)).astype(np.float32), rng.integers(0, 10, 300)
    np.savez(tmp_path / "d.npz", X=X, y=y)
    res = gt.fit(LNBNNet(), str(tmp_path / "d.npz"), SPEC, engine="inprocess",
                 run=RunConfig(rounds=2, eval_every=0, run_dir=tmp_path / "r"))
    assert res.spec.source == gt.data.from_path(str(tmp_path / "d.npz"), 3)
    assert res.spec.n_train == 240  # load_data's training split (80 %)


class _Pairs(torch.utils.data.Dataset):
    def __init__(self, X, y):
        self.X, self.y = X, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.X[i], self.y[i]


def _doubling_collate(items):
    return torch.stack([x for x, _ in items]) * 2, torch.stack([t for _, t in items])


def test_a_dataloaders_collate_and_batch_size_are_honoured_and_its_sampler_refused(digits, tmp_path):
    from torch.utils.data import DataLoader, SubsetRandomSampler

    X, y = digits
    torch.manual_seed(8)
    net = LNBNNet()
    config = gt.TorchConfig(optimizer="sgd", optimizer_params={"lr": 0.3})
    loader = DataLoader(_Pairs(X, y), batch_size=40, shuffle=True, drop_last=True, collate_fn=_doubling_collate)
    collated = gt.fit(net, loader, SPEC, engine="inprocess", torch_config=config,
                      run=RunConfig(rounds=3, eval_every=0, run_dir=tmp_path / "a"))
    doubled = gt.fit(net, (X * 2, y), SPEC, engine="inprocess", torch_config=gt.TorchConfig(
        optimizer="sgd", optimizer_params={"lr": 0.3}, batch_size=40),
        run=RunConfig(rounds=3, eval_every=0, run_dir=tmp_path / "b"))
    assert collated.spec.samples_per_job == 40
    assert torch.allclose(flat(collated.model), flat(doubled.model), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="SubsetRandomSampler: gradcode draws each partition's batches itself"):
        gt.fit(net, DataLoader(_Pairs(X, y), batch_size=40, sampler=SubsetRandomSampler(range(100))), SPEC,
               engine="inprocess")
    with pytest.raises(ValueError, match="batch_size=40 and TorchConfig.batch_size=32 disagree"):
        gt.fit(net, loader, SPEC, engine="inprocess", torch_config=gt.TorchConfig(batch_size=32))


def test_a_dataloaders_batch_size_and_torchconfigs_follow_one_rule(digits):
    """Both given and different: refused, naming both (TorchConfig(batch_size=64), the default's
    value, given explicitly included: the loader's 32 won silently); only the loader's: it;
    DataLoader(ds), whose batch_size is its default 1: TorchConfig's (it trained on batches of 1)."""
    from torch.utils.data import DataLoader

    ds = _Pairs(*digits)
    for config in (gt.TorchConfig(batch_size=64), gt.TorchConfig(batch_size=None)):
        with pytest.raises(ValueError, match=rf"DataLoader's batch_size=32 and TorchConfig.batch_size="
                                             rf"{config.batch_size} disagree"):
            gt.Workers(LNBNNet(), DataLoader(ds, batch_size=32), SPEC, torch_config=config, engine="inprocess")
    with pytest.raises(ValueError, match="batch_size=32 and TorchConfig.batch_size=64 disagree"):
        gt.fit(LNBNNet(), DataLoader(ds, batch_size=32), SPEC, torch_config=gt.TorchConfig(batch_size=64),
               engine="inprocess")

    def batch(data, config=None) -> int:
        return gt.Workers(LNBNNet(), data, SPEC, torch_config=config, engine="inprocess").spec.samples_per_job

    assert batch(DataLoader(ds, batch_size=32)) == 32
    assert batch(DataLoader(ds, batch_size=32), gt.TorchConfig(batch_size=32)) == 32
    assert batch(DataLoader(ds)) == 64
    assert batch(DataLoader(ds), gt.TorchConfig(batch_size=48)) == 48


def test_a_dataloader_that_batches_otherwise_than_gradcode_is_refused_by_name(digits):
    """A BatchSampler is refused as a sampler is (it was accepted and replaced by 64 without a
    word); batch_size=None says the loader must batch (it blamed a collate_fn never given)."""
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

    ds = _Pairs(*digits)
    with pytest.raises(ValueError, match="the DataLoader's batch_sampler, a BatchSampler of batch_size=32:"
                                         " gradcode draws each partition's batches itself"):
        gt.fit(LNBNNet(), DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 32, False)), SPEC,
               engine="inprocess")
    with pytest.raises(ValueError, match=r"DataLoader\(batch_size=None\) does not batch .* give the DataLoader a"
                                         r" batch_size"):
        gt.fit(LNBNNet(), DataLoader(ds, batch_size=None), SPEC, engine="inprocess")
    with pytest.raises(ValueError, match="the DataLoader's RandomSampler: gradcode draws"):
        gt.Workers(LNBNNet(), DataLoader(ds, batch_size=32, sampler=RandomSampler(ds, replacement=True)), SPEC,
                   engine="inprocess")


def test_a_dataloaders_options_warn_only_when_set_and_unused(digits):
    """Options at their defaults (shuffle=False, drop_last=False) and those gradcode honours say
    nothing (every DataLoader warned); one set and unused is named."""
    import warnings

    from torch.utils.data import DataLoader

    ds = _Pairs(*digits)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for loader in (DataLoader(ds, batch_size=40), DataLoader(ds, batch_size=40, shuffle=True, drop_last=True),
                       DataLoader(ds, batch_size=40, num_workers=2, persistent_workers=True, timeout=30)):
            gt.Workers(LNBNNet(), loader, SPEC, engine="inprocess")
    with pytest.warns(UserWarning, match=r"DataLoader options gradcode does not use: generator \(each partition's"
                                         r" samples are shuffled from the run's seed"):
        gt.Workers(LNBNNet(), DataLoader(ds, batch_size=40, shuffle=True, generator=torch.Generator()), SPEC,
                   engine="inprocess")


class _Augmented(_Pairs):
    """Pairs with noise from torch's generator drawn as an item is read (a random augmentation),
    each read leaving the reading process's id in ``log``."""

    def __init__(self, X, y, log):
        super().__init__(X, y)
        self.log = log

    def __getitem__(self, i):
        (self.log / str(os.getpid())).touch()
        return self.X[i] + 0.1 * torch.randn_like(self.X[i]), self.y[i]


def test_a_dataloaders_num_workers_read_each_batch_in_its_processes_bit_for_bit(digits, tmp_path):
    """num_workers=2: every gradcode worker's batches are read by the loader's processes (it was
    ignored), and they are the items num_workers=0 reads, bit for bit, augmentation included, so
    training reaches the same weights."""
    from torch.utils.data import DataLoader

    log = tmp_path / "pids"
    log.mkdir()
    config = gt.TorchConfig(optimizer="sgd", optimizer_params={"lr": 0.3})
    runs = {}
    for workers in (0, 2):
        torch.manual_seed(5)
        runs[workers] = gt.fit(LNBNNet(), DataLoader(_Augmented(*digits, log), batch_size=40, num_workers=workers),
                               SPEC, engine="inprocess", torch_config=config,
                               run=RunConfig(rounds=3, eval_every=0, run_dir=tmp_path / str(workers)))
    assert {p.name for p in log.iterdir()} - {str(os.getpid())}  # read in other processes
    assert torch.allclose(flat(runs[2].model), flat(runs[0].model), rtol=1e-6, atol=1e-7)
    spec = runs[2].spec
    assert spec.loader.num_workers == 2 and runs[0].spec.loader is None
    parallel, rows = spec.build_partitions({1: np.arange(120, 240)})
    alone, _ = runs[0].spec.build_partitions({1: np.arange(120, 240)})
    for job in (0, 5):
        batch = parallel.batch_rows(job, 1, rows[1])
        for a, b in zip(parallel.read(batch), alone.read(batch)):
            assert torch.equal(a, b)
    assert parallel._reader is not None and alone._reader is None


def test_nan_results_of_some_partitions_stop_the_run_at_once_naming_the_workers(digits, tmp_path):
    """A regression: NaN results of some partitions reported a RoundTimeoutError 'within round_timeout'
    though the run stopped at once; now a TrainingStopped names the workers and the likely cause."""
    from gradcode.runtime import RoundTimeoutError

    X, y = digits
    X = X.clone()
    order = np.random.default_rng([SPEC.seed, 0]).permutation(len(y))  # fit's training order
    X[order[:120], 0, 0, 0] = -7.0  # partition 0 of 4 (workers 0 and 3 of CRC(4, 1)): the model's output NaN
    with pytest.raises(TrainingStopped, match=r"the results of workers \[0, 3\] of 4 held NaN or infinity and the"
                                              r" finite ones cannot decode") as info:
        gt.fit(NaNOnMarker(LNBNNet()), (X, y), SPEC, engine="inprocess",
               faults=gradcode.runtime.FaultConfig(round_timeout=1000),
               run=RunConfig(rounds=2, eval_every=0, run_dir=tmp_path))
    assert not isinstance(info.value, RoundTimeoutError) and "inputs or targets holding NaN" in str(info.value)


def test_mixed_precision_in_an_own_loop_and_a_grad_scaler_refused(digits, tmp_path):
    """The own-loop recipe for mixed precision: TorchConfig(autocast="float16") makes every worker's
    forward pass float16 with its own loss scaling, and the loop steps the unscaled gradients with
    its optimizer as for float32 (the weights follow fit's with the same settings). A GradScaler
    stepping the Workers' model would divide those gradients by its scale without a word: it is
    refused, naming the recipe; a GradScaler of another model is untouched."""
    torch.manual_seed(1)
    net, start = LNBNNet(), LNBNNet()
    start.load_state_dict(net.state_dict())
    conf = dict(batch_size=48, autocast="float16")
    fitted = gt.fit(net, digits, SPEC, engine="inprocess",
                    run=RunConfig(rounds=3, eval_every=0, run_dir=tmp_path / "f"),
                    torch_config=gt.TorchConfig(optimizer=torch.optim.SGD, optimizer_params={"lr": 0.3}, **conf))
    opt = torch.optim.SGD(start.parameters(), lr=0.3)
    with gt.Workers(start, digits, SPEC, torch_config=gt.TorchConfig(**conf), engine="inprocess",
                    run=RunConfig(rounds=4, run_dir=tmp_path / "loop")) as workers:
        for _ in range(3):
            opt.zero_grad()
            workers.backward()
            opt.step()
        assert torch.allclose(flat(start), flat(fitted.model), rtol=1e-5, atol=1e-6)
        scaler = torch.amp.GradScaler("cpu")
        opt.zero_grad()
        scaler.scale(torch.tensor(workers.backward()))
        with pytest.raises(GradcodeError, match="unscaled already"):
            scaler.step(opt)
        other = nn.Linear(2, 1)
        other_opt = torch.optim.SGD(other.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu")
        scaler.scale(other(torch.ones(1, 2)).sum()).backward()
        scaler.step(other_opt)  # not a Workers' model: GradScaler as usual
