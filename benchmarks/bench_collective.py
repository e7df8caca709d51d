"""The collective path against the star and against torch DDP: a large model's training step.

    python benchmarks/bench_collective.py [--rounds 30] [--repeats 1] [--delay 0.2] [--hidden 2862 [1024 ...]]
        [--schemes uncoded crc [sr-sgc]] [--workers 4 [8 16]] [--no-compute] [--memory]

Set-up: an MLP 1024 -> H -> H -> 10 (H = 2862: 11.15 M float32
parameters), 4 workers, batch 64 (16 a worker), SGD (lr 0.01), random inputs and labels (seed 0),
on this machine's cores. ``--workers 4 8 16``: each number of workers in turn, 16 samples a
worker. Trainers, run one after the other:

* torch DDP: 4 processes (``torch.multiprocessing``), gloo, ``DistributedDataParallel``, one
  thread each; rank ``r`` takes at step ``t`` the samples gradcode's partition ``r`` contributes
  to job ``t`` (``TorchSpec.batch_indices``), so every trainer steps on the same batches;
* gradcode ``uncoded`` and ``crc`` (s = 1) on the star path (``--transport channels``: every
  message to the driver, which decodes, steps and sends the parameters) and on the collective
  path (``--transport collective``: the members all-reduce their weighted messages over gloo and
  step their own replicas), Ray's embedded cluster, workers of one thread each.

``--schemes sr-sgc`` adds SR-SGC (B = 1, W = 2, lambda = 1: s = 1, T = 1) on both paths, two
models (SGC App. I: ``models > T``; job ``t`` steps model ``t mod 2``, so its weights are compared
only between its two paths, not with DDP's): a job's messages may wait a round on the workers for
its re-attempts, and a round reduces the jobs it finishes in one all-reduce.

Each trainer runs ``--rounds`` steps twice: without delays, and with one of the 4 workers (a random
one each step) sleeping ``--delay`` seconds before it computes (DDP waits for it in every
all-reduce; CRC decodes without it). The measure is the median time between consecutive steps
after 5 warm-up steps (gradcode's last, which also fetches the trained parameters, left out),
medians over ``--repeats``; ratios are to DDP's step in the same condition.
Without delays the final weights of every trainer are compared with DDP's (the same batches and
initial weights: they differ by float32 rounding only) and with each other. Several ``--hidden``
widths run one after the other in the same session (``--delay 0``: without the delayed runs), the
table giving each collective run's ratio to the star's at the same width: where the collective
path starts to gain.

``--no-compute`` replaces the MLP by a model of the same number of parameters whose gradient
costs a memset (a linear classifier and a vector only ``N_OUT`` of whose values reach the output:
:func:`bulk`), so a step is what the path itself costs, and times a gloo all-reduce of that
gradient's vector over the same number of processes beside it (``run_allreduce``; the column
"/ all-reduce"): the floor of any synchronous data-parallel step, what a round of the collective
path is measured against on a machine where the driver is not the bottleneck.

``--memory`` times nothing: it runs each scheme on both paths at each width without delays and
reports the driver's peak memory over the rounds after the warm-up (``tracemalloc``, which sees
numpy's arrays; torch's own are not traced, and the driver holds none a round on either path),
above what it held as they began: the star's decode and step hold a few gradient-sized vectors,
the collective's driver none.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import numpy as np  # noqa: E402

N_WORKERS, BATCH, LR, N_SAMPLES, N_IN, N_OUT, WARMUP = 4, 64, 0.01, 4096, 1024, 10, 5


def model(hidden: int, no_compute: bool = False):
    """The MLP ``1024 -> hidden -> hidden -> 10``, or with ``no_compute`` a model of the same number
    of parameters whose gradient costs nothing to compute (:func:`bulk`)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(N_IN, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                        nn.Linear(hidden, N_OUT))
    return bulk(sum(p.numel() for p in mlp.parameters())) if no_compute else mlp


