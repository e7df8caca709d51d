"""The floor under a collective-path step: what one training step costs in its parts, on this
machine, for the 11.15 M-parameter MLP of ``bench_collective.py``.

    python benchmarks/bench_step_floor.py [--repeats 20]

Four processes (``torch.multiprocessing``, one thread each, as the Ray workers and DDP's ranks
run), each timing, step by step, with a barrier between the parts so that each part is timed
alone:

* ``compute``: forward and backward of its 16 samples (a worker's share of a batch of 64);
* ``flatten``: the gradient into one float32 vector (what a worker's message is);
* ``all-reduce``: a gloo all-reduce of that vector over the 4 processes (the collective path's
  reduction; DDP's is the same bytes, in buckets, overlapped with the backward pass);
* ``step``: an SGD step of the model from the summed vector (every replica takes one);
* ``ddp``: a whole DDP step (``DistributedDataParallel``, gloo), for comparison.

The sum of the first four is a lower bound on a step that computes, then reduces, then steps,
with nothing else (no driver, no notes, no checks); DDP's step is below that sum by what its
overlap of the all-reduce with the backward pass saves. Medians over ``--repeats`` steps after 3
warm-up steps, the slowest rank's time of each part.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_collective import BATCH, LR, N_WORKERS, data, free_port, model  # noqa: E402

HIDDEN, WARMUP = 2862, 3


def _rank(rank: int, port: int, repeats: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=N_WORKERS)
    net = model(HIDDEN)
    params = list(net.parameters())
    opt = torch.optim.SGD(params, lr=LR)
    X, y = data()
    share = BATCH // N_WORKERS
    idx = torch.arange(rank * share, (rank + 1) * share)
    times: dict[str, list[float]] = {k: [] for k in ("compute", "flatten", "all-reduce", "step", "ddp")}

    def timed(name, fn):
        dist.barrier()
        start = time.perf_counter()
        result = fn()
        times[name].append(time.perf_counter() - start)
        return result

    for _ in range(WARMUP + repeats):
        opt.zero_grad()
        timed("compute", lambda: torch.nn.functional.cross_entropy(net(X[idx]), y[idx]).backward())
        flat = timed("flatten", lambda: torch.cat([p.grad.reshape(-1) for p in params]))
        timed("all-reduce", lambda: dist.all_reduce(flat))

        def step():
            off = 0
            for p in params:
                p.grad.copy_(flat[off:off + p.numel()].view_as(p))
                off += p.numel()
            opt.step()
        timed("step", step)
    ddp = DistributedDataParallel(model(HIDDEN))
    dopt = torch.optim.SGD(ddp.parameters(), lr=LR)

    def ddp_step():
        dopt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(X[idx]), y[idx]).backward()
        dopt.step()
    for _ in range(WARMUP + repeats):
        timed("ddp", ddp_step)
    gathered = [None] * N_WORKERS
    dist.all_gather_object(gathered, {k: v[WARMUP:] for k, v in times.items()})
    if rank == 0:
        np.savez(out, **{k: np.max([g[k] for g in gathered], axis=0) for k in times})
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    import torch.multiprocessing as mp

    out = tempfile.mktemp(suffix=".npz")
    mp.spawn(_rank, args=(free_port(), args.repeats, out), nprocs=N_WORKERS, join=True)
    res = np.load(out)
    os.unlink(out)
    print(f"# {platform.node()} {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}; MLP {HIDDEN}, {N_WORKERS}"
          f" processes, batch {BATCH}; medians of {args.repeats} steps, the slowest rank's\n")
    print("| part | ms |")
    print("|---|---|")
    parts = ("compute", "flatten", "all-reduce", "step")
    for k in parts:
        print(f"| {k} | {1e3 * statistics.median(res[k]):.1f} |")
    floor = sum(statistics.median(res[k]) for k in parts)
    ddp = statistics.median(res["ddp"])
    print(f"| sum: compute, then reduce, then step | {1e3 * floor:.1f} |")
    print(f"| DDP step (overlapped) | {1e3 * ddp:.1f} |")
    print(f"\nfloor / DDP: {floor / ddp:.2f}")


if __name__ == "__main__":
    sys.exit(main())
