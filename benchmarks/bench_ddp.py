"""The anchor: gradcode against what a practitioner would use, Ray Train's ``TorchTrainer`` (PyTorch
DDP over gloo, CPU), on the same model, data, batch size, optimizer and injected delays. Needs the
benchmark-only extra ``pip install -e ".[ddp]"`` (``ray[train]``). Run from the
repo root:

    python benchmarks/bench_ddp.py [--repeats 3] [--target 0.9] [--delay 0.2] [--transports channels collective]

Set-up: n = 4 workers, the small CNN on scikit-learn's 8x8 digits, batch 240 (60 a worker), Adam
(lr 3e-3), held-out accuracy checked every 5 steps; the measure is the wall-clock time until the
held-out accuracy first reaches ``--target``, from the start of the first step to the evaluation
that sees it, evaluations included, by the same clock for both trainers (gradcode's callback
sees each round as it ends; its first round's start is the first callback's time less that
round's time). Both train on the same batches: DDP's rank ``r`` takes, at step ``t``, the samples
gradcode's partition ``r`` contributes to job ``t`` (``TorchSpec.batch_indices``: epochs over each
partition), so both need about the same number of steps. Two conditions: no stragglers, and one of the four
workers (a random one each step, the same draw for every trainer) sleeping ``--delay`` seconds
before it computes. DDP waits for it in every all-reduce; gradcode's ``crc`` (s = 1) does not,
``uncoded`` does, ``auto`` probes 5 rounds uncoded then switches. Each configuration runs
``--repeats`` times, interleaved, in one Ray session (2 CPUs here: both trainers' 4 workers share
them, one thread each: gradcode's workers set theirs, the DDP loop sets its own, as a DDP user on
CPUs would; medians). Per-step times are (time to target) / steps. ``--transports``: gradcode's
runs on each transport named (``ClusterConfig.transport``; ``auto`` only on the star, whose probe
rounds it needs), all beside the same DDP runs.

    python benchmarks/bench_ddp.py --per-step REV [--repeats 3]

gradcode's step side by side with git revision ``REV``: fresh processes, alternating this tree and
``REV``'s ``src/``, each training the same model for 150 rounds with no delay model (what a run on a
healthy cluster is), no evaluations; the median time between consecutive rounds' callbacks after
20 warm-up rounds, for ``uncoded`` and ``crc`` (s = 1). Medians over the repeats. Also one
partition's gradient (60 samples: what CRC s = 1 asks of each worker beyond uncoded), timed in the
child on one thread, median of 50: the allowance for CRC over DDP's step is the wall time
of that extra compute, 4 extra partitions on the machine's cores.

    python benchmarks/bench_ddp.py --startup [--repeats 3] [--hogs 2]

A ``fit``'s start-up in fresh processes (the small CNN, CRC s = 1, n = 4, the embedded cluster):
seconds from the call until Ray is up, the workers are up (processes started, imports, data built)
and round 0 has ended. ``--hogs K`` runs K busy loops at normal priority beside it (also with
``--per-step``): a machine with other work.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import numpy as np  # noqa: E402
from _timing import busy_loops  # noqa: E402

N_WORKERS, BATCH, EVAL_EVERY, MAX_STEPS = 4, 240, 5, 400


def stragglers(steps: int, seed: int) -> np.ndarray:
    """The worker delayed in each step (the same draw for every trainer)."""
    return np.random.default_rng(seed).integers(0, N_WORKERS, steps)


def gradcode_batches(n_samples: int) -> "TorchSpec":  # noqa: F821
    """The batches gradcode's run draws (seed 0, 4 equal partitions): ``batch_indices(t, r)``."""
    from gradcode.torch.problem import TorchSpec

    order = np.random.default_rng([0, 0]).permutation(n_samples)  # fit's training order for seed 0
    return TorchSpec(model=None, samples=None, order=order, loss=None, loss_reduction="mean", batch_size=BATCH,
                     sizes=np.full(N_WORKERS, 1 / N_WORKERS), seed=0, wire_dtype=np.float32)


