"""The virtual-clock driver: :func:`simulate` runs a code or scheme under a delay model or a trace
(see ``sim.simulator`` for the timing and closing rules, and for memory: rounds go by blocks into
running summaries, per-round tables are kept only when asked or small) and returns a
:class:`SimulationResult`."""

from gradcode.sim.result import NoRecordsError, RoundRecords, SimulationResult, pooled_stats
from gradcode.sim.simulator import AUTO_RECORDS_BYTES, simulate
from gradcode.sim.summary import QuantileSketch, RunStats, TimeStats

__all__ = [
    "AUTO_RECORDS_BYTES",
    "NoRecordsError",
    "QuantileSketch",
    "RoundRecords",
    "RunStats",
    "SimulationResult",
    "TimeStats",
    "pooled_stats",
    "simulate",
]
