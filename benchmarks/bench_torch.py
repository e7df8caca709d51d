"""Benchmarks of torch training with gradient codes. Run from the repo root:

    python benchmarks/bench_torch.py [--only overhead|ray] [--repeats 20]

(a) **Master overhead** (``--only overhead``): a small CNN (``SmallCNN``, 28x28 images, 10 classes)
    at n = 8 workers, CRC s = 2, batch 256. Side by side, interleaved: a plain single-process torch
    step on the batch (forward, backward, Adam step) and what the master adds per round: decoding
    the n - s float32 messages (``code.decode_report``, float64, checked bound) plus the Adam step
    on the decoded gradient (``TorchOptimizer.step``: dividing by the batch, setting ``.grad``, the
    step, the buffers). Target: overhead / plain step <= 10 %.
(b) **A ResNet-18-sized gradient on Ray** (``--only ray``): 11.2 M float32 numbers per message,
    n = 4 workers, uncoded (each message one partial, no compute), through gradcode's runtime,
    against the Ray floor measured in the same session: one ``ray.put`` of the float32 parameters
    and n actor calls returning a float32 vector of the same size, and a gloo all-reduce of the same
    bytes over n processes (``torch.distributed``: what DDP moves each step). Target: round <= 1.5x
    each.
    Also the master's peak traced memory (``tracemalloc``: numpy's allocations) over the run, in
    units of one message, against what the round must hold (n messages, the float64 sum, the
    parameters).
(c) **Memory per worker** (``--only data``): a CIFAR-size data set (20 000 x 3 x 32 x 32 float32,
    246 MB) for n = 4 Ray workers, CRC s = 1 (each worker holds 2 of the 4 partitions: half the
    samples), the data given as ``(X, y)`` tensors (shipped inside the spec to every worker) and
    as a source (a factory each worker calls, keeping only its partitions' rows). Each worker's
    resident and private memory (``/proc/PID/smaps_rollup``: resident counts the object store's
    shared pages it read) after its first round, and the pickled spec each receives; a
    baseline with 256 samples gives what a worker holds without data (Ray, torch, the model).

On a 2-core machine shared with other work the absolute numbers are noisy; the ratios measured
side by side are what to read. ``OMP_WAIT_POLICY=PASSIVE`` is set (see below) unless given.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

# torch's OpenMP threads otherwise spin after each parallel op, and on 2 cores they slow whatever the
# process does next (the master's step ran 7x slower right after a convolution); a master process
# does no convolutions, so neither spin here: both sides are measured with passive waits
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from _timing import interleaved, memory_mb  # noqa: E402

D_RESNET18 = 11_220_132  # ResNet-18 for 100 classes (SGC App. L: 11.2 M parameters)


def bench_overhead(repeats: int) -> dict:
    import torch

    import gradcode
    from gradcode.torch.models import SmallCNN
    from gradcode.torch.problem import TorchOptimizer, TorchSpec, copy_factory

    torch.manual_seed(0)
    n, s, batch = 8, 2, 256
    X = torch.rand(2048, 1, 28, 28)
    y = torch.randint(0, 10, (2048,))
    model = SmallCNN((1, 28, 28), 10, channels=16)
    code = gradcode.make_code("crc", n=n, s=s, seed=0)
    spec = TorchSpec(model=copy_factory(model), samples=(X, y), order=np.arange(2048),
                     loss=torch.nn.functional.cross_entropy, loss_reduction="mean", batch_size=batch,
                     sizes=np.asarray(code.partition_sizes), seed=0, wire_dtype=np.float32)
    opt = TorchOptimizer(spec, lambda p: torch.optim.Adam(p, lr=1e-3))
    x = opt.layout.flatten(opt.module, loss=0.0)
    opt.init(x)
    d = x.size
    rng = np.random.default_rng(0)
    msgs = {w: rng.standard_normal(d).astype(np.float32) for w in range(s, n)}
    state = {"x": x}

    def master():
        g = code.decode_report(msgs, dim=d, rtol=1.0).gradient
        state["x"], _ = opt.step(state["x"], g, None, 0)

    plain_model = SmallCNN((1, 28, 28), 10, channels=16)
    plain_opt = torch.optim.Adam(plain_model.parameters(), lr=1e-3)
    Xb, yb = X[:batch], y[:batch]

    def plain():
        plain_opt.zero_grad()
        torch.nn.functional.cross_entropy(plain_model(Xb), yb).backward()
        plain_opt.step()

    for _ in range(3):
        master()
        plain()
    t_master, t_plain = interleaved([master, plain], repeats)
    decode = statistics.median(_times(lambda: code.decode_report(msgs, dim=d, rtol=1.0), repeats))
    return {"d": d, "n": n, "s": s, "batch": batch, "plain step ms": 1e3 * t_plain,
            "master overhead ms": 1e3 * t_master, "of which decode ms": 1e3 * decode,
            "overhead / plain step": t_master / t_plain}


def _times(fn, repeats):
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


class ConstProblem32:
    """A problem whose partial gradient is a fixed float32 vector: the round is all transport."""

    def __init__(self, d: int):
        self.dim, self.n_train = d, 1024
        self._g = np.full(d, 1e-3, dtype=np.float32)

    def gradient(self, params, rows):
        return self._g

    def full_gradient(self, x, g):
        return g

    def objective(self, x):
        return 0.0

    def init_params(self, rng=None):
        return np.zeros(self.dim, dtype=np.float32)


class ConstSpec32:
    def __init__(self, d: int):
        self.d = d

    def build(self):
        return ConstProblem32(self.d), None


class SGD32:
    """``x - lr g`` kept in float32 (the parameters travel as float32)."""

    def init(self, x):
        return None

    def step(self, x, g, state, t):
        return (x - np.float32(1e-3) * np.asarray(g, dtype=np.float32)).astype(np.float32), state

    def __repr__(self):
        return "SGD32"


def _ray_floor(n: int, d: int, repeats: int) -> float:
    import ray

    @ray.remote(num_cpus=0)
    class Echo:
        def __init__(self, d):
            self.out = np.ones(d, dtype=np.float32)

        def run(self, x):
            return self.out

    actors = [Echo.remote(d) for _ in range(n)]
    ray.get([a.run.remote(np.zeros(1)) for a in actors])
    x = np.zeros(d, dtype=np.float32)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ref = ray.put(x)
        ray.get([a.run.remote(ref) for a in actors])
        times.append(time.perf_counter() - t0)
    for a in actors:
        ray.kill(a)
    return float(np.median(times))


def _allreduce_rank(rank: int, n: int, d: int, repeats: int, init: str, out: str) -> None:
    """One process of the gloo all-reduce: what DDP moves each step for d float32 parameters."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    x = torch.full((d,), 1e-3)
    times = []
    for _ in range(repeats + 2):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        with open(out, "w") as fh:
            fh.write(str(statistics.median(times[2:])))
    dist.destroy_process_group()


