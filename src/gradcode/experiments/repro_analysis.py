"""Reproductions of the analysis tables: AGC Table VI (restart model) and SGC's loads vs bounds.

``agc-table6`` recomputes AGC Table VI from the phase durations the paper measured on EC2
(Tables IV and V) with the exact AET of :mod:`gradcode.analysis.restart`, eq. (43)-(44):

- ``n = 20`` workers, ``d = 3`` subsets each (mu = 0.15), straggler probability ``p``;
- ``t_cm^(0) = 13``, ``t_cm^(i) = 1`` and epoch lengths ``t_0 = 16``, ``t_i = 4`` (i > 0), as the
  caption of Table VI states; the restart term is the elapsed time of the failed epochs,
  ``R(i) = t_0 + (i - 1) t_1`` (the literal ``i * t_i`` is far off, see the restart module);
- ``t_ov`` = Bcast + Update = 1.15 + 0.04; ``t_s^(A,ed)`` = Enc (epoch 0 column) + Dec of the
  scheme's row (per ``s`` for AGC, Table V);
- ``t_cp`` = the scheme's Comp: 2.45 for the coded schemes (the caption's value) and 0.82 for the
  uncoded one (Table IV; with 2.45 the uncoded AET would be 1.63 higher than the paper's);
- communication vectors: uncoded ``(1,)``, CGC ``1/(d - s_max)`` (eq. 8 with the least q of eq. 9),
  AGC ``1/(d - s)`` (eq. 11); groups of eq. (31): five of 3 workers and one of 5.

Every row carries the paper's number (``paper_aet``) beside the recomputed one, their difference
and whether they agree to :data:`AGC_TABLE6_AGREE`; why the others differ is data
(:data:`AGC_TABLE6_WHY`, :data:`AGC_TABLE6_NOTES`), which the reproduction returns as ``differences``
and ``notes`` and the command prints under the table.

``sgc-load-bounds`` lists the schemes of SGC Tables 1 and 3 (n = 256) with the normalized load
their formulas give, the load the paper prints and the lower bound of Theorem F.1 (and F.2 for
M-SGC) for the straggler model each scheme is designed to tolerate.
"""

from __future__ import annotations

from gradcode.analysis.bounds import arbitrary_load_bound, bursty_load_bound, gc_load, msgc_load, srsgc_load
from gradcode.analysis.restart import RestartTiming, scheme_aet
from gradcode.experiments.reproduce import reproduction

