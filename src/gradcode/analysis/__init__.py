"""Closed-form analysis: AGC's restart model (average execution time) and lower bounds.

- :mod:`gradcode.analysis.restart`: h(u, i, s, s_max) of AGC eq. (38), the exact average
  execution time of eq. (40)-(44) for uncoded, CGC, AGC and their group versions, and a
  Monte-Carlo simulation of the same model.
- :mod:`gradcode.analysis.bounds`: GC-DC's lower bound LB and SGC Theorems F.1 / F.2.

What this layer owns: closed forms and their Monte-Carlo checks, no drivers. It may import
``codes``, ``stragglers`` and numpy/scipy; the experiments and tests call it.
"""

from gradcode.analysis.bounds import (
    arbitrary_load_bound,
    bursty_load_bound,
    gc_load,
    gcdc_lower_bound,
    msgc_load,
    srsgc_load,
)
from gradcode.analysis.restart import (
    RestartSimulation,
    RestartTiming,
    agc_comm_vector,
    average_execution_time,
    cgc_comm_vector,
    decode_epoch_pmf,
    draw_restart_epochs,
    group_decode_epoch_pmf,
    group_sizes,
    restart_h,
    restart_outcome,
    scheme_aet,
    simulate_restart,
    uncoded_comm_vector,
)

__all__ = [
    "RestartSimulation",
    "RestartTiming",
    "agc_comm_vector",
    "arbitrary_load_bound",
    "average_execution_time",
    "bursty_load_bound",
    "cgc_comm_vector",
    "decode_epoch_pmf",
    "gc_load",
    "gcdc_lower_bound",
    "group_decode_epoch_pmf",
    "group_sizes",
    "msgc_load",
    "restart_h",
    "scheme_aet",
    "simulate_restart",
    "draw_restart_epochs",
    "restart_outcome",
    "srsgc_load",
    "uncoded_comm_vector",
]