def _gloo_allreduce(n: int, d: int, repeats: int) -> float:
    """Median seconds of a gloo all-reduce of d float32 over n processes on this machine (the
    bytes DDP's backward moves), rank 0's clock, after a barrier."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "allreduce")
        init = f"file://{Path(tmp) / 'rendezvous'}"
        mp.start_processes(_allreduce_rank, args=(n, d, repeats, init, out), nprocs=n, start_method="spawn")
        return float(Path(out).read_text())


def bench_ray(repeats: int) -> dict:
    from gradcode.runtime import ClusterConfig, FaultConfig, RunConfig, TrainSpec
    from gradcode.runtime.cluster import init_ray
    from gradcode.runtime.training import run_training

    n, d = 4, D_RESNET18
    allreduce = _gloo_allreduce(n, d, repeats)
    init_ray(num_cpus=2)
    floor = _ray_floor(n, d, repeats)
    with tempfile.TemporaryDirectory() as tmp:
        spec = TrainSpec(scheme="uncoded", workers=n, data=ConstSpec32(d), optimizer=[SGD32()])
        tracemalloc.start()
        res = run_training(spec, cluster=ClusterConfig(), faults=FaultConfig(), run=RunConfig(
            rounds=repeats + 2, eval_every=0, run_dir=Path(tmp) / "run"))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    rnd = float(np.median(res.round_times[2:]))
    # the master's own passes over the data, timed alone in this process: the decode (n float32
    # messages summed into float64, the bound's norms measured: plain arrays) and the optimizer step
    import gradcode

    code = gradcode.make_code("uncoded", n=n)
    msgs = {w: np.full(d, 1e-3, dtype=np.float32) for w in range(n)}
    decode = statistics.median(_times(lambda: code.decode(msgs, dim=d), max(3, repeats // 4)))
    g = code.decode(msgs, dim=d)
    x = np.zeros(d, dtype=np.float32)
    step = statistics.median(_times(lambda: SGD32().step(x, g, None, 0), max(3, repeats // 4)))
    message = 4 * d
    return {"n": n, "d": d, "MB per message": message / 1e6, "round ms": 1e3 * rnd, "ray floor ms": 1e3 * floor,
            "round / floor": rnd / floor, "gloo all-reduce ms": 1e3 * allreduce, "round / all-reduce": rnd / allreduce,
            "decode ms": 1e3 * decode, "step ms": 1e3 * step,
            "(round - decode - step) / floor": (rnd - decode - step) / floor,
            "master peak (messages)": peak / message,
            "held by the round (messages)": n + 2 + 1}  # n messages, the float64 sum (2), the params (1)


N_DATA = 20_000


def cifar_size_data():
    """The memory benchmark's data: a module-level factory, so that it travels as code."""
    import torch

    g = torch.Generator().manual_seed(0)
    return torch.randn(N_DATA, 3, 32, 32, generator=g), torch.randint(0, 10, (N_DATA,), generator=g)


