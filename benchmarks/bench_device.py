"""Workers on a GPU, to run where a CUDA GPU is lent. From the repo root:

    python benchmarks/bench_device.py [--only exact|speed] [--rounds 30] [--engines inprocess,ray]
        [--transports channels,collective] [--delay 0.2]

(a) **Exactness** (``--only exact``): the README's model (LayerNorm first, BatchNorm inside) trained
    by :func:`gradcode.torch.fit` with CRC (n = 6, s = 2, two workers 0.2 s late), batch 120, on
    ``device="cuda"`` and on the CPU: the first decoded gradient (one SGD step, lr 1), then the
    weights after ``--rounds`` rounds of Adam (the README's) and of SGD with momentum, as
    ``||w_gpu - w_cpu|| / ||w_cpu||``: float32 rounding (cuDNN's and the CPU's kernels round
    differently; training carries it on). Also :class:`gradcode.torch.Workers` in a loop of one's
    own with the model already on the GPU (the device follows the model), against the GPU fit.
(b) **Speed** (``--only speed``): ResNet-18 (11.2 M parameters, 32x32x3 inputs, 10 classes,
    batch 256), per-round wall time of gradcode on ``cuda`` workers (uncoded and CRC s = 1, n = 4,
    no injected delay; each engine named), against a plain single-process torch step on the same
    GPU (forward, backward and SGD step on the whole batch), medians over the rounds after two of
    warm-up. The in-process engine computes the workers one after another in one process and its
    round times are virtual (each worker's measured compute, as if in parallel: labelled so); on
    Ray the workers share the GPU as actors (a quarter GPU each) and the round times are wall time,
    on each of ``--transports`` (``channels``: the star, every message to the driver;
    ``collective``: the members all-reduce their messages over gloo, from the host, and step
    replicas on their GPU). Beside them, torch DDP run the same way: 4 processes on the same GPU
    (one GPU cannot hold an NCCL group of several ranks, so gloo, as gradcode's collective path),
    64 samples each, SGD, the median time between steps. ``--delay D``: the same runs again with
    one of the 4 workers (a random one each step) sleeping ``D`` seconds before it computes.

Prints one JSON document (and writes it to ``--out`` when given).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time


def readme_net():
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Flatten(), nn.LayerNorm(64), nn.Linear(64, 64), nn.ReLU(),
                                      nn.BatchNorm1d(64), nn.Linear(64, 10))

        def forward(self, x):
            return self.body(x)

    return Net


def bench_exact(rounds: int, gpu: str) -> dict:
    import torch

    import gradcode.torch as gt
    from gradcode.runtime import RunConfig, TrainSpec

    Net = readme_net()
    train, _ = gt.digits()
    torch.manual_seed(0)
    net = Net()
    spec = TrainSpec("crc", workers=6, stragglers=2, delay=0.2)

    def vec(module):
        return torch.nn.utils.parameters_to_vector(module.parameters()).detach().cpu().double()

    def run(device, optimizer, params, n_rounds):
        config = gt.TorchConfig(optimizer=optimizer, optimizer_params=params, batch_size=120, device=device)
        res = gt.fit(net, train, spec, torch_config=config, engine="inprocess",
                     run=RunConfig(rounds=n_rounds, eval_every=0, run_dir=tempfile.mkdtemp()))
        return res

    out, trained = {}, {}
    # one SGD step with lr 1: the weight change is the decoded batch gradient
    steps = {dev: vec(net) - vec(run(dev, torch.optim.SGD, {"lr": 1.0}, 1).model) for dev in ("cpu", gpu)}
    out["first_gradient_rel_diff"] = float((steps[gpu] - steps["cpu"]).norm() / steps["cpu"].norm())
    # the README's training (Adam) and SGD with momentum, `rounds` rounds: ||w_gpu - w_cpu|| / ||w_cpu||
    for name, optimizer, params in (("adam", torch.optim.Adam, {"lr": 1e-2}),
                                    ("sgd", torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})):
        weights = {}
        for device in ("cpu", gpu):
            t0 = time.perf_counter()
            res = run(device, optimizer, params, rounds)
            out[f"{name}_fit_{device}_s"] = time.perf_counter() - t0
            out[f"{name}_loss_{device}"] = res.history[-1]["loss"]
            weights[device] = vec(res.model)
        out[f"{name}_weights_rel_diff"] = float((weights[gpu] - weights["cpu"]).norm() / weights["cpu"].norm())
        out[f"{name}_model_device"] = str(next(res.model.parameters()).device)
        trained[name] = weights[gpu]
    # the user's loop with the model already on the GPU (the device follows the model), Adam
    loop = Net()
    loop.load_state_dict(net.state_dict())
    loop = loop.to(gpu)
    opt = torch.optim.Adam(loop.parameters(), lr=1e-2)
    with gt.Workers(loop, train, spec, torch_config=gt.TorchConfig(batch_size=120), engine="inprocess",
                    run=RunConfig(rounds=rounds, run_dir=tempfile.mkdtemp())) as workers:
        out["workers_device"] = workers.spec.device
        for _ in range(rounds):
            opt.zero_grad()
            workers.backward()
            opt.step()
    out["workers_loop_vs_gpu_fit_rel_diff"] = float((vec(loop) - trained["adam"]).norm() / trained["adam"].norm())
    return out


N_DDP = 4


def _ddp_rank(rank: int, port: int, gpu: str, batch: int, rounds: int, delay: float, out: str) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from gradcode.torch.models import ResNet18

    torch.set_num_threads(1)  # as gradcode's workers
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=N_DDP)
    X, y = resnet_data()
    torch.manual_seed(0)
    net = DistributedDataParallel(ResNet18(10).to(gpu))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    per = batch // N_DDP
    slow = np.random.default_rng(1).integers(0, N_DDP, rounds + 2)
    sync = torch.cuda.synchronize if gpu.startswith("cuda") else (lambda: None)
    stamps = []
    for step in range(rounds + 2):
        lo = (step * batch + rank * per) % (len(X) - per)
        Xb, yb = X[lo:lo + per].to(gpu), y[lo:lo + per].to(gpu)
        if delay > 0 and slow[step] == rank:
            time.sleep(delay)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(Xb), yb).backward()  # the all-reduce is in here
        opt.step()
        sync()
        stamps.append(time.perf_counter())
    if rank == 0:
        np.save(out, np.diff(stamps[1:]))
    dist.destroy_process_group()


def ddp_step_ms(gpu: str, batch: int, rounds: int, delay: float) -> float:
    """torch DDP's step (ms, median after two warm-up steps): ``N_DDP`` processes on ``gpu``, gloo."""
    import os

    import numpy as np
    import torch.multiprocessing as mp
    from bench_collective import free_port

    out = tempfile.mktemp(suffix=".npy")
    mp.spawn(_ddp_rank, args=(free_port(), gpu, batch, rounds, delay, out), nprocs=N_DDP, join=True)
    steps = np.load(out)
    os.unlink(out)
    return 1e3 * statistics.median(steps[1:])