def ddp_loop(config: dict) -> None:
    """Ray Train's per-worker loop: the same model, data split, batches and delays as gradcode's run."""
    import torch
    from ray import train as rtrain
    from ray.train.torch import prepare_model

    from gradcode.torch import SmallCNN, digits

    torch.set_num_threads(1)  # one CPU a worker, as gradcode's workers (8 processes share 2 cores)
    (X, y), (Xt, yt) = digits(seed=0)
    rank, world = rtrain.get_context().get_world_rank(), rtrain.get_context().get_world_size()
    torch.manual_seed(0)
    model = prepare_model(SmallCNN((1, 8, 8), 10))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    batches = gradcode_batches(len(y))
    slow = config["slow"]
    start = time.perf_counter()
    for step in range(MAX_STEPS):
        idx = torch.from_numpy(batches.batch_indices(step, rank))
        if config["delay"] > 0 and slow[step] == rank:
            time.sleep(config["delay"])
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(X[idx]), y[idx]).backward()  # DDP all-reduces here
        opt.step()
        if (step + 1) % EVAL_EVERY == 0:
            acc = 0.0
            if rank == 0:  # one evaluation, as gradcode's master does (its time is not in the rounds)
                inner = getattr(model, "module", model)  # not the DDP wrapper: its forward is a collective
                inner.eval()
                with torch.no_grad():
                    acc = float((inner(Xt).argmax(1) == yt).float().mean())
                inner.train()
            done = torch.tensor([1.0 if acc >= config["target"] else 0.0])
            torch.distributed.broadcast(done, src=0)  # rank 0's verdict for everyone
            if done.item():
                if rank == 0:  # the result goes through a file: this machine's benchmark, one node
                    with open(config["out"], "w") as fh:
                        fh.write(f"{time.perf_counter() - start} {step + 1} {acc}")
                return


def run_ddp(delay: float, target: float, seed: int) -> tuple[float, int]:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    out = tempfile.mktemp(prefix="ddp-result-")
    trainer = TorchTrainer(ddp_loop, train_loop_config={"delay": delay, "target": target, "out": out,
                                                        "slow": stragglers(MAX_STEPS, seed).tolist()},
                           scaling_config=ScalingConfig(num_workers=N_WORKERS, use_gpu=False,
                                                        resources_per_worker={"CPU": 0.01}),
                           torch_config=TorchConfig(backend="gloo"),
                           run_config=RunConfig(storage_path=tempfile.mkdtemp(prefix="ddp-"), name="ddp"))
    trainer.fit()
    if not os.path.exists(out):  # the target was not reached within MAX_STEPS
        return float("nan"), MAX_STEPS
    with open(out) as fh:
        seconds, steps, _ = fh.read().split()
    os.unlink(out)
    return float(seconds), int(steps)


class _Reached(Exception):
    """Raised by the callback to end a gradcode run at the target accuracy."""


def run_gradcode(code: str, delay: float, target: float, seed: int, transport: str = "channels") -> tuple[float, int]:
    from gradcode.runtime import ClusterConfig, RunConfig, TrainSpec
    from gradcode.torch import SmallCNN, TorchConfig, digits, fit

    (X, y), test = digits(seed=0)
    slow = stragglers(MAX_STEPS, seed)
    delays = np.zeros((MAX_STEPS, N_WORKERS))
    if delay > 0:
        delays[np.arange(MAX_STEPS), slow] = delay
    reached = {}

    def stop_at_target(rec):
        now = time.perf_counter()
        reached.setdefault("start", now - rec["time"])  # round 0 began its round time ago
        for m in rec.get("metrics", []):
            if m["accuracy"] >= target and "t" not in reached:
                reached["t"], reached["steps"] = now - reached["start"], rec["round"] + 1
                raise _Reached  # the run stops: the target was reached

    spec = TrainSpec(code, workers=N_WORKERS, stragglers=1 if code == "crc" else 0, delay_model="trace",
                     delay_params={"delays": delays}, inject="full", seed=0)
    tconf = TorchConfig(batch_size=BATCH, optimizer="adam", optimizer_params={"lr": 3e-3}, eval_data=test,
                        probe=5 if code == "auto" else None)
    try:
        fit(lambda: SmallCNN((1, 8, 8), 10), (X, y), spec, torch_config=tconf,
            run=RunConfig(rounds=MAX_STEPS, eval_every=EVAL_EVERY), cluster=ClusterConfig(transport=transport),
            callback=stop_at_target)
    except _Reached:
        pass
    return reached.get("t", float("nan")), reached.get("steps", MAX_STEPS)


