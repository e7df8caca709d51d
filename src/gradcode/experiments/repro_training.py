"""The papers' training experiments, scaled to one machine (issue 19): real models trained through
:func:`gradcode.torch.fit` on the in-process engine (real gradients, a virtual clock).

* ``sgc-training``: SGC Sec. 4.2, Table 1, Fig. 2: the same four models, each family's parameters
  chosen beforehand from a reference profile (App. J) and run from round 1, against uncoded.
* ``sgc-probe-switch``: SGC App. K, Fig. 18. ``M = 4`` CNN classifiers trained concurrently
  (SGC Sec. 4.2; here scikit-learn's 8x8 digits and the small CNN, ``n = 16`` workers instead of
  256 Lambda functions). Every coded run starts uncoded, measures the workers for ``T_probe``
  rounds, searches its family's parameters on that profile (App. J's replay, the paper's mu-rule
  with ``mu = 1`` and the wait-out of every worker) and switches; the uncoded run never switches.
  Reported: jobs completed against time (Fig. 18), the time to finish the jobs, the parameters
  chosen and their load, the search time, each model's final held-out accuracy.

The delays. By default a synthetic bursty profile built to match what the paper says of its Fig. 1:
a worker is normally fast (``base`` seconds a round, half-normal jitter of ``jitter`` relative),
becomes a straggler for short, isolated bursts (a two-state Markov chain: fast to slow with
probability ``p_slow`` a round, back with ``p_recover``, so bursts last ``1 / p_recover`` rounds on
average: "isolated short-length bursts are prevalent", Fig. 1(b)), and a straggler takes 2.5 to 4
times its normal time (beyond the ``(1 + mu)`` = 2x the paper's straggler identification uses;
the long tail of Fig. 1(c)). Its load dependence is App. J's additive rule with ``load_slope``
seconds per unit of load: the paper fits that slope from profiles measured at several loads, which
one probe at load ``1/n`` cannot do, so it is given (the same value the replay is adjusted with).
``--trace FILE`` replays a measured profile instead (``(rounds, n)`` seconds, e.g. the paper's own
Lambda profiles; ``n`` is then its width).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gradcode.experiments.reproduce import reproduction

#: the paper's claim for Fig. 18 (App. K), compared with in the note
FIG18_CLAIM = "after switching at T_probe = 40, M-SGC is significantly faster than uncoded and GC (App. K, Fig. 18)"


def bursty_profile(rounds: int, n: int, rng, *, base: float = 1.0, jitter: float = 0.05, p_slow: float = 0.03,
                   p_recover: float = 0.7, slow=(2.5, 4.0)) -> np.ndarray:
    """A ``(rounds, n)`` delay profile with isolated short straggler bursts (module docstring)."""
    slow_now = np.zeros(n, dtype=bool)
    out = np.empty((rounds, n))
    for t in range(rounds):
        flip = rng.random(n)
        slow_now = np.where(slow_now, flip >= p_recover, flip < p_slow)
        times = base * (1.0 + jitter * np.abs(rng.standard_normal(n)))
        times[slow_now] *= rng.uniform(*slow, int(slow_now.sum()))
        out[t] = times
    return out


def _setup(workers, models, rounds, load_slope, seed, trace):
    """The delay model (synthetic bursty profile, or a trace file), the data and the options every
    run of an SGC training reproduction shares (Sec. 4.2: the mu-rule with mu = 1 and wait-out of
    every worker, the model's whole time injected)."""
    from gradcode.stragglers import load_trace
    from gradcode.torch import digits

    rng = np.random.default_rng(seed)
    if trace is not None:
        profile = load_trace(trace)
        workers = profile.shape[1]
        if profile.shape[0] < rounds:
            profile = np.resize(profile, (rounds, workers))
    else:
        profile = bursty_profile(rounds, workers, rng)
    delays = ("trace", {"delays": profile, "trace_load": 1.0 / workers, "load_slope": load_slope})
    train, test = digits(seed=seed)
    common = dict(workers=workers, models=models, rounds=rounds, delay_model=delays, inject="full", close=1.0,
                  waitout="all", engine="inprocess", batch_size=256, optimizer="adam",
                  optimizer_params={"lr": 3e-3}, eval_data=test, seed=seed)
    return profile, workers, train, common


def _train(name, train, common, target, kw, *, fixed=None) -> tuple[dict, list]:
    """One run: its row (parameters, load, time to ``target`` jobs, search time, mean final
    accuracy) and its jobs-completed-against-time curve."""
    import torch

    from gradcode.torch import SmallCNN, fit

    torch.manual_seed(common["seed"])
    res = fit(lambda: SmallCNN((1, 8, 8), 10), train, **common, **kw)
    done, curve = 0, []
    for h in res.history:
        done += len(h["jobs"])
        curve.append((h["elapsed"], done))
    finish = next((t for t, d in curve if d >= target), float("nan"))
    chosen = fixed or (res.auto["chosen"] if res.auto else {"params": {}, "load": 1.0 / common["workers"]})
    accuracy = [m["accuracy"] for m in res.result.metrics[-common["models"]:]]
    row = {"scheme": name, "parameters": ", ".join(f"{k}={v}" for k, v in chosen["params"].items()) or "—",
           "load": round(float(chosen["load"]), 4), "time_to_jobs": round(finish, 2),
           "search_ms": round(1e3 * res.auto["search_seconds"], 2) if res.auto else None,
           "accuracy": round(float(np.mean(accuracy)), 4)}
    return row, curve


def _finish(doc: dict, rows: list, curves: dict, out: str, stem: str, plot: bool, marks: dict) -> dict:
    base = {r["scheme"]: r["time_to_jobs"] for r in rows}
    for r in rows:
        r["speedup_vs_uncoded"] = round(base["uncoded"] / r["time_to_jobs"], 3)
    doc.update(rows=rows, curves={k: [[round(t, 3), d] for t, d in v] for k, v in curves.items()})
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps(doc, indent=1))
    doc["files"] = [str(folder / f"{stem}.json")]
    if plot:
        doc["files"].append(str(_plot(curves, marks, doc["title"], folder / f"{stem}.png")))
    return doc