#: ResNet-18's samples
N_SAMPLES = 4096


def resnet_data():
    import torch

    g = torch.Generator().manual_seed(0)
    return torch.randn(N_SAMPLES, 3, 32, 32, generator=g), torch.randint(0, 10, (N_SAMPLES,), generator=g)


def bench_speed(rounds: int, engines: list[str], gpu: str, transports: list[str] = ("channels",),
                delay: float = 0.0, batch: int = 256) -> dict:
    import torch

    import gradcode.torch as gt
    from gradcode.runtime import ClusterConfig, RunConfig, TrainSpec
    from gradcode.torch.models import ResNet18

    X, y = resnet_data()
    torch.manual_seed(0)
    net = ResNet18(10)
    out = {"params": sum(p.numel() for p in net.parameters()), "batch": batch, "rounds": rounds}

    # the plain step on the GPU
    model = ResNet18(10).to(gpu)
    model.load_state_dict(net.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    Xg, yg = X[:batch].to(gpu), y[:batch].to(gpu)
    sync = torch.cuda.synchronize if gpu.startswith("cuda") else (lambda: None)
    times = []
    for i in range(rounds + 2):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(Xg), yg).backward()
        opt.step()
        sync()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    out["plain_gpu_step_ms"] = 1e3 * statistics.median(times)

    delays = (0.0, delay) if delay > 0 else (0.0,)
    for d in delays:
        late = f"_late{d:g}" if d else ""
        out[f"ddp{late}_step_ms"] = ddp_step_ms(gpu, batch, rounds, d)
        print(f"DDP, {N_DDP} processes on {gpu}{', one late ' + str(d) + ' s' if d else ''}:"
              f" {out[f'ddp{late}_step_ms']:.1f} ms", flush=True)
    for engine in engines:
        if engine == "ray":
            try:
                import ray  # noqa: F401
            except ImportError:
                out["ray"] = "not installed here"
                continue
        for d in delays:
            late = f"_late{d:g}" if d else ""
            for code, s in (("uncoded", 0), ("crc", 1)):
                for transport in transports if engine == "ray" else ("",):
                    spec = TrainSpec(code, workers=4, stragglers=max(s, 1 if d else 0), delay=d, seed=0)
                    config = gt.TorchConfig(optimizer="sgd", optimizer_params={"lr": 0.01}, batch_size=batch,
                                            device=gpu)
                    t0 = time.perf_counter()
                    res = gt.fit(net, (X, y), spec, torch_config=config, engine=engine,
                                 cluster=ClusterConfig(transport=transport) if transport else None,
                                 run=RunConfig(rounds=rounds + 3, eval_every=0, run_dir=tempfile.mkdtemp()))
                    total = time.perf_counter() - t0
                    walls = [h["time"] for h in res.history[2:-1]]  # the last round also fetches the parameters
                    key = f"{engine}{'_' + transport if transport else ''}_{code}{late}"
                    ms = 1e3 * statistics.median(walls)
                    out[f"{key}_round_ms"] = ms
                    out[f"{key}_vs_plain"] = ms / out["plain_gpu_step_ms"]
                    out[f"{key}_vs_ddp"] = ms / out[f"ddp{late}_step_ms"]
                    out[f"{key}_total_s"] = total  # start-up included
                    print(f"{key}: {ms:.1f} ms, {ms / out[f'ddp{late}_step_ms']:.2f}x DDP", flush=True)
                    if engine == "inprocess":  # its round times are virtual: each worker's compute as if in parallel
                        out[f"{key}_round_ms"] = f"{ms:.1f} (virtual clock)"
                        out[f"{key}_vs_plain"] = f"{out[f'{key}_vs_plain']:.2f} (virtual clock)"
                        out[f"{key}_vs_ddp"] = f"{out[f'{key}_vs_ddp']:.2f} (virtual clock)"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["exact", "speed"])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--engines", default="inprocess,ray")
    ap.add_argument("--transports", default="channels,collective", help="the Ray engine's transports")
    ap.add_argument("--batch", type=int, default=256, help="ResNet-18's batch (smaller: a quick dry run)")
    ap.add_argument("--delay", type=float, default=0.0, help="also run with one worker this many seconds late")
    ap.add_argument("--out")
    ap.add_argument("--device", default="cuda", help="the workers' device ('cpu': a dry run of this script)")
    args = ap.parse_args()
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("bench_device.py needs a CUDA GPU (torch.cuda.is_available() is False here)")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    doc = {"machine": f"{platform.node()} {platform.processor()}", "gpu": gpu,
           "torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}
    if args.only in (None, "exact"):
        doc["exact"] = bench_exact(args.rounds, args.device)
        print(json.dumps(doc["exact"], indent=1), flush=True)
    if args.only in (None, "speed"):
        doc["speed"] = bench_speed(args.rounds, args.engines.split(","), args.device, args.transports.split(","),
                                   args.delay, args.batch)
        print(json.dumps(doc["speed"], indent=1), flush=True)
    text = json.dumps(doc, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