STEP_ROUNDS, STEP_WARMUP = 150, 20


def step_time(code: str) -> float:
    """Median seconds between consecutive rounds of a gradcode run without delays (``--per-step``)."""
    from gradcode.runtime import RunConfig, TrainSpec
    from gradcode.torch import SmallCNN, TorchConfig, digits, fit

    (X, y), _ = digits(seed=0)
    stamps = []
    spec = TrainSpec(code, workers=N_WORKERS, stragglers=1 if code == "crc" else 0, seed=0)
    fit(lambda: SmallCNN((1, 8, 8), 10), (X, y), spec,
        torch_config=TorchConfig(batch_size=BATCH, optimizer="adam", optimizer_params={"lr": 3e-3}),
        run=RunConfig(rounds=STEP_ROUNDS, eval_every=0), callback=lambda rec: stamps.append(time.perf_counter()))
    return float(np.median(np.diff(stamps)[STEP_WARMUP:]))


def partition_time() -> float:
    """Median seconds of one partition's gradient (BATCH / N_WORKERS samples) of the small CNN on one thread."""
    import torch

    from gradcode.torch import SmallCNN, digits

    torch.set_num_threads(1)
    (X, y), _ = digits(seed=0)
    net, loss = SmallCNN((1, 8, 8), 10), torch.nn.CrossEntropyLoss()
    xb, yb = X[: BATCH // N_WORKERS], y[: BATCH // N_WORKERS]
    times = []
    for _ in range(60):
        t0 = time.perf_counter()
        net.zero_grad()
        loss(net(xb), yb).backward()
        times.append(time.perf_counter() - t0)
    return float(np.median(times[10:]))


def per_step_against(ref: str, repeats: int, hogs: int = 0) -> None:
    import subprocess

    from _timing import exported_source, with_source

    print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')};"
          f" gradcode's step, this tree against {ref}, n = {N_WORKERS}, small CNN, batch {BATCH}, no delays,"
          f" {hogs} busy loops beside it")
    got = {(code, name): [] for code in ("uncoded", "crc") for name in ("before", "after")}
    with exported_source(ref) as sources, busy_loops(hogs):
        for i in range(repeats):
            for code in ("uncoded", "crc"):
                for name in (("before", "after") if i % 2 == 0 else ("after", "before")):
                    proc = subprocess.run([sys.executable, __file__, "--child-step", code],
                                          env=with_source(sources[name]), capture_output=True, text=True, check=False)
                    if proc.returncode:
                        raise RuntimeError(f"{name} {code} failed:\n{proc.stderr[-3000:]}")
                    step, part = proc.stdout.split()[-2:]
                    got[code, name].append(float(step))
                    got.setdefault(("partition", name), []).append(float(part))
                    print(f"  repeat {i} {code} {name}: {1e3 * got[code, name][-1]:.1f} ms", file=sys.stderr,
                          flush=True)
    for code in ("uncoded", "crc"):
        before, after = (statistics.median(got[code, k]) for k in ("before", "after"))
        print(f"  {code:8s} before {1e3 * before:6.1f} ms  after {1e3 * after:6.1f} ms"
              f"  after/before {after / before:.2f}")
    part = statistics.median(got["partition", "before"] + got["partition", "after"])
    extra = N_WORKERS * part / (os.cpu_count() or 1)
    print(f"  one partition's gradient {1e3 * part:.2f} ms; CRC s = 1's extra compute a step on {os.cpu_count()} cores:"
          f" {N_WORKERS} x {1e3 * part:.2f} / {os.cpu_count()} = {1e3 * extra:.2f} ms")


