"""How a round could reach its workers on Ray 2.60: what Ray offers (actor calls on async or
synchronous actors, parameters through the object store or inside the task, compiled graphs),
measured side by side. Run from the repo root:

    python benchmarks/bench_ray_paths.py [--rounds 200] [--d 20555]

n = 4 actors, each returning a float32 vector of ``d`` numbers (default: the small CNN's 20,555
parameters) after ``--compute`` ms of work, the parameters (float32, d) sent each round:

(a) **actor calls** (the round of a run that injects delays): one ``ray.put`` of the parameters,
    n ``.remote(ref)`` calls on async actors, ``ray.wait`` until all are in, one ``ray.get``;
(b) **actor calls, sync actors**: the same on plain (synchronous) actors;
(b') **sync actors, parameters inside the task**: no ``ray.put``; the array is an argument of each
    call, which Ray inlines up to 100 KiB (what the runtime does now for a run without injected
    sleeps and a model of at most 100 KiB);
(c) **compiled graphs, one per worker** (``ray.dag``, ``experimental_compile``): each round
    ``execute(params)`` on each worker's graph, then each result's ``get``. One graph per worker,
    not one over all: a ``MultiOutputNode`` waits for the slowest (DESIGN.md's runtime notes);
(d) **compiled graphs with a straggler**: worker 0 sleeps 0.2 s every round; the round takes the
    first three results and skips a worker while its execution is in flight (skip-busy), as the
    driver does. Results are collected by one thread per graph (a timed-out ``get`` consumes its
    ``CompiledDAGRef``: a late result cannot be polled);
(e) **direct channels** (:mod:`gradcode.runtime.channel`, the runtime's default transport since
    2026-11-27): each actor runs a loop fed through a socket; the driver writes each worker's
    request (the parameters inside it) and waits for all replies with one ``select``.

Medians over ``--rounds`` rounds after warm-up; wall clock of this process. Then the CPU the
idle actors burn in 3 s, with and without a compiled graph on each (a graph's actor loop polls its
input channel).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import numpy as np  # noqa: E402
import ray  # noqa: E402


def _spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


@ray.remote(num_cpus=0)
class AsyncWorker:
    def __init__(self, d, compute_ms):
        self.out, self.ms = np.ones(d, dtype=np.float32), compute_ms

    async def step(self, x):
        _spin(self.ms)
        return self.out


@ray.remote(num_cpus=0)
class SyncWorker:
    def __init__(self, d, compute_ms, late=0.0):
        self.out, self.ms, self.late = np.ones(d, dtype=np.float32), compute_ms, late

    def pid(self):
        return os.getpid()

    def step(self, x):
        if self.late:
            time.sleep(self.late)
        _spin(self.ms)
        return self.out


@ray.remote(num_cpus=0)
class ChannelWorker:
    """A worker behind a :class:`~gradcode.runtime.channel.WorkerChannel`: its core's ``run``
    spins ``compute_ms`` and returns a float32 vector of ``d`` numbers."""

    def __init__(self, d, compute_ms):
        from gradcode.runtime.channel import WorkerChannel

        out, ms = np.ones(d, dtype=np.float32), compute_ms

        class Core:
            def run(self, t, tasks, params, sleeps, fail):
                _spin(ms)
                yield out

            def abort(self, t):
                pass

        self.core, self._generation = Core(), 0
        self.channel = WorkerChannel(self, "127.0.0.1", lambda generation: None)

    def open_channel(self, token):
        return self.channel.listen(token)


def channels(actors, x, rounds):
    from gradcode.runtime.channel import DriverChannels

    driver, token = DriverChannels(), os.urandom(32)
    for w, address in enumerate(ray.get([a.open_channel.remote(token) for a in actors])):
        driver.connect(w, address, token)
    times = []
    for t in range(rounds):
        t0 = time.perf_counter()
        for w in range(len(actors)):
            driver.request(w, t, 0, [], (), False, True, [x])
        got = 0
        while got < len(actors):
            got += len(driver.wait(1.0))
        times.append(time.perf_counter() - t0)
    driver.close_all()
    return times


def actor_calls(actors, x, rounds, inline=False):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        ref = x if inline else ray.put(x)
        pending = [a.step.remote(ref) for a in actors]
        while pending:
            _, pending = ray.wait(pending, num_returns=1)
        times.append(time.perf_counter() - t0)
    return times


def compiled(actors, x, rounds, *, skip_late=False):
    """Per-worker compiled graphs. A timed-out ``CompiledDAGRef.get(timeout=0)`` consumes the ref
    (a second ``get`` raises "can only be called once", measured), so a late result cannot be
    polled from the master's loop: each graph gets a thread that executes and blocks on ``get``,
    and hands results to one queue the round reads (skip-busy: a worker whose result is not back
    gets no new execution)."""
    import queue
    import threading

    from ray.dag import InputNode

    graphs = []
    for a in actors:
        with InputNode() as inp:
            graphs.append(a.step.bind(inp).experimental_compile())
    results: queue.Queue = queue.Queue()
    requests = [queue.Queue() for _ in graphs]

    def serve(w):
        while True:
            item = requests[w].get()
            if item is None:
                return
            results.put((w, graphs[w].execute(item).get(timeout=-1)))

    threads = [threading.Thread(target=serve, args=(w,), daemon=True) for w in range(len(graphs))]
    for th in threads:
        th.start()
    try:
        times, busy, skipped = [], set(), 0
        for _ in range(rounds):
            t0 = time.perf_counter()
            sent = [w for w in range(len(graphs)) if w not in busy]
            skipped += len(graphs) - len(sent)
            for w in sent:
                requests[w].put(x)
                busy.add(w)
            need = len(graphs) - 1 if skip_late else len(sent)
            got = 0
            while got < need:
                w, _ = results.get()
                busy.discard(w)
                got += 1
            times.append(time.perf_counter() - t0)
        while busy:
            busy.discard(results.get()[0])
        return times, skipped
    finally:
        for q in requests:
            q.put(None)
        for th in threads:
            th.join()
        for g in graphs:
            g.teardown()


def idle_cpu(actors, *, graphs: bool) -> float:
    """CPU seconds all of ``actors``' processes use in 3 s of doing nothing (with a compiled graph
    on each when ``graphs``: one executed, then left waiting for its next input)."""
    import psutil
    from ray.dag import InputNode

    compiled_graphs = []
    if graphs:
        for a in actors:
            with InputNode() as inp:
                compiled_graphs.append(a.step.bind(inp).experimental_compile())
        for g in compiled_graphs:
            g.execute(np.zeros(1, dtype=np.float32)).get()
    procs = [psutil.Process(p) for p in ray.get([a.pid.remote() for a in actors])]
    before = sum(sum(p.cpu_times()[:2]) for p in procs)
    time.sleep(3.0)
    used = sum(sum(p.cpu_times()[:2]) for p in procs) - before
    for g in compiled_graphs:
        g.teardown()
    return used


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--d", type=int, default=20_555)
    ap.add_argument("--compute", type=float, default=2.0, help="ms of work per worker and round")
    args = ap.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    n, x = 4, np.zeros(args.d, dtype=np.float32)
    print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} cores, ray {ray.__version__},"
          f" {time.strftime('%Y-%m-%d')}; n = {n}, d = {args.d}, {args.compute:g} ms of work a worker")

    def report(name, times):
        t = times[10:]
        print(f"{name:44s} median {1e3 * statistics.median(t):7.2f} ms  p90 {1e3 * np.percentile(t, 90):7.2f} ms",
              flush=True)

    asyncs = [AsyncWorker.remote(args.d, args.compute) for _ in range(n)]
    report("(a) actor calls, async actors (runs with sleeps)", actor_calls(asyncs, x, args.rounds))
    for a in asyncs:
        ray.kill(a)
    syncs = [SyncWorker.remote(args.d, args.compute) for _ in range(n)]
    report("(b) actor calls, sync actors", actor_calls(syncs, x, args.rounds))
    report("(b') sync actors, parameters in the task (others)", actor_calls(syncs, x, args.rounds, inline=True))
    times, _ = compiled(syncs, x, args.rounds)
    report("(c) compiled graph per worker", times)
    print(f"idle actors, CPU seconds over 3 s: {idle_cpu(syncs, graphs=False):.2f} as plain actors,"
          f" {idle_cpu(syncs, graphs=True):.2f} each with a compiled graph (on {os.cpu_count()} cores)", flush=True)
    for a in syncs:
        ray.kill(a)
    chans = [ChannelWorker.remote(args.d, args.compute) for _ in range(n)]
    report("(e) direct channels (the runtime's default)", channels(chans, x, args.rounds))
    for a in chans:
        ray.kill(a)
    late = [SyncWorker.remote(args.d, args.compute, 0.2 if w == 0 else 0.0) for w in range(n)]
    times, polled = compiled(late, x, args.rounds // 4, skip_late=True)
    report("(d) compiled graphs, worker 0 0.2 s late, skipped", times)
    print(f"    worker 0 skipped (still busy) in {polled} of {args.rounds // 4} rounds")


if __name__ == "__main__":
    main()
