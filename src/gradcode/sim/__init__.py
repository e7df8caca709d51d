"""The virtual-clock driver: :func:`simulate` runs a code or scheme under a delay model or a trace
(see ``sim.simulator`` for the timing and closing rules) and returns a :class:`SimulationResult`."""

from gradcode.sim.result import SimulationResult
from gradcode.sim.simulator import simulate

__all__ = ["SimulationResult", "simulate"]
