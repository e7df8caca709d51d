"""The in-process clock against the host's load: the README's ``fit`` example (its ``Net`` on
scikit-learn's digits, Adam lr 1e-2, batch 120, 3 epochs; CRC and uncoded, 6 workers, 2 of them
0.2 s late every round, ``engine="inprocess"``) run quiet and beside two busy loops, medians side
by side. Run from the repo root:

    python benchmarks/bench_clock.py [--repeats 5] [--hogs 2] [--against REV]

Each run is a fresh process (as a user runs the README's script: the calibration then also meets
torch's first-call costs), alternating quiet and busy so that other load on the machine hits both
alike. A run reports each scheme's virtual time to the end of its last round (what the README
prints as ``time``), the calibrated per-sample cost and the process's wall time. Busy: ``--hogs``
processes spinning at normal priority (``while True: pass``) from before the run starts to after
it ends. ``--against REV``: the same runs with git revision ``REV``'s ``src/`` too, interleaved (the
calibration before this tree's change). The figure that matters: busy / quiet of the CRC time and
of the speed-up, which the calibration is meant to keep at 1.
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
import json, time
t0 = time.perf_counter()
import torch
from torch import nn
import gradcode.torch as gt
from gradcode.runtime import TrainSpec

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.LayerNorm(64), nn.Linear(64, 64), nn.ReLU(),
                                  nn.BatchNorm1d(64), nn.Linear(64, 10))
    def forward(self, x):
        return self.body(x)

train, test = gt.digits()
torch.manual_seed(0)
net = Net()
setup = gt.TorchConfig(optimizer=torch.optim.Adam, optimizer_params={"lr": 1e-2}, batch_size=120,
                       epochs=3, eval_data=test)
out = {}
for code in ("crc", "uncoded"):
    spec = TrainSpec(code, workers=6, stragglers=2, delay=0.2)
    res = gt.fit(net, train, spec, torch_config=setup, engine="inprocess")
    out[code] = res.history[-1]["elapsed"]
    out[code + "_per_sample"] = res.result.clock["per_sample"]
out["wall"] = time.perf_counter() - t0
print(json.dumps(out))
'''


def one_run(env: dict, hogs: int) -> dict:
    """The README's example in a fresh process, with ``hogs`` busy loops beside it."""
    with busy_loops(hogs):
        proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict:
    keys = ("crc", "uncoded", "crc_per_sample", "wall")
    med = {k: statistics.median(r[k] for r in runs) for k in keys}
    med["speedup"] = statistics.median(r["uncoded"] / r["crc"] for r in runs)
    return med


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hogs", type=int, default=2, help="busy loops beside the busy runs")
    ap.add_argument("--against", metavar="REV", help="also run git revision REV's src/, interleaved")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-clock-") as runs_dir, contextlib.ExitStack() as stack:
        envs = source_envs(stack, args.against, runs_dir)
        sources = list(envs)
        print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')};"
              f" the README's in-process fit example, fresh process a run, {args.repeats} repeats, quiet and"
              f" beside {args.hogs} busy loops, alternating", flush=True)
        results = {(name, hogs): [] for name in sources for hogs in (0, args.hogs)}
        for r in range(args.repeats):
            for name in sources:
                for hogs in (0, args.hogs):
                    res = one_run(envs[name], hogs)
                    results[name, hogs].append(res)
                    print(f"  repeat {r} {name} {'busy' if hogs else 'quiet'}: crc {res['crc']:.3f} s, uncoded"
                          f" {res['uncoded']:.2f} s, {res['crc_per_sample'] * 1e6:.1f} us a sample, wall"
                          f" {res['wall']:.1f} s", file=sys.stderr, flush=True)
    print(f"{'':12s} {'':6s} {'crc s':>8s} {'uncoded s':>10s} {'speed-up':>9s} {'us/sample':>10s} {'wall s':>7s}")
    for name in sources:
        quiet, busy = summary(results[name, 0]), summary(results[name, args.hogs])
        for label, med in (("quiet", quiet), (f"{args.hogs} busy", busy)):
            print(f"{name:12s} {label:6s} {med['crc']:8.3f} {med['uncoded']:10.2f} {med['speedup']:9.1f}"
                  f" {med['crc_per_sample'] * 1e6:10.1f} {med['wall']:7.1f}")
        print(f"{name:12s} busy / quiet: crc time {busy['crc'] / quiet['crc']:.2f}x, speed-up"
              f" {busy['speedup'] / quiet['speedup']:.2f}x, per-sample cost"
              f" {busy['crc_per_sample'] / quiet['crc_per_sample']:.2f}x")


if __name__ == "__main__":
    main()
