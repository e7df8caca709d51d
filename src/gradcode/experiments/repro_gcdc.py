"""Reproductions of the GC-DC paper (Buyukates, Ozfatura, Ulukus, Gunduz, *Gradient Coding with
Dynamic Clustering*, Sec. VI), by computation with the library's schemes and delay models:

* ``gcdc-table1``: Table I, the average per-iteration completion time of GC, GC-SC and GC-DC for
  ``P = 1, 2, 4, 5, 10`` clusters (``K = 100``, ``r = 10``, ``n = P``, ``p = 0.05``), the paper's
  values beside ours (:func:`gradcode.experiments.gcdc_table1`, whose docstring states the setting and
  readings). The ``GC-DC`` rows are perfect straggler state information, the reading that matches
  the paper; the imperfect-SSI numbers are in ``imperfect_ssi_rows``.
* ``gcdc-figs`` (and ``gcdc-fig4`` ... ``gcdc-fig12``): Figs. 4-12, each figure's curves (GC,
  GC-SC, GC-DC, LB; panel (a) imperfect, (b) perfect SSI) as JSON and PNG
  (:func:`gradcode.experiments.gcdc_figures.figure_curves`, whose docstring states the readings).

Every Monte-Carlo number carries its confidence interval (``ci``: the half-width, Student t over
independent runs) and the output says how many rounds, runs and which seed were used.

Lengths (times on the 2-core VM of BENCHMARKS.md). ``gcdc-table1`` defaults to 8,000 rounds (20
runs of the paper's 400 iterations; 8 s), ``--full`` runs 40,000 (100 runs; 29 s), ``--rounds``
any multiple of 400. Full precision (``gradcode reproduce gcdc-table1 --full``, seed 0), ours ±
95% CI / paper:

    P              1               2               4              5              10
    GC      167.34±0.54/166.81  (the same for every P)
    GC-SC   167.34±0.54/166.81  114.32±0.49/113.18  57.21±0.48/58.20  37.42±0.43/37.23  0.96±0.03/0.95
    GC-DC   167.34±0.54/166.81  112.99±0.52/111.73  49.64±0.55/50.33  23.83±0.56/23.28  0.70±0.00/0.70
    (imperfect SSI: 167.34, 113.35, 51.45, 27.80, 0.72)

The paper's numbers come from one simulation of 400 iterations, whose run-to-run noise (a
standard deviation of about 3 at P = 5, measured over our runs) is several times our interval;
ours agree with them within that noise. ``gcdc-figs`` defaults to 10 runs of 400 iterations per
figure (about 1 s a figure, 10 s for all nine), ``--full`` to the paper's 30 runs (Figs. 7-12 say
30; 4-6 do not say); ``-p runs=...`` and ``-p iterations=...`` set them.
"""

from __future__ import annotations

from pathlib import Path

from gradcode.experiments.reproduce import reproduction

TABLE1_DEFAULT_ROUNDS = 8_000
TABLE1_FULL_ROUNDS = 40_000
FIGS_DEFAULT_RUNS = 10
FIGS_FULL_RUNS = 30


@reproduction("gcdc-table1")
def gcdc_table1(rounds: int | None = None, seed: int = 0, full: bool = False) -> dict:
    """GC-DC Table I: average per-iteration time of GC, GC-SC, GC-DC vs P (K=100, r=10, n=P, p=0.05).

    Monte Carlo over ``rounds`` rounds (runs of 400, the paper's simulation length; default
    8,000, ``full=True``: 40,000) of the homogeneous Gilbert-Elliot model, every scheme on the same
    draws. Rows ``{"scheme", "P", "time", "ci", "paper"}``; ``GC-DC`` is perfect SSI, and
    ``imperfect_ssi_rows`` gives GC-DC under imperfect SSI."""
    from gradcode.experiments.gcdc_table1 import table1

    if not isinstance(full, bool):
        raise TypeError(f"full must be true or false, got {full!r}")
    if rounds is None:
        rounds = TABLE1_FULL_ROUNDS if full else TABLE1_DEFAULT_ROUNDS
    res = table1(rounds=rounds, seed=seed)
    rows, imperfect = [], []
    for row in res.rows:
        scheme = {"GC-DC (perfect SSI)": "GC-DC", "GC-DC (imperfect SSI)": None}.get(row.scheme, row.scheme)
        for j, P in enumerate(res.clusters):
            item = {"scheme": scheme or "GC-DC", "P": int(P), "time": row.mean[j], "ci": row.half_width[j],
                    "paper": None if row.paper is None else row.paper[j]}
            if row.scheme.startswith("GC-DC"):
                item["ssi"] = "perfect" if scheme else "imperfect"
            (imperfect if scheme is None else rows).append(item)
    return {
        "title": (f"GC-DC Table I: {res.rounds} rounds ({res.runs} runs of {res.run_length}), seed {res.seed},"
                  f" {res.confidence:.0%} CI; GC-DC = perfect SSI"),
        "rows": rows,
        "imperfect_ssi_rows": imperfect,
        "rounds": res.rounds,
        "runs": res.runs,
        "run_length": res.run_length,
        "seed": res.seed,
        "confidence": res.confidence,
        "model": res.model,
        "params": res.params,
        "time": "average per-iteration completion time (seconds of the eq. 20 model)",
        "ci": f"half-width of the {res.confidence:.0%} Student-t interval over the run means",
    }