def _compare_note(rows, prefix: str) -> str:
    base = {r["scheme"]: r["time_to_jobs"] for r in rows}
    msgc, gc, unc = base["M-SGC"], base["GC"], base["uncoded"]
    return (prefix + f" Here M-SGC finishes the jobs {100 * (1 - msgc / gc):.1f} % {'faster' if msgc < gc else 'slower'}"
            f" than GC and {100 * (1 - msgc / unc):.1f} % {'faster' if msgc < unc else 'slower'} than uncoded (the"
            " paper's Table 1 at n = 256: 16 % and 32 %).")


@reproduction("sgc-probe-switch")
def sgc_probe_switch(workers: int = 16, models: int = 4, jobs: int = 120, probe: int = 20, load_slope: float = 2.0,
                     seed: int = 0, trace: str | None = None, out: str = "sgc-probe-switch", plot: bool = True) -> dict:
    """SGC App. K, Fig. 18 (scaled): start uncoded, switch after T_probe rounds; M-SGC, SR-SGC, GC
    and uncoded training of 4 CNNs on the same bursty delays.

    ``jobs``: jobs counted after the probe (all models together); ``probe``: T_probe;
    ``load_slope``: seconds per unit load of the delays and of the search; ``trace``: a profile
    file replayed instead of the synthetic one; ``out``: folder for the JSON and the PNG."""
    rounds = probe + jobs + 3  # the sequential codes' T stays below the number of models (4)
    _, workers, train, common = _setup(workers, models, rounds, load_slope, seed, trace)
    target = probe + jobs
    rows, curves = [], {}
    for name, family in (("uncoded", None), ("GC", "gc"), ("SR-SGC", "sr-sgc"), ("M-SGC", "m-sgc")):
        kw = dict(code="uncoded") if family is None else dict(code="auto", probe=probe, load_slope=load_slope,
                                                             families=(family,))
        row, curves[name] = _train(name, train, common, target, kw)
        rows.append(row)
    note = _compare_note(rows, (
        f"scaled: n = {workers} in-process workers, {models} small CNNs on the 8x8 digits, batch 256, Adam,"
        f" T_probe = {probe}, {jobs} jobs after it; delays " + (f"from {trace}" if trace else
                                                               "synthetic bursty (module docstring)")
        + f", load slope {load_slope} s per unit load. Paper: {FIG18_CLAIM}."))
    doc = {"title": "SGC App. K / Fig. 18 (scaled): uncoded first, switch after T_probe rounds", "notes": [note],
           "probe": probe, "jobs": jobs, "workers": workers, "models": models}
    return _finish(doc, rows, curves, out, "sgc-probe-switch", plot,
                   {f"end of the probe ({probe} jobs)": probe, "jobs counted": target})