def startup_phases() -> dict:
    """Seconds from a ``fit`` call (small CNN, CRC s = 1, n = 4, embedded cluster) to: Ray up,
    the workers up (their processes started, imports done, data built), the end of round 0."""
    from gradcode.runtime import RunConfig, TrainSpec, cluster, engine
    from gradcode.torch import SmallCNN, TorchConfig, digits, fit

    (X, y), _ = digits(seed=0)
    marks = {}
    init_ray, spawn = cluster.init_ray, engine.RayEngine.spawn

    def timed_init(**kw):
        out = init_ray(**kw)
        marks["ray"] = time.perf_counter()
        return out

    def timed_spawn(self, *a, **kw):
        out = spawn(self, *a, **kw)
        marks["workers"] = time.perf_counter()
        return out

    cluster.init_ray, engine.RayEngine.spawn = timed_init, timed_spawn
    t0 = time.perf_counter()
    fit(lambda: SmallCNN((1, 8, 8), 10), (X, y), TrainSpec("crc", workers=N_WORKERS, stragglers=1, seed=0),
        torch_config=TorchConfig(batch_size=BATCH), run=RunConfig(rounds=1, eval_every=0),
        callback=lambda rec: marks.setdefault("round 0", time.perf_counter()))
    return {k: v - t0 for k, v in marks.items()}


def startup(repeats: int, hogs: int) -> None:
    """``--startup``: :func:`startup_phases` in fresh processes, with ``hogs`` busy loops running."""
    import json
    import subprocess

    with busy_loops(hogs):
        print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')};"
              f" fit start-up, n = {N_WORKERS}, CRC s = 1, {hogs} busy loops beside it")
        runs = []
        for _ in range(repeats):
            proc = subprocess.run([sys.executable, __file__, "--child-startup"], capture_output=True, text=True,
                                  check=True)
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print("  " + "  ".join(f"{k} {v:.2f} s" for k, v in runs[-1].items()), flush=True)
        print("median: " + "  ".join(f"{k} {statistics.median(r[k] for r in runs):.2f} s" for k in runs[0]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--transports", nargs="+", default=["channels"], choices=("channels", "ray", "collective"),
                    help="gradcode's transports, each run beside DDP (default: channels)")
    ap.add_argument("--per-step", metavar="REV", help="gradcode's step side by side with git revision REV")
    ap.add_argument("--startup", action="store_true", help="time a fit's start-up in fresh processes")
    ap.add_argument("--hogs", type=int, default=0, help="with --startup, --per-step: busy loops running beside it")
    ap.add_argument("--child-step", help=argparse.SUPPRESS)
    ap.add_argument("--child-startup", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_startup:
        import json

        print(json.dumps(startup_phases()))
        return
    if args.startup:
        startup(args.repeats, args.hogs)
        return
    if args.child_step:
        print(step_time(args.child_step), partition_time())
        return
    if args.per_step:
        per_step_against(args.per_step, args.repeats, args.hogs)
        return
    import ray

    from gradcode.runtime.cluster import init_ray

    init_ray(num_cpus=2)
    print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} cores, ray {ray.__version__},"
          f" {time.strftime('%Y-%m-%d')}; time to held-out accuracy {args.target}", flush=True)
    configs = [("DDP (TorchTrainer, gloo)", "ddp", None)]
    for transport in args.transports:
        via = "" if args.transports == ["channels"] else f" [{transport}]"
        configs += [(f"gradcode {code}{via}", code, transport) for code in ("uncoded", "crc", "auto")
                    if not (code == "auto" and transport == "collective")]  # auto's probe rounds keep the star
    for delay in (0.0, args.delay):
        times = {name: [] for name, _, _ in configs}
        steps = {name: [] for name, _, _ in configs}
        for r in range(args.repeats):
            for name, code, transport in configs:
                run = (lambda: run_ddp(delay, args.target, seed=r)) if code == "ddp" else (
                    lambda: run_gradcode(code, delay, args.target, seed=r, transport=transport))
                t, k = run()
                times[name].append(t)
                steps[name].append(k)
                print(f"  delay {delay:g} s, repeat {r}: {name}: {t:.2f} s, {k} steps", file=sys.stderr, flush=True)
        ddp = statistics.median(times["DDP (TorchTrainer, gloo)"])
        print(f"one of {N_WORKERS} workers delayed {delay:g} s a step:" if delay else "no stragglers:")
        for name, _, _ in configs:
            med = statistics.median(times[name])
            print(f"  {name:26s} median {med:7.2f} s  ({med / ddp:.2f}x DDP)  runs {[round(t, 2) for t in times[name]]}"
                  f"  steps {steps[name]}")


if __name__ == "__main__":
    main()