# ---- AGC Tables IV and V: phase durations in seconds (Bcast, Comp, Enc of epoch 0, Dec, Update)
AGC_N = 20
AGC_D = 3
AGC_BCAST = 1.15
AGC_UPDATE = 0.04
AGC_T_CM = (13.0, 1.0)       # t_cm^(i): epoch 0, epochs i > 0 (Table VI caption)
AGC_EPOCH = (16.0, 4.0)      # t_i: epoch 0, epochs i > 0 (Table VI caption)
#: Table IV (uncoded, CGC) and Table V (AGC, one entry per number of stragglers s = 0, 1, 2)
AGC_PHASES = {
    ("uncoded", None): {"comp": 0.82, "enc": 0.15, "dec": 0.47},
    ("cgc", 0): {"comp": 2.45, "enc": 0.33, "dec": 0.79},
    ("cgc", 1): {"comp": 2.45, "enc": 0.43, "dec": 0.95},
    ("cgc", 2): {"comp": 2.45, "enc": 0.44, "dec": 1.58},
    ("agc", None): {"comp": 2.45, "enc": (0.37, 0.47, 0.92), "dec": (0.63, 0.87, 1.67)},
}
#: Table VI as printed, for comparison only: (scheme, group, s_max) -> (p = 0.05, p = 0.1)
AGC_TABLE6 = {
    ("uncoded", False, None): (18.39, 19.95),
    ("CGC", False, 0): (17.00, 20.45),
    ("CGC", True, 0): (17.00, 20.45),
    ("CGC", False, 1): (14.18, 17.68),
    ("CGC", True, 1): (11.90, 12.86),
    ("CGC", False, 2): (18.96, 19.96),
    ("CGC", True, 2): (18.67, 18.70),
    ("AGC", False, None): (12.19, 15.85),
    ("AGC", True, None): (9.95, 11.10),
}
AGC_PS = (0.05, 0.1)
#: a recomputed AET within this of the printed one agrees with it: the rounding of the measured
#: phase durations (fitting t_0 and the constant term to each ungrouped row's two printed values
#: recovers t_0 = 16.0 and Tables IV-V's constants to 0.017)
AGC_TABLE6_AGREE = 0.015
#: why a row of Table VI differs from the print: (scheme, group, s_max) -> explanation
AGC_TABLE6_WHY = {
    ("CGC", True, 1): (
        "no reading of eq. (37)-(44) we tried reproduces the grouped law: dropping the last group of five (or"
        " other group layouts) moves G-CGC(1) near the print (11.88 / 12.85) but breaks G-CGC(0) and still"
        " misses G-AGC; the same grouped-law gap moves the best G-CGC's switch from s_max = 1 to 2 (Fig. 3) to"
        " p = 0.164, not the paper's 0.23."
    ),
    ("AGC", False, None): (
        "CGC(2) fixes the law of the decoding epoch at s_max = 2 and matches, so AGC's gap must come from its"
        " per-s costs (Table V), yet no choice of the tables' Enc/Dec/Comm columns, overhead or restart term"
        " fits both values of p (best misfit 0.02)."
    ),
    ("AGC", True, None): (
        "no reading can reach the print: with the stated constants the no-straggler epoch-0 outcome alone"
        " (probability (1-p)^20 in any group layout) bounds the AET below by 10.58 at p = 0.05, above the"
        " printed 9.95."
    ),
}
#: said under the table, after the rows that differ
AGC_TABLE6_NOTES = [
    "Constants: n = 20, d = 3, t_cm = 13 then 1, epochs t_0 = 16 then 4 (Table VI's caption); restart term"
    " R(i) = t_0 + (i - 1) t_1, the elapsed time of the failed epochs (the literal i * t_i is far off); t_cp"
    " 2.45 for the coded schemes, 0.82 for uncoded (Table IV; with 2.45 uncoded would be 1.63 above the print).",
    "The recomputed values are the exact AET of the restart model, confirmed by Monte Carlo of the same model"
    " (tests); the paper's qualitative claims hold: AGC beats every CGC, G-AGC is best, s_max = 1 is the best CGC.",
]


def agc_timing(scheme: str, s_max: int | None = None) -> RestartTiming:
    """The timing constants of eq. (43)-(44) for one scheme, from AGC Tables IV-V."""
    ph = AGC_PHASES[(scheme, s_max)]
    enc, dec = ph["enc"], ph["dec"]
    enc_dec = tuple(e + d for e, d in zip(enc, dec)) if isinstance(enc, tuple) else enc + dec
    return RestartTiming(t_cp=ph["comp"], t_cm=AGC_T_CM, epoch=AGC_EPOCH,
                         overhead=AGC_BCAST + AGC_UPDATE, enc_dec=enc_dec)


@reproduction("agc-table6")
def agc_table6(ps=AGC_PS) -> dict:
    """AGC Table VI: average execution time of uncoded, (G-)CGC and (G-)AGC under the restart model."""
    rows, differences = [], []
    for (label, group, s_max), paper in AGC_TABLE6.items():
        scheme = label.lower()
        timing = agc_timing(scheme, s_max)
        aets = scheme_aet(scheme, AGC_N, AGC_D, list(ps), timing, s_max=s_max, group=group)
        paper_by_p = dict(zip(AGC_PS, paper))
        mine = []
        for p, aet in zip(ps, aets):
            printed = paper_by_p.get(p)
            diff = None if printed is None else round(float(aet) - printed, 3)
            row = {"scheme": label, "group": group, "s_max": s_max, "p": float(p), "aet": round(float(aet), 4),
                   "paper_aet": printed, "diff": diff,
                   "agrees": None if diff is None else abs(diff) <= AGC_TABLE6_AGREE}
            rows.append(row)
            mine.append(row)
        off = [r for r in mine if r["agrees"] is False]
        if off:
            differences.append({
                "row": _table6_label(label, group, s_max), "scheme": label, "group": group, "s_max": s_max,
                "p": [r["p"] for r in off], "aet": [r["aet"] for r in off],
                "paper_aet": [r["paper_aet"] for r in off],
                "why": AGC_TABLE6_WHY.get((label, group, s_max), "not explained"),
            })
    compared = [r for r in rows if r["agrees"] is not None]
    agree = sum(r["agrees"] for r in compared)
    notes = [f"{agree} of {len(compared)} values agree with the paper to {AGC_TABLE6_AGREE} (the rounding of the"
             " phase durations measured in Tables IV-V)" + (f"; {len(compared) - agree} differ:" if differences
                                                              else ".")]
    for d in differences:
        pairs = ", ".join(f"p = {p:g}: {a:.2f} vs {b:.2f}" for p, a, b in zip(d["p"], d["aet"], d["paper_aet"]))
        notes.append(f"{d['row']} ({pairs}): {d['why']}")
    notes.extend(AGC_TABLE6_NOTES)
    return {
        "rows": rows,
        "n": AGC_N,
        "d": AGC_D,
        "restart_term": "R(i) = t_0 + (i-1) t_1 (elapsed time of the failed epochs)",
        "differences": differences,
        "notes": notes,
    }