def bench_data() -> dict:
    import ray.cloudpickle as cloudpickle
    import torch

    import gradcode.torch as gt
    from gradcode.runtime import FaultConfig, RunConfig, TrainSpec
    from gradcode.runtime.cluster import ray_session
    from gradcode.torch.models import SmallCNN

    out = {"data MB": N_DATA * 3 * 32 * 32 * 4 / 2**20}
    with ray_session():
        for label, data in (("baseline (256 samples)", tuple(t[:256].clone() for t in cifar_size_data())),
                            ("source", cifar_size_data), ("(X, y) shipped", cifar_size_data())):
            net = SmallCNN((3, 32, 32), 10)
            # max_restarts=0: fresh actors for each (a pooled actor keeps its high-water memory)
            with gt.Workers(net, data, TrainSpec("crc", workers=4, stragglers=1),
                            torch_config=gt.TorchConfig(batch_size=64),
                            faults=FaultConfig(max_restarts=0),
                            run=RunConfig(rounds=1, run_dir=tempfile.mkdtemp())) as workers:
                workers.backward()
                mem = [memory_mb(pid) for pid in workers._session.engine.pids()]
                out[f"{label}: spec MB"] = len(cloudpickle.dumps(workers.spec)) / 2**20
            out[f"{label}: worker RSS MB (median)"] = statistics.median(m[0] for m in mem)
            out[f"{label}: worker private MB (median)"] = statistics.median(m[1] for m in mem)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("overhead", "ray", "data"))
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores,"
          f" {time.strftime('%Y-%m-%d')}", flush=True)
    if args.only in (None, "overhead"):
        print("overhead:", {k: round(v, 4) if isinstance(v, float) else v for k, v in bench_overhead(args.repeats).items()},
              flush=True)
    if args.only in (None, "ray"):
        print("ray:", {k: round(v, 4) if isinstance(v, float) else v for k, v in bench_ray(args.repeats).items()},
              flush=True)
    if args.only in (None, "data"):
        print("data:", {k: round(v, 1) for k, v in bench_data().items()}, flush=True)


if __name__ == "__main__":
    main()
