"""How ``simulate`` and ``compare`` replay a trace file (SGC Sec. 2, App. J).

``n`` is the trace's number of workers (``-n`` may only repeat it: a smaller one would drop
workers' times, a larger one has none to replay). One trace alone replays
its recorded times whatever a scheme's load. ``--load-slope A`` charges a scheme of load ``L`` the
paper's ``(L - L0) * A`` extra seconds, ``L0`` the trace's ``--trace-load`` (default ``1/n``: the
uncoded reference profile); ``--trace FILE --trace-load L`` repeated for profiles measured at
several loads fits ``A`` (a least-squares line through their mean times, as ``gradcode tune``
does; a negative fit is warned about) and replays the profile at the smallest load. ``--jobs J``
runs the ``J + T`` rounds that ``J`` jobs of a scheme with delay ``T`` take (refused when the
trace has fewer rows, unless ``-M wrap=true``); without it every scheme runs ``--rounds`` (default:
the trace's rows) and one of delay ``T`` finishes ``T`` jobs fewer.
"""

from __future__ import annotations

import numpy as np

from gradcode.experiments.cli_output import note, warn


def build_trace_model(traces: list, trace_loads, load_slope, params: dict):
    """A trace model from ``--trace FILE`` (repeatable), ``--trace-load L`` (one per trace) and
    ``--load-slope A`` (SGC App. J; ``-M trace_load=``/``-M load_slope=`` are the same options):

    * one trace, neither option: its times are replayed as recorded, whatever a scheme's load;
    * a slope (given, or fitted): the trace at the smallest load ``L0`` is replayed with the paper's
      additive rule ``delay + (L - L0) * slope``; one trace without ``--trace-load`` is taken as
      recorded uncoded, ``L0 = 1/n`` (App. J's reference profile); several traces need a load
      each and, without ``--load-slope``, give the slope by a least-squares fit of their mean
      times against their loads (:func:`gradcode.stragglers.traces.reference_profile`, as
      ``gradcode tune`` does); a negative slope is warned about;
    * ``--trace-load`` with neither a slope nor a second trace is refused (``-M
      load_rule=proportional`` opts into scaling by ``L / L0`` instead).

    Returns ``(model, info)``, ``info`` the files, their loads, ``trace_load``, ``load_slope`` and
    whether the slope was fitted."""
    import warnings

    from gradcode.stragglers.traces import reference_profile
    from gradcode.stragglers import load_trace, make_delay_model

    loads = list(trace_loads or [])
    if "trace_load" in params:
        if loads:
            raise ValueError("give the trace's load once: --trace-load or -M trace_load, not both")
        loads = [params.pop("trace_load")]
    if "load_slope" in params:
        if load_slope is not None:
            raise ValueError("give the load slope once: --load-slope or -M load_slope, not both")
        load_slope = params.pop("load_slope")
    if loads and len(loads) != len(traces):
        raise ValueError(f"--trace-load: give one load per --trace ({len(traces)} traces, {len(loads)} loads)")
    if len(traces) > 1 and not loads:
        raise ValueError(f"{len(traces)} traces: give the load each was measured at (--trace-load L after each"
                         " --trace FILE) so that the load slope can be fitted from them")
    if load_slope is None and len(traces) == 1:
        kw = {} if not loads else {"trace_load": loads[0]}
        if loads and params.get("load_rule") != "proportional":
            raise ValueError(
                f"--trace-load {loads[0]:g} without --load-slope: the trace is adjusted to a scheme's load L by"
                " SGC App. J's additive rule, delay + (L - trace_load) * slope, which needs the slope (seconds per"
                " unit load). Give --load-slope A, or fit it from profiles measured at two or more loads:"
                " --trace F1 --trace-load L1 --trace F2 --trace-load L2 (as gradcode tune does); or replay the"
                " times as recorded by leaving out --trace-load")
        model = make_delay_model("trace", path=str(traces[0]), **kw, **params)
        info = {"files": [str(traces[0])], "loads": loads or None, "trace_load": model.trace_load,
                "load_slope": None, "load_rule": model.load_rule if loads else None, "fitted": False}
        return model, info
    if params.get("load_rule", "additive") != "additive":
        raise ValueError("load_rule=proportional takes no load slope (--load-slope, or several traces to fit one)")
    profiles = [load_trace(p) for p in traces]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ref = reference_profile(profiles, loads=loads or None, alpha=load_slope)
    for w in caught:
        warn(str(w.message))
    model = make_delay_model("trace", path=str(traces[ref.index]), trace_load=ref.load, load_slope=ref.alpha,
                             **params)
    if ref.fitted:
        note(f"load slope fitted from {len(traces)} traces: {ref.alpha:.6g} s per unit load; replaying"
              f" {traces[ref.index]} (load {ref.load:g}) with delay + (L - {ref.load:g}) * slope")
    elif not loads:
        note(f"{traces[0]} is taken as recorded uncoded, at load 1/n = {ref.load:.4g} (SGC App. J's reference"
              " profile); give --trace-load if it was not")
    info = {"files": [str(t) for t in traces], "loads": [float(x) for x in loads] if loads else None,
            "trace_load": ref.load, "load_slope": ref.alpha, "load_rule": "additive", "fitted": ref.fitted}
    return model, info