def _table6_label(scheme: str, group: bool, s_max: int | None) -> str:
    """``G-CGC(1)``, ``AGC``, ``uncoded``: the row's name as the paper writes it."""
    return ("G-" if group else "") + scheme + ("" if s_max is None else f"({s_max})")


# ---- SGC Tables 1 and 3 (n = 256): (scheme, params, printed load)
SGC_N = 256
SGC_LOADS = [
    ("M-SGC", {"B": 1, "W": 2, "lam": 27}, 0.008, "Table 1"),
    ("SR-SGC", {"B": 2, "W": 3, "lam": 23}, 0.051, "Table 1"),
    ("GC", {"s": 15}, 0.062, "Table 1"),
    ("No Coding", {}, 0.004, "Table 1"),
    ("M-SGC", {"B": 1, "W": 2, "lam": 24}, 0.007512, "Table 3"),
    ("M-SGC", {"B": 1, "W": 2, "lam": 27}, 0.007543, "Table 3"),
    ("SR-SGC", {"B": 2, "W": 3, "lam": 15}, 0.035156, "Table 3"),
    ("SR-SGC", {"B": 2, "W": 3, "lam": 20}, 0.042969, "Table 3"),
    ("SR-SGC", {"B": 2, "W": 3, "lam": 22}, 0.046875, "Table 3"),
    ("SR-SGC", {"B": 2, "W": 3, "lam": 23}, 0.050781, "Table 3"),
    ("GC", {"s": 9}, 0.039062, "Table 3"),
    ("GC", {"s": 10}, 0.042969, "Table 3"),
    ("GC", {"s": 11}, 0.046875, "Table 3"),
    ("GC", {"s": 14}, 0.058594, "Table 3"),
    ("GC", {"s": 15}, 0.062500, "Table 3"),
]


def sgc_load_and_bound(scheme: str, params: dict, n: int = SGC_N) -> tuple[float, float, float | None]:
    """(load, Theorem F.1 bound, Theorem F.2 bound or None) for one scheme of the SGC paper.

    GC with ``s`` and the uncoded scheme (``s = 0``) tolerate ``s`` stragglers in every round, a
    ``(B = W, lambda = s)``-bursty pattern, whose bound is ``1/(n - s)``; SR-SGC and M-SGC tolerate
    the ``(B, W, lambda)``-bursty model, and M-SGC also the ``(B, W + B - 1, lambda)``-arbitrary one.
    """
    if scheme == "M-SGC":
        B, W, lam = params["B"], params["W"], params["lam"]
        return (msgc_load(n, B, W, lam), bursty_load_bound(n, B, W, lam),
                arbitrary_load_bound(n, B, W + B - 1, lam))
    if scheme == "SR-SGC":
        B, W, lam = params["B"], params["W"], params["lam"]
        return srsgc_load(n, B, W, lam), bursty_load_bound(n, B, W, lam), None
    s = params.get("s", 0)
    return gc_load(n, s), bursty_load_bound(n, 1, 1, s), None


@reproduction("sgc-load-bounds")
def sgc_load_bounds() -> dict:
    """SGC Tables 1 and 3: normalized loads of GC, SR-SGC and M-SGC against Theorems F.1/F.2."""
    rows = []
    for scheme, params, printed, source in SGC_LOADS:
        load, lb_bursty, lb_arb = sgc_load_and_bound(scheme, params)
        rows.append({"source": source, "scheme": scheme,
                     "params": "(" + ", ".join(str(v) for v in params.values()) + ")" if params else "-",
                     "load": round(load, 6), "paper_load": printed,
                     "bound_F1": round(lb_bursty, 6),
                     "bound_F2": None if lb_arb is None else round(lb_arb, 6),
                     "ratio": round(load / lb_bursty, 3)})
    return {"rows": rows, "n": SGC_N}