@reproduction("sgc-training")
def sgc_training(workers: int = 16, models: int = 4, jobs: int = 120, probe: int = 40, load_slope: float = 2.0,
                 seed: int = 0, trace: str | None = None, out: str = "sgc-training", plot: bool = True) -> dict:
    """SGC Sec. 4.2, Table 1 and Fig. 2 (scaled): M-SGC, SR-SGC and GC with parameters chosen from a
    reference profile (App. J), coded from round 1, against uncoded; 4 CNNs trained concurrently.

    The reference profile is ``probe`` rounds of the same delays measured beforehand at the uncoded
    load (App. J: the paper uses T_probe = 80); each family's best parameters on it are then run for
    ``jobs`` jobs (all models together). Other parameters as ``sgc-probe-switch``."""
    from gradcode.schemes.switch import choose_after_probe

    rounds = jobs + 3
    profile, workers, train, common = _setup(workers, models, probe + rounds, load_slope, seed, trace)
    reference, delays = profile[:probe], profile[probe:]  # measured first, then the run's own rounds
    common["delay_model"] = ("trace", {**common["delay_model"][1], "delays": delays})
    common["rounds"] = rounds
    rows, curves = [], {}
    row, curves["uncoded"] = _train("uncoded", train, common, jobs, dict(code="uncoded"))
    rows.append(row)
    for name, family in (("GC", "gc"), ("SR-SGC", "sr-sgc"), ("M-SGC", "m-sgc")):
        scheme, report = choose_after_probe(reference, jobs=jobs, models=models, close=1.0, waitout="all",
                                            load_slope=load_slope, seed=seed, families=(family,))
        row, curves[name] = _train(name, train, common, jobs, dict(code=scheme), fixed=report["chosen"])
        row["search_ms"] = round(1e3 * report["search_seconds"], 2)
        rows.append(row)
    note = _compare_note(rows, (
        f"scaled: n = {workers} in-process workers, {models} small CNNs on the 8x8 digits, batch 256, Adam,"
        f" parameters from a {probe}-round reference profile (the paper: 80), {jobs} jobs; delays "
        + (f"from {trace}" if trace else "synthetic bursty (module docstring)")
        + f", load slope {load_slope} s per unit load. Paper (Table 1): M-SGC (1, 2, 27) 891 s, SR-SGC"
        " (2, 3, 23) 994 s, GC s = 15 1065 s, uncoded 1308 s."))
    doc = {"title": "SGC Sec. 4.2 / Table 1 (scaled): parameters from a reference profile, coded from round 1",
           "notes": [note], "probe": probe, "jobs": jobs, "workers": workers, "models": models}
    return _finish(doc, rows, curves, out, "sgc-training", plot, {"jobs counted": jobs})


def _plot(curves: dict, marks: dict, title: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, pts in curves.items():
        t, d = zip(*pts)
        ax.step(t, d, where="post", label=name)
    for (label, y), ls in zip(marks.items(), (":", "--")):
        ax.axhline(y, color="grey", lw=0.8, ls=ls, label=label)
    ax.set_xlabel("time (s, virtual clock)")
    ax.set_ylabel("jobs completed (all models)")
    ax.set_title(title.split(":")[0] + " (scaled)", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