def default_rounds(rounds: int | None, model) -> int:
    """``--rounds``, else the rows a trace has left from its offset, else 1000."""
    if rounds is not None:
        return rounds
    delays = getattr(model, "delays", None)
    if isinstance(delays, np.ndarray) and not getattr(model, "wrap", False):
        return max(1, delays.shape[0] - getattr(model, "offset", 0))
    return 1000


def is_trace(model) -> bool:
    """Whether ``model`` replays a trace (``--trace``)."""
    return getattr(model, "name", None) == "trace"


def trace_workers(workers: int | None, model, params: dict | None = None) -> int | None:
    """``-n``, or the number of workers of the trace when ``-n`` is absent and the scheme's own
    ``params`` set no ``n`` (one that does is checked against the trace by :func:`check_trace_width`)."""
    if workers is None and is_trace(model) and "n" not in (params or {}):
        return int(model.delays.shape[1])
    return workers


def check_trace_width(built, model) -> None:
    """A trace of ``W`` workers replays a scheme of exactly ``n = W`` workers: a smaller ``n``
    would drop the times of the trace's other workers (their stragglers with them) unless asked
    for (``-M subset=true``), and a trace has no times for workers it did not record."""
    if not is_trace(model):
        return
    W, n = int(model.delays.shape[1]), built.n
    if n < W and not model.subset:
        raise ValueError(f"the trace has {W} workers but {built.label} has n = {n}: replaying it would drop the"
                         f" times of its last {W - n} workers; leave out -n (n is then taken from the trace),"
                         f" give a trace of {n} workers, or -M subset=true to replay its first {n} workers")
    if n > W:
        raise ValueError(f"the trace has {W} workers, fewer than n = {n} of {built.label}: it has no times for the"
                         f" other {n - W}; leave out -n to take n = {W} from the trace")


def delay_of(built) -> int:
    """``T``: a job started in round ``t`` finishes by round ``t + T`` (0 for a code)."""
    return int(getattr(built.obj, "delay", 0) or 0)


def run_rounds(rounds: int | None, jobs: int | None, built, model) -> int:
    """Rounds of one run: ``--rounds``; for ``--jobs J``, ``J + T`` (SGC Sec. 2: J jobs take J + T
    rounds), refused when a trace (without ``wrap``) has fewer rows left; else the trace's rows
    from its offset, or 1000."""
    if jobs is None:
        return default_rounds(rounds, model)
    if rounds is not None:
        raise ValueError("give --rounds or --jobs, not both (J jobs take J + T rounds, T the scheme's delay)")
    T = delay_of(built)
    need = jobs + T
    if is_trace(model) and not model.wrap:
        rows, offset = int(model.delays.shape[0]), int(model.offset)
        if offset + need > rows:
            left = f"{rows} rounds" + (f", {rows - offset} from offset {offset}" if offset else "")
            raise ValueError(f"the trace has {left}, but J = {jobs} jobs of {built.label} (delay T = {T}) take"
                             f" J + T = {need} rounds: give a longer trace or fewer --jobs, or -M wrap=true to"
                             " replay the trace again from its first row")
    return need
