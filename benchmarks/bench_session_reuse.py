"""A second block's start-up: one process running ``with Workers(...)`` (or ``train``) twice, each
block timed from its call to the end of its round 0. The first block starts the embedded Ray
cluster and the worker processes; the second finds them up (the cluster and its idle workers are
kept for the process's later runs) and only resets the workers with its own data. Run from the
repo root:

    python benchmarks/bench_session_reuse.py [--repeats 3] [--blocks 2] [--kinds workers train] [--against REV]
        [--hogs 2]

Each repeat is a fresh process per kind (a user's script or notebook: Python, torch and Ray start
as they do for a user). ``workers``: the small CNN on scikit-learn's 8x8 digits, CRC s = 1, n = 4,
batch 240, Adam, a loop of 3 rounds (``backward``, ``step``) in a ``with gt.Workers(...)`` block, a
new model each block; ``train``: ``gradcode.runtime.train`` of the default logistic problem, CRC
s = 1, n = 4, 3 rounds, a new seed each run. Both on the embedded cluster (2 CPUs here). A block's
start-up is the wall time from the call (``Workers(...)`` built, the block entered; ``train``
called) to the end of round 0 (the first ``backward`` returned; the callback of round 0); each
block also reports how many times it called ``ray.init``. ``--against REV``: the same processes
with git revision ``REV``'s ``src/`` too, interleaved (each block then started its own cluster).
``--hogs K``: K busy loops at normal priority beside every process (a machine with other work).
Prints every process's blocks and the medians.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from _timing import busy_loops, source_envs

CHILD = r'''
import json, sys, time
import ray

kind, blocks = sys.argv[1], int(sys.argv[2])
inits = []
_init = ray.init


def counted(*args, **kwargs):  # every start of (or join to) a cluster this process makes
    inits.append(1)
    return _init(*args, **kwargs)


ray.init = counted
import torch
import gradcode.torch as gt
from gradcode.runtime import RunConfig, TrainSpec, train

ROUNDS = 3
(X, y), _ = gt.digits(seed=0)


def workers_block(i):
    torch.manual_seed(i)
    net = gt.SmallCNN((1, 8, 8), 10)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    t0 = time.perf_counter()
    with gt.Workers(net, (X, y), TrainSpec("crc", workers=4, stragglers=1, seed=0),
                    torch_config=gt.TorchConfig(batch_size=240), run=RunConfig(rounds=ROUNDS)) as workers:
        for r in range(ROUNDS):
            opt.zero_grad()
            workers.backward()
            opt.step()
            if r == 0:
                first = time.perf_counter() - t0
    return first


def train_run(i):
    marks = []
    t0 = time.perf_counter()
    train(TrainSpec("crc", workers=4, stragglers=1, seed=i), run=RunConfig(rounds=ROUNDS, eval_every=0),
          callback=lambda rec: marks.append(time.perf_counter() - t0))
    return marks[0]


out = []
for i in range(blocks):
    before = len(inits)
    seconds = (workers_block if kind == "workers" else train_run)(i)
    out.append({"start_s": seconds, "ray_init": len(inits) - before})
print(json.dumps(out))
'''


def one_process(kind: str, blocks: int, env: dict, hogs: int = 0) -> list[dict]:
    with busy_loops(hogs):
        proc = subprocess.run([sys.executable, "-c", CHILD, kind, str(blocks)], capture_output=True, text=True,
                              env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=2, help="blocks (or train runs) in each process")
    ap.add_argument("--kinds", nargs="+", default=["workers", "train"], choices=("workers", "train"))
    ap.add_argument("--against", metavar="REV", help="also run git revision REV's src/, interleaved")
    ap.add_argument("--hogs", type=int, default=0, help="busy loops beside every process")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-reuse-") as runs_dir, contextlib.ExitStack() as stack:
        envs = source_envs(stack, args.against, runs_dir)
        sources = list(envs)
        print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')};"
              f" {args.blocks} blocks a process, {args.repeats} processes a kind and source, interleaved,"
              f" {args.hogs} busy loops beside them", flush=True)
        results = {(name, kind): [] for name in sources for kind in args.kinds}
        for r in range(args.repeats):
            for kind in args.kinds:
                for name in sources:
                    res = one_process(kind, args.blocks, envs[name], args.hogs)
                    results[name, kind].append(res)
                    print(f"  repeat {r} {name} {kind}: " + ", ".join(
                        f"block {b} {x['start_s']:.2f} s ({x['ray_init']} ray.init)" for b, x in enumerate(res)),
                        flush=True)
    print(f"medians of {args.repeats}, seconds from the call to the end of round 0:")
    for (name, kind), runs in results.items():
        blocks = [statistics.median(run[b]["start_s"] for run in runs) for b in range(args.blocks)]
        inits = [max(run[b]["ray_init"] for run in runs) for b in range(args.blocks)]
        print(f"{name:12s} {kind:8s} " + "  ".join(f"block {b}: {s:6.2f} s ({i} ray.init)"
                                                  for b, (s, i) in enumerate(zip(blocks, inits))))


if __name__ == "__main__":
    main()
