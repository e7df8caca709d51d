"""The one timing rule both drivers use: when each message of a worker's round arrives.

A delay model's draw gives, per round and worker, an ``intercept`` and a ``slope`` (seconds, and
seconds per unit of data: ``time = intercept + slope * load``), and a message time ``c`` (the
communication component; 0 without one). Worker ``w``'s messages go out in order over one link;
message ``i`` can go once the data fraction ``P_i`` it depends on is computed
(:func:`gradcode.schemes.static.task_schedule`), so

    a_0 = max(0, intercept + slope * P_0) + c
    a_i = max(max(0, intercept + slope * P_i), a_{i-1}) + c

The simulator's vectorized path (every round and worker at once), its event path (one round's
workers) and the runtime's injected sleeps all call :func:`message_arrivals`, so the three agree
to the last bit.

On the collective path (no payload to the master: the members of a round reduce among
themselves), a round also takes the members' all-reduce: :func:`ring_allreduce_time`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["message_arrivals", "ring_allreduce_time"]


def message_arrivals(intercept, slope, prefix_loads, message_time: float = 0.0) -> np.ndarray:
    """Arrival times ``(..., R)`` of ``R`` messages (module docstring).

    ``intercept`` and ``slope`` have any shape ``S`` (a scalar for one worker, ``(workers,)`` or
    ``(rounds, n)``); ``prefix_loads`` has shape ``(..., R)`` broadcastable against ``S + (R,)``
    (e.g. ``(n, R)`` against ``(rounds, n)``). Padding ``prefix_loads`` past a worker's last
    message (by repeating it) leaves the real messages' times unchanged."""
    intercept = np.asarray(intercept, dtype=np.float64)
    slope = np.asarray(slope, dtype=np.float64)
    A = intercept[..., None] + slope[..., None] * np.asarray(prefix_loads, dtype=np.float64)
    np.maximum(A, 0.0, out=A)
    for r in range(A.shape[-1]):
        col = A[..., r]
        if r:
            np.maximum(col, A[..., r - 1], out=col)
        if message_time:
            col += message_time
    return A


def ring_allreduce_time(members, step_time) -> np.ndarray:
    """Seconds a ring all-reduce of the whole vector over ``members`` workers takes: ``2 (k - 1)``
    steps, in each of which every member sends a ``1 / k`` share of the vector to its neighbour
    (reduce-scatter, then all-gather: the bandwidth-optimal all-reduce of Patarasuk and Yuan,
    2009, what gloo's and NCCL's rings do), so ``2 (k - 1) step_time(1 / k)``; 0 for ``k <= 1``.

    ``step_time(f)``: seconds to send a share ``f`` of the vector over one link (the delay model's
    :meth:`~gradcode.stragglers.DelayModel.message_time`, ``comm_latency + comm * f``, gives
    ``2 (k - 1) comm_latency + 2 (k - 1) / k * comm``). ``members``: an int or an integer array;
    the result has its shape."""
    k = np.asarray(members, dtype=np.int64)
    out = np.zeros(k.shape)
    for size in np.unique(k[k > 1]):
        out[k == size] = 2 * (int(size) - 1) * float(step_time(1.0 / int(size)))
    return out