def _parse_figures(figures) -> list[int]:
    """``4``, ``"4-12"``, ``"4,5,12"`` or a list -> sorted figure numbers (each in 4..12)."""
    from gradcode.experiments.gcdc_figures import FIGURES

    if isinstance(figures, bool):
        raise TypeError(f"figures must be numbers 4..12 ('4-12', '4,7' or a list), got {figures!r}")
    if isinstance(figures, int):
        items = [figures]
    elif isinstance(figures, str):
        items = []
        for part in figures.split(","):
            a, sep, b = part.strip().partition("-")
            try:
                items.extend(range(int(a), int(b) + 1) if sep else [int(a)])
            except ValueError:
                raise ValueError(f"figures must be numbers 4..12 ('4-12', '4,7'), got {figures!r}") from None
    elif isinstance(figures, (list, tuple)):
        items = list(figures)
    else:
        raise TypeError(f"figures must be numbers 4..12 ('4-12', '4,7' or a list), got {figures!r}")
    bad = [f for f in items if isinstance(f, bool) or f not in FIGURES]
    if bad or not items:
        raise ValueError(f"figures must be among {min(FIGURES)}..{max(FIGURES)} (GC-DC Figs. 4-12), got {figures!r}")
    return sorted(set(items))


def plot_figure(result, path: Path) -> None:
    """PNG of one figure: panel (a) imperfect SSI, (b) perfect SSI; the running average of the
    per-iteration completion time of GC, GC-SC, GC-DC and LB against the iteration, the overall
    average and its CI in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    x = np.arange(1, result.iterations + 1)
    styles = {"GC": ("tab:red", "-"), "GC-SC": ("tab:blue", "-"), "GC-DC": ("tab:green", "-"), "LB": ("k", "--")}
    for ax, ssi, panel in zip(axes, ("imperfect", "perfect"), "ab"):
        for label, (color, ls) in styles.items():
            key = f"GC-DC ({ssi} SSI)" if label == "GC-DC" else label
            ax.plot(x, result.running[key], color=color, ls=ls,
                    label=f"{label}: {result.mean[key]:.3g} ± {result.half_width[key]:.2g}")
        ax.set(title=f"({panel}) {ssi} SSI", xlabel="iteration t",
               ylabel="avg per-iteration time, iterations 1..t (s)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    s = result.setting
    fig.suptitle(f"GC-DC Fig. {s.number}: {s.caption}\n{result.runs} runs x {result.iterations} iterations,"
                 f" seed {result.seed}, {result.confidence:.0%} CI", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _figures(figures, runs, iterations, seed, out, full, plot) -> dict:
    import json

    from gradcode.experiments.gcdc_figures import figure_curves

    numbers = _parse_figures(figures)
    if not isinstance(full, bool):
        raise TypeError(f"full must be true or false, got {full!r}")
    if runs is None:
        runs = FIGS_FULL_RUNS if full else FIGS_DEFAULT_RUNS
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows, files = [], []
    for number in numbers:
        res = figure_curves(number, runs=runs, iterations=iterations, seed=seed)
        base = out / f"gcdc-fig{number}"
        Path(f"{base}.json").write_text(json.dumps(res.to_dict()) + "\n")
        files.append(f"{base}.json")
        if plot:
            plot_figure(res, Path(f"{base}.png"))
            files.append(f"{base}.png")
        for ssi, panel in (("imperfect", "a"), ("perfect", "b")):
            for scheme in ("GC", "GC-SC", "GC-DC", "LB"):
                key = f"GC-DC ({ssi} SSI)" if scheme == "GC-DC" else scheme
                rows.append({"figure": number, "panel": panel, "ssi": ssi, "scheme": scheme,
                             "time": res.mean[key], "ci": res.half_width[key]})
    return {
        "title": (f"GC-DC Figs. {', '.join(map(str, numbers))}: {runs} runs x {iterations} iterations, seed {seed},"
                  " average per-iteration completion time ± 95% CI"),
        "rows": rows,
        "runs": runs,
        "iterations": iterations,
        "seed": seed,
        "files": files,
    }


@reproduction("gcdc-figs")
def gcdc_figs(figures="4-12", runs: int | None = None, iterations: int = 400, seed: int = 0,
              out: str = "gcdc-figures", full: bool = False, plot: bool = True) -> dict:
    """GC-DC Figs. 4-12: GC, GC-SC, GC-DC and LB curves, imperfect and perfect SSI (JSON + PNG).

    ``figures``: ``"4-12"`` (default), ``"4,9"`` or a number; ``runs`` independent simulations of
    ``iterations`` rounds per figure (default 10 x 400; ``full=True``: the paper's 30 x 400);
    ``out``: directory for ``gcdc-figN.json`` (every curve, its mean and CI) and ``gcdc-figN.png``
    (``plot=False``: JSON only). Rows: one per figure, panel and scheme."""
    return _figures(figures, runs, iterations, seed, out, full, plot)


def _register_figure(number: int) -> None:
    from gradcode.experiments.gcdc_figures import FIGURES

    def fig(runs: int | None = None, iterations: int = 400, seed: int = 0, out: str = "gcdc-figures",
            full: bool = False, plot: bool = True) -> dict:
        return _figures(number, runs, iterations, seed, out, full, plot)

    fig.__name__ = f"gcdc_fig{number}"
    fig.__doc__ = (f"GC-DC Fig. {number}: {FIGURES[number].caption}.\n\n"
                   "Same as ``gcdc-figs`` with ``figures={number}``.")
    reproduction(f"gcdc-fig{number}")(fig)


for _n in range(4, 13):
    _register_figure(_n)
