"""``trace``: a measured ``(rounds, workers)`` array of seconds replayed, load-adjusted by SGC App.
J's rule. Load conventions: :mod:`gradcode.stragglers.models`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gradcode._validation import check_choice, check_int, check_real
from gradcode.stragglers.models.base import (
    DelayModel,
    Draw,
    _check_bool,
    _short,
    register_delay_model,
)


@register_delay_model("trace")
@dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class TraceDelays(DelayModel):
    """Replay a ``(rounds, workers)`` array of seconds (a measured delay profile).

    Round ``t`` of a draw is row ``offset + t`` of the trace (modulo its length when ``wrap``),
    and its columns are the ``n`` workers: a trace of ``W`` workers replays ``n = W`` exactly (a
    smaller ``n`` would drop the other workers' times, and with them their stragglers, SGC Sec. 2),
    unless ``subset=True`` asks for its first ``n`` columns. The randomness argument is ignored: a
    trace is deterministic.

    Load: with ``trace_load=None`` the recorded times are replayed as they are, whatever the load
    asked for. With ``trace_load = L0`` (the load the trace was recorded at, ``>= 0``; SGC records
    its reference profile uncoded, ``L0 = 1 / n``) a load ``L`` is handled by SGC App. J's additive
    rule, ``delay + (L - L0) * load_slope`` (``load_slope``: seconds per unit load, the slope of
    the linear fit of mean run time against load, :func:`gradcode.stragglers.fit_load_slope`; on
    the command line ``--load-slope``, or fitted from ``--trace FILE --trace-load L`` given for
    several loads). ``trace_load`` without ``load_slope`` is refused: the slope cannot be guessed,
    and scaling a trace by ``L / L0`` instead charges a scheme's whole recorded time (communication
    and fixed costs included) for its extra data: at ``L0 = 1/n`` it makes CRC with ``s = 15``
    sixteen times slower than the uncoded run. That proportional rule, ``delay * L / L0`` (times
    that are pure compute at a constant rate), is there only by name: ``load_rule="proportional"``
    (with ``trace_load > 0`` and no slope). Times are clipped at 0.

    Built from ``path``, the model holds the trace read from the file in ``delays`` and the path
    (as a string) in ``path``; two traces are equal when their arrays and load rules are, wherever
    they were read from.
    """

    examples = (dict(delays=np.arange(40.0).reshape(8, 5) + 1),)

    summary = "replay a (rounds, workers) array of measured seconds, load-adjusted by SGC App. J"
    param_help = {
        "delays": "(rounds, workers) array of seconds (or give path)",
        "path": "file to read the trace from (.npy, .csv or an SGC pickle), instead of delays",
        "trace_load": "load the trace was recorded at (needs load_slope); default: replay times as they are",
        "load_slope": "seconds per unit load: SGC App. J's additive adjustment delay + (L - trace_load) * load_slope",
        "load_rule": "'additive' (SGC App. J, needs load_slope) or 'proportional' (delay * L / trace_load)",
        "offset": "trace row replayed in round 0",
        "wrap": "start over at the first row when the trace runs out (otherwise an error)",
        "subset": "replay the first n workers of a wider trace (otherwise n must be its number of workers)",
    }

    delays: Any = None
    path: Any = None
    trace_load: float | None = None
    load_slope: float | None = None
    load_rule: str = "additive"
    offset: int = 0
    wrap: bool = False
    subset: bool = False

    def __post_init__(self):
        from gradcode.errors import TraceError
        from gradcode.stragglers.traces import load_trace, validate_trace

        if (self.delays is None) == (self.path is None):
            raise TypeError("trace needs exactly one of delays (an array of seconds) or path (a trace file)")
        if self.path is not None:
            arr = load_trace(self.path)
            source = str(self.path)
        else:
            try:
                arr = validate_trace(self.delays, source="delays")
            except TraceError as exc:
                raise ValueError(str(exc)) from None
            source = None
        arr = np.array(arr, dtype=np.float64)
        arr.flags.writeable = False
        trace_load = None if self.trace_load is None else check_real("trace_load", self.trace_load, minimum=0.0)
        load_slope = None if self.load_slope is None else check_real("load_slope", self.load_slope)
        rule = check_choice("load_rule", self.load_rule, ("additive", "proportional"))
        if load_slope is not None and trace_load is None:
            raise ValueError("load_slope needs trace_load (the load the trace was recorded at)")
        if rule == "proportional":
            if load_slope is not None:
                raise ValueError("load_rule='proportional' scales delays by L / trace_load and takes no load_slope;"
                                 " drop load_slope, or drop load_rule for the additive rule that uses it")
            if trace_load is None or trace_load == 0:
                raise ValueError("load_rule='proportional' needs trace_load > 0 (the load the trace was recorded"
                                 f" at), got trace_load={trace_load}")
        elif trace_load is not None and load_slope is None:
            raise ValueError(
                f"trace_load={trace_load:g} without load_slope: a trace is adjusted to a scheme's load L by SGC"
                " App. J's additive rule, delay + (L - trace_load) * load_slope, which needs the slope (seconds"
                " per unit load). Give load_slope (simulate/compare: --load-slope A; train: --delay-params"
                " load_slope=A), or fit it from profiles measured at two or more loads"
                " (gradcode.stragglers.fit_load_slope; simulate/compare: --trace F1 --trace-load L1 --trace F2"
                " --trace-load L2), or pass load_rule='proportional' to scale delays by L / trace_load instead")
        self._set(delays=arr, path=source, trace_load=trace_load, load_slope=load_slope, load_rule=rule,
                  offset=check_int("offset", self.offset, minimum=0), wrap=_check_bool("wrap", self.wrap),
                  subset=_check_bool("subset", self.subset))

    @property
    def params(self) -> dict[str, Any]:
        """The parameters; ``delays`` is ``None`` for a trace read from ``path``."""
        p = super().params
        if self.path is not None:
            p["delays"] = None
        return p

    def _load_rule(self) -> tuple:
        return (self.trace_load, self.load_slope, self.load_rule, self.offset, self.wrap, self.subset)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return np.array_equal(self.delays, other.delays) and self._load_rule() == other._load_rule()

    def __hash__(self):
        return hash((type(self).__name__, self.delays.shape, self.delays.tobytes()))

    def _repr_parts(self, extra=()) -> list[str]:
        shown = [f"rounds={self.delays.shape[0]}", f"workers={self.delays.shape[1]}"]
        if self.path:
            shown.append(f"path={self.path!r}")
        items = [(k, v) for k, v in self.params.items() if k not in ("delays", "path")
                 and not (k == "load_rule" and v == "additive")]
        # trace_load=0 is a load (the Fig. 16 intercept), not an unset option
        shown += [f"{k}={_short(v)}" for k, v in (*items, *extra)
                  if v is not None and v is not False and (v != 0 or k == "trace_load")]
        return shown

    def _blocks(self, rounds, n, rng, block):
        """The rows ``offset + a .. offset + b - 1`` (modulo the trace when ``wrap``), replayed by a
        trace over just those rows with the same load rule; ``None`` (so the whole draw raises its
        own error) when the trace is too short or too narrow."""
        T, W = self.delays.shape
        if n > W or (n < W and not self.subset) or (not self.wrap and self.offset + rounds > T):
            return None

        def blocks():
            for a in range(0, rounds, block):
                b = min(rounds, a + block)
                rows = (self.offset + np.arange(a, b)) % T
                part = TraceDelays(delays=self.delays[rows, :n], trace_load=self.trace_load,
                                   load_slope=self.load_slope, load_rule=self.load_rule)
                yield a, b, part.draw(b - a, n)

        return blocks()

    def _draw(self, rounds, n, rng):
        T, W = self.delays.shape
        if n > W:
            raise ValueError(f"the trace has {W} workers, fewer than the n={n} asked for")
        if n < W and not self.subset:
            raise ValueError(f"the trace has {W} workers but n={n} was asked for: replaying it would drop the"
                             f" times of its last {W - n} workers; use a trace of {n} workers, or pass subset=True"
                             f" to replay its first {n}")
        if not self.wrap and self.offset + rounds > T:
            raise ValueError(
                f"the trace has {T} rounds; rounds={rounds} from offset={self.offset} needs"
                f" {self.offset + rounds} (pass wrap=True to start over)"
            )
        rows = (self.offset + np.arange(rounds)) % T
        d = self.delays[rows][:, :n]
        if self.trace_load is None:
            intercept, slope = d.copy(), np.zeros((rounds, n))
        elif self.load_rule == "proportional":
            intercept, slope = np.zeros((rounds, n)), d / self.trace_load
        else:
            intercept = d - self.trace_load * self.load_slope
            slope = np.full((rounds, n), self.load_slope)
        return Draw(intercept, slope, np.zeros((rounds, n), dtype=bool))
