"""The virtual-clock driver: :func:`simulate` runs a code or scheme under a delay model or a trace
and returns a :class:`SimulationResult`.

What this layer owns: time, in simulation. It draws each round's worker times from a delay model
(``gradcode.stragglers``), turns them into message arrivals with the schemes' timing rule, feeds
them to the scheme through the protocol (or, for a static code, evaluates the code's closed
decodability rule over many rounds at once), applies the closing rule (decodable, or the SGC
mu-rule with its wait-out), and folds rounds block by block into running summaries, keeping
per-round tables only when asked or small (see ``sim.simulator``).

What it may import: ``codes``, ``schemes``, ``stragglers``, numpy, and rich for progress bars.
Never Ray: the runtime is the other driver, and the same scheme object runs unchanged in both.
"""

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