def bulk(params: int):
    """A linear classifier and a vector that only its first ``N_OUT`` values reach the output
    through, ``params`` parameters in all: its gradient is a dense vector of the MLP's size (the
    bytes every path moves) at the cost of a memset, so a step is the path's own cost."""
    import torch
    from torch import nn

    class Bulk(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(N_IN, N_OUT)
            self.bulk = nn.Parameter(torch.zeros(params - N_IN * N_OUT - N_OUT))

        def forward(self, x):
            return self.head(x) + self.bulk[:N_OUT]

    torch.manual_seed(0)
    return Bulk()


def data():
    import torch

    g = torch.Generator().manual_seed(0)
    return torch.randn(N_SAMPLES, N_IN, generator=g), torch.randint(0, N_OUT, (N_SAMPLES,), generator=g)


def batch_of(n: int) -> int:
    """The batch of ``n`` workers: ``BATCH / N_WORKERS`` samples a worker (16; 64 at n = 4)."""
    return BATCH // N_WORKERS * n


def batches(n: int = N_WORKERS):
    """gradcode's batches for seed 0 and ``n`` equal partitions (``batch_indices(t, r)``)."""
    from gradcode.torch.problem import TorchSpec

    order = np.random.default_rng([0, 0]).permutation(N_SAMPLES)  # fit's training order for seed 0
    return TorchSpec(model=None, samples=None, order=order, loss=None, loss_reduction="mean", batch_size=batch_of(n),
                     sizes=np.full(n, 1 / n), seed=0, wire_dtype=np.float32)


def slow_workers(rounds: int, n: int = N_WORKERS) -> list[int]:
    return np.random.default_rng(1).integers(0, n, rounds).tolist()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------ DDP


def _ddp_rank(rank: int, n: int, port: int, hidden: int, no_compute: bool, rounds: int, delay: float,
              out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
    net = DistributedDataParallel(model(hidden, no_compute))
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    X, y = data()
    spec, slow = batches(n), slow_workers(rounds, n)
    stamps = []
    for step in range(rounds):
        idx = torch.from_numpy(spec.batch_indices(step, rank))
        if delay > 0 and slow[step] == rank:
            time.sleep(delay)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(X[idx]), y[idx]).backward()  # the all-reduce is in here
        opt.step()
        stamps.append(time.perf_counter())
    if rank == 0:
        flat = torch.nn.utils.parameters_to_vector(net.module.parameters()).detach().numpy()
        np.savez(out, stamps=np.array(stamps), params=flat)
    dist.destroy_process_group()


def run_ddp(hidden: int, rounds: int, delay: float, n: int = N_WORKERS,
            no_compute: bool = False) -> tuple[float, np.ndarray]:
    import torch.multiprocessing as mp

    out = tempfile.mktemp(suffix=".npz")
    mp.spawn(_ddp_rank, args=(n, free_port(), hidden, no_compute, rounds, delay, out), nprocs=n, join=True)
    res = np.load(out)
    os.unlink(out)
    return statistics.median(np.diff(res["stamps"][WARMUP:])), res["params"]


def _allreduce_rank(rank: int, n: int, port: int, dim: int, rounds: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
    x = torch.zeros(dim)
    times = []
    for _ in range(rounds):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - t0)
    gathered = [None] * n
    dist.all_gather_object(gathered, times[WARMUP:])
    if rank == 0:
        np.save(out, np.max(gathered, axis=0))
    dist.destroy_process_group()


def run_allreduce(dim: int, rounds: int, n: int = N_WORKERS) -> float:
    """The median time of one gloo all-reduce of ``dim`` float32 over ``n`` processes after the
    warm-up, each between two barriers, the slowest rank's (as ``bench_step_floor.py`` times it)."""
    import torch.multiprocessing as mp

    out = tempfile.mktemp(suffix=".npy")
    mp.spawn(_allreduce_rank, args=(n, free_port(), dim, rounds, out), nprocs=n, join=True)
    times = np.load(out)
    os.unlink(out)
    return statistics.median(times)


# ------------------------------------------------------------------------------------ gradcode


def run_gradcode(scheme: str, transport: str, hidden: int, rounds: int, delay: float,
                 memory: bool = False, n: int = N_WORKERS,
                 no_compute: bool = False) -> tuple[float, np.ndarray, float | None]:
    """``(median step, final weights, the driver's peak traced memory in bytes over the rounds
    after the warm-up, above what it held when they began)``; the memory is traced
    (``tracemalloc``: numpy's arrays and Python's objects) only with ``memory``, else None."""
    import tracemalloc

    import torch

    import gradcode.torch as gt
    from gradcode.runtime import ClusterConfig, RunConfig, TrainSpec

    # one worker delayed when delay > 0; CRC tolerates one (uncoded, which tolerates none, waits)
    sequential = {"models": 2, "scheme_params": {"B": 1, "W": 2, "lam": 1}} if scheme == "sr-sgc" else {}
    spec = TrainSpec(scheme, workers=n, stragglers=1 if delay > 0 or scheme != "uncoded" else 0, delay=delay,
                     seed=0, **sequential)
    stamps: list[float] = []
    traced: list[float] = []

    def record(rec):
        stamps.append(time.perf_counter())
        if memory and len(stamps) == WARMUP:
            tracemalloc.reset_peak()
            traced.append(tracemalloc.get_traced_memory()[0])
        elif memory and len(stamps) == rounds - 1:  # before the last round's fetch of the parameters
            traced.append(tracemalloc.get_traced_memory()[1])

    if memory:
        tracemalloc.start()
    try:
        with tempfile.TemporaryDirectory() as run_dir:
            res = gt.fit(model(hidden, no_compute), data(), spec,
                         torch_config=gt.TorchConfig(optimizer="sgd", optimizer_params={"lr": LR},
                                                     batch_size=batch_of(n)),
                         run=RunConfig(rounds=rounds, eval_every=0, run_dir=run_dir),
                         cluster=ClusterConfig(transport=transport), engine="ray", callback=record)
    finally:
        if memory:
            tracemalloc.stop()
    flat = torch.nn.utils.parameters_to_vector(res.model.parameters()).detach().numpy()
    peak = traced[1] - traced[0] if len(traced) == 2 else None
    # the last round also fetches the parameters from a worker (the run's result): not a step
    return statistics.median(np.diff(stamps[WARMUP:-1])), flat, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--hidden", type=int, nargs="+", default=[2862],
                    help="hidden widths, one model each (several: where the collective path starts to gain)")
    ap.add_argument("--workers", type=int, nargs="+", default=[N_WORKERS],
                    help="numbers of workers (DDP's processes), each run in turn; 16 samples a worker")
    ap.add_argument("--no-compute", action="store_true",
                    help="a model of the same size whose gradient costs nothing (the step is the path's own"
                         " cost), and a gloo all-reduce of its gradient alone beside it")
    ap.add_argument("--only", choices=("ddp", "gradcode"), help="one kind of trainer")
    ap.add_argument("--memory", action="store_true",
                    help="instead of timing: the driver's peak traced memory over the rounds, both paths, each width")
    ap.add_argument("--schemes", nargs="+", choices=("uncoded", "crc", "sr-sgc"), default=["uncoded", "crc"],
                    help="gradcode's schemes, each on both paths")
    args = ap.parse_args()
    if args.rounds < WARMUP + 3:
        ap.error(f"--rounds must be at least {WARMUP + 3}: the median is over the steps after {WARMUP} of warm-up,"
                 " less the last (which also fetches the parameters)")
    import warnings

    from gradcode.runtime import ClusterConfig
    from gradcode.runtime.cluster import ray_session

    warnings.simplefilter("ignore")
    print(f"# {platform.node()} {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}; workers {args.workers}, batch"
          f" {BATCH // N_WORKERS} a worker, SGD, {args.rounds} rounds, median step after {WARMUP},"
          f" {args.repeats} repeat(s){', no compute' if args.no_compute else ''}", flush=True)
    trainers = [] if args.only == "gradcode" else [("ddp", None)]
    if args.only != "ddp":
        trainers += [(s, t) for s in args.schemes for t in ("channels", "collective")]
    if args.memory:
        return driver_memory(args)
    delays = (0.0, args.delay) if args.delay > 0 else (0.0,)
    times: dict = {}
    weights: dict = {}
    allreduce: dict = {}
    with ray_session(ClusterConfig()):
        for hidden in args.hidden:
            params = sum(p.numel() for p in model(hidden, args.no_compute).parameters())
            print(f"{'a model of' if args.no_compute else 'MLP'} {N_IN}-{hidden}-{hidden}-{N_OUT}: {params / 1e6:.2f} M"
                  " parameters", flush=True)
            for n in args.workers:
                if args.no_compute:  # the gradient's vector: the parameters, the loss and the batch size
                    allreduce[(n, hidden)] = run_allreduce(params + 2, args.rounds, n)
                    print(f"  n = {n:2d} gloo all-reduce of {params + 2} float32: {1e3 * allreduce[(n, hidden)]:8.1f}"
                          " ms", flush=True)
                for _ in range(args.repeats):
                    for delay in delays:
                        for scheme, transport in trainers:
                            if scheme == "ddp":
                                step, w = run_ddp(hidden, args.rounds, delay, n, args.no_compute)
                            else:
                                step, w, _ = run_gradcode(scheme, transport, hidden, args.rounds, delay, n=n,
                                                          no_compute=args.no_compute)
                            key = (n, hidden, scheme, transport, delay)
                            times.setdefault(key, []).append(step)
                            if delay == 0:
                                weights[key] = w
                            print(f"  n = {n:2d} {scheme:8s} {transport or '':10s} delay {delay:.1f}: step"
                                  f" {1e3 * step:8.1f} ms", flush=True)
    print("\n| n | hidden | trainer | path | delay (s) | step (ms) | / DDP | / all-reduce | collective / star |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (n, hidden, scheme, transport, delay), ts in times.items():
        med = statistics.median(ts)
        ddp = statistics.median(times.get((n, hidden, "ddp", None, delay), [float("nan")]))
        star = times.get((n, hidden, scheme, "channels", delay)) if transport == "collective" else None
        vs = f"{med / statistics.median(star):.2f}" if star else ""
        ar = f"{med / allreduce[(n, hidden)]:.2f}x" if (n, hidden) in allreduce else ""
        print(f"| {n} | {hidden} | {scheme} | {transport or 'DDP (gloo)'} | {delay:g} | {1e3 * med:.1f} |"
              f" {med / ddp:.2f}x | {ar} | {vs} |")
    for n in args.workers:
        for hidden in args.hidden:
            _weights(n, hidden, weights)


def driver_memory(args) -> None:
    """``--memory``: each scheme on both paths at each width, no delays; the driver's peak traced
    memory over the rounds after the warm-up (before the last round's fetch of the parameters),
    against one vector of the model's parameters."""
    from gradcode.runtime import ClusterConfig
    from gradcode.runtime.cluster import ray_session

    print("\n| hidden | parameters | one vector (MB) | scheme | path | driver's peak over the rounds (MB) |")
    print("|---|---|---|---|---|---|")
    with ray_session(ClusterConfig()):
        for hidden in args.hidden:
            params = sum(p.numel() for p in model(hidden).parameters())
            for scheme in args.schemes:
                for transport in ("channels", "collective"):
                    _, _, peak = run_gradcode(scheme, transport, hidden, args.rounds, 0.0, memory=True)
                    print(f"| {hidden} | {params / 1e6:.2f} M | {4 * params / 1e6:.1f} | {scheme} | {transport} |"
                          f" {peak / 1e6:.2f} |", flush=True)


def _weights(n: int, hidden: int, weights: dict) -> None:
    weights = {key[2:]: w for key, w in weights.items() if key[:2] == (n, hidden)}
    ref = weights.get(("ddp", None, 0.0))
    if ref is not None:
        print(f"\nn = {n}, hidden {hidden}: final weights, max |w - w_DDP| / max |w_DDP| (no delays):")
        for key, w in weights.items():
            if key[0] not in ("ddp", "sr-sgc"):  # SR-SGC trains two models on alternate batches
                print(f"  {key[0]} {key[1]}: {np.abs(w - ref).max() / np.abs(ref).max():.2e}")
    for scheme in ("crc", "sr-sgc"):
        star, coll = weights.get((scheme, "channels", 0.0)), weights.get((scheme, "collective", 0.0))
        if star is not None and coll is not None:
            print(f"  {scheme} collective against {scheme} star: {np.abs(coll - star).max() / np.abs(star).max():.2e}")


if __name__ == "__main__":
    sys.exit(main())
