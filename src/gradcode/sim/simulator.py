"""The virtual-clock driver: runs a scheme round by round on delays drawn from a delay model.

Timing of one round (all workers start when the round starts, at time 0):

* the delay model is drawn once for the whole run (``model.draw(rounds, n, rng)``, so Markov
  models see whole sequences); worker ``w`` needs ``max(0, intercept[t, w] + slope[t, w] * x)``
  seconds to process a data fraction ``x`` in round ``t``;
* a worker processes the partitions of its tasks in plan order; message ``i`` is computed once the
  partitions it depends on are done (:func:`~gradcode.schemes.static.task_schedule`: e.g. message
  0 of the ``partial`` code needs only the naive partitions), i.e. at the time of that prefix of
  its load. For the models that are linear in the load (``shifted-exp``, ``bernoulli``,
  ``partial``) this is the drawn time scaled by the prefix's share of the worker's load; for
  ``fixed`` a delayed worker's additive delay comes first;
* messages go out one after another over one link: message ``i`` arrives at
  ``a_i = max(c_i, a_{i-1}) + model.message_time(1 / chunks)``, ``c_i`` its compute time (the
  worker keeps computing while it sends).

Closing rules (``close``):

* ``"decodable"``: the round ends at the first arrival after which the due jobs decode
  (``scheme.ready``); messages arriving at that same instant count as arrived.
* a number ``mu >= 0``: the mu-tolerance rule of the SGC paper (Section 2, "identification of
  stragglers"): with ``kappa`` the time the fastest worker returns its whole task result, the
  master waits ``mu * kappa`` more seconds, i.e. until ``(1 + mu) kappa`` (or until every worker
  is in, if that is sooner); workers whose task result is not in by then are stragglers (by the
  code's rule, see "Stragglers" below) and their pending work is cancelled. If the due jobs cannot be decoded from what arrived, the master waits
  it out: the round ends at the first later arrival that makes them decodable (SGC Remark 2.3;
  the workers in by then are not stragglers) and counts one wait-out.

Stragglers: from the number of leading messages each worker had delivered when the round ended,
by :meth:`LinearCode.straggling <gradcode.codes.LinearCode.straggling>` for codes and static
schemes (:func:`~gradcode.schemes.static.round_stragglers`): by default a worker whose task result
(all its messages of the round) was not in; for AGC, whose master stops everyone once it can
decode, the workers holding fewer than ``r_s = ceil(L / (d - s))`` messages for the smallest ``s``
such that ``n - s`` workers hold ``r_s`` (per group for the grouped codes). Any other scheme keeps
the whole-result rule. Messages a straggler did deliver are still used (the ``partial`` code needs
the stragglers' message 0). ``arrivals[t, w]`` is the arrival of the last message ``w`` delivered
by the close, ``-1`` for a straggler (the runtime's table; for single-message codes, the arrival of
its task result); ``finish_times[t, w]`` is when its last message would have arrived, stragglers
included.

Two paths give identical results on the same draw (tests check it): the *fast path* for a
:class:`~gradcode.codes.LinearCode` computes every round at once from the code's
:func:`~gradcode.schemes.static.decode_rule` (an order statistic for MDS-like codes, per group
for FRC, per cluster for GC-SC, binary search with ``can_decode`` otherwise); the *event path*
feeds each message to a :class:`~gradcode.schemes.Scheme` in time order, the protocol that
dynamic schemes and the Ray runtime use. The fast path trusts the closed rule (for CRC and GC-SC
"any n - s" holds with probability one over the code's random draw); the event path confirms each
decodable instant with ``code.can_decode``, which also refuses solves above ``max_condition``, so
the two could only differ on a code whose decoding is that badly conditioned.
"""

from __future__ import annotations

import numbers

import numpy as np

from gradcode._validation import as_generator, check_choice, check_int, check_real
from gradcode.codes.base import LinearCode
from gradcode.errors import NotDecodableError
from gradcode.schemes.base import Scheme
from gradcode.schemes.static import ProtocolError, StaticScheme, decode_rule, round_stragglers, task_schedule
from gradcode.sim.result import SimulationResult

#: fast path: rounds per vectorized chunk (bounds the (rounds, n, R) temporaries)
_CHUNK = 8192
#: show a progress bar (auto mode) past this many worker-rounds on the fast path ...
_FAST_PROGRESS = 20_000_000
#: ... and past this many rounds on the event path
_EVENT_PROGRESS = 2_000


def simulate(
    scheme_or_code,
    model,
    rounds: int,
    seed=0,
    close="decodable",
    *,
    method: str = "auto",
    progress: bool | None = None,
) -> SimulationResult:
    """Simulate ``rounds`` rounds of a code or scheme under a delay model, in virtual time.

    ``scheme_or_code``: a :class:`~gradcode.codes.LinearCode` (run as job ``t`` in round ``t``) or
    a fresh :class:`~gradcode.schemes.Scheme` (driven from round 0; it keeps its state, e.g. the
    straggler history, for inspection afterwards). ``model``: a delay model
    (:func:`gradcode.make_delay_model`), a registry name, or a ``(rounds, workers)`` array of
    seconds replayed as a trace. ``seed``: an int, SeedSequence or Generator for the model's draw.
    ``close``: ``"decodable"`` or the mu of the SGC mu-tolerance rule (see the module docstring).
    ``method``: ``"fast"`` (codes only: vectorized over rounds; a StaticScheme given here is run
    through its code and is not driven, so its history stays empty), ``"events"`` (the protocol
    path, message by message) or ``"auto"`` (fast for codes, events for schemes). ``progress``: show a
    progress bar on stderr (default: on long runs only).
    """
    rounds = check_int("rounds", rounds, minimum=1)
    mu = _check_close(close)
    check_choice("method", method, ("auto", "fast", "events"))
    model = _as_model(model)
    if isinstance(scheme_or_code, LinearCode):
        code, scheme = scheme_or_code, None
    elif isinstance(scheme_or_code, Scheme):
        code, scheme = None, scheme_or_code
    else:
        raise TypeError(
            "scheme_or_code must be a gradcode LinearCode (make_code) or a Scheme, got"
            f" {type(scheme_or_code).__name__}"
        )
    if method == "fast" and code is None:
        if isinstance(scheme, StaticScheme):
            code = scheme.code
        else:
            raise ValueError("method='fast' needs a static code; use method='events' for a dynamic scheme")
    use_fast = code is not None and method != "events"
    n = code.n if code is not None else check_int("scheme.n", scheme.n, minimum=1)
    rng = as_generator(seed)
    draw = model.draw(rounds, n, rng)
    if use_fast:
        show = progress if progress is not None else rounds * n >= _FAST_PROGRESS
        return _fast(code, model, draw, rounds, mu, close, seed, show)
    if scheme is None:
        scheme = StaticScheme(code)
    show = progress if progress is not None else rounds >= _EVENT_PROGRESS
    return _events(scheme, model, draw, rounds, mu, close, seed, show)


# ---------------------------------------------------------------------------------- helpers


def _check_close(close) -> float | None:
    if isinstance(close, str):
        check_choice("close", close, ("decodable",))
        return None
    if isinstance(close, numbers.Real) and not isinstance(close, bool):
        return check_real("close (the mu of the mu-tolerance rule)", close, minimum=0.0)
    raise TypeError(f"close must be 'decodable' or a number mu >= 0 (the SGC mu-rule), got {close!r}")


def _as_model(model):
    from gradcode.stragglers import make_delay_model

    if isinstance(model, str):
        return make_delay_model(model)
    if isinstance(model, np.ndarray):
        return make_delay_model("trace", delays=model)
    if not (hasattr(model, "draw") and hasattr(model, "message_time")):
        raise TypeError(
            "model must be a delay model (gradcode.make_delay_model), a model name or a"
            f" (rounds, workers) array of seconds; got {type(model).__name__}"
        )
    return model


def _progress(show: bool, total: int, what: str):
    from contextlib import nullcontext

    if not show:
        return nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    prog = Progress(
        TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=Console(stderr=True), transient=True,
    )
    return prog


def _name(obj) -> str:
    return repr(obj)


def _message_time(model, chunks: int) -> float:
    return float(model.message_time(1.0 / chunks))


# ---------------------------------------------------------------------------------- fast path


def _code_schedule(code: LinearCode) -> tuple[np.ndarray, np.ndarray]:
    """``(n, R)`` prefix loads of each worker's messages (padded with the last one) and ``R_w``."""
    scheme_tasks = StaticScheme(code).plan(0)
    R = code.messages_per_worker
    P = np.zeros((code.n, R))
    Rw = np.zeros(code.n, dtype=np.intp)
    for w, tasks in scheme_tasks.items():
        prefix, _ = task_schedule(tasks, code.partition_sizes)
        Rw[w] = prefix.size
        P[w, : prefix.size] = prefix
        P[w, prefix.size :] = prefix[-1] if prefix.size else 0.0
    return P, Rw


def _arrival_table(intercept, slope, P, Rw, c) -> np.ndarray:
    """``(rounds, n, R)`` arrival time of each message (``inf`` past a worker's last one)."""
    A = np.empty(intercept.shape + (P.shape[1],))
    for r in range(P.shape[1]):
        comp = intercept + slope * P[:, r]
        np.maximum(comp, 0.0, out=comp)
        if r:
            np.maximum(comp, A[:, :, r - 1], out=comp)
        if c:
            comp += c
        A[:, :, r] = comp
    short = np.flatnonzero(Rw < P.shape[1])
    for w in short:
        A[:, w, Rw[w]:] = np.inf
    return A


def _fast(code, model, draw, rounds, mu, close, seed, show) -> SimulationResult:
    n = code.n
    P, Rw = _code_schedule(code)
    rule = decode_rule(code)
    c = _message_time(model, code.chunks)
    round_times = np.empty(rounds)
    stragglers = np.empty((rounds, n), dtype=bool)
    arrivals = np.empty((rounds, n))
    finish = np.empty((rounds, n))
    waitout = np.zeros(rounds, dtype=bool)
    cols = np.arange(n)
    with _progress(show, rounds, "simulating") as prog:
        task = prog.add_task("rounds", total=rounds) if prog is not None else None
        for a in range(0, rounds, _CHUNK):
            b = min(rounds, a + _CHUNK)
            A = _arrival_table(draw.intercept[a:b], draw.slope[a:b], P, Rw, c)
            C = A[:, cols, Rw - 1]  # completion: last message of each worker
            T = rule.decode_time(A)
            bad = np.flatnonzero(~np.isfinite(T))
            if bad.size:
                raise NotDecodableError(
                    f"{_name(code)} cannot decode round {a + int(bad[0])} even with every message"
                )
            if mu is None:
                end = T
            else:
                cutoff = np.minimum((1.0 + mu) * C.min(axis=1), C.max(axis=1))
                wait = T > cutoff
                end = np.where(wait, T, cutoff)
                waitout[a:b] = wait
            # leading messages in by the close, and the arrival of the last of them
            if A.shape[2] == 1:
                last = A[:, :, 0]
                counts = (last <= end[:, None]).view(np.int8)
            else:
                counts = (A <= end[:, None, None]).sum(axis=2)
                last = np.take_along_axis(A, np.maximum(counts - 1, 0)[:, :, None], axis=2)[:, :, 0]
            strag = code.straggling(counts)
            round_times[a:b] = end
            stragglers[a:b] = strag
            arrivals[a:b] = np.where(strag | (counts == 0), -1.0, last)
            finish[a:b] = C
            if prog is not None:
                prog.update(task, completed=b)
    return SimulationResult(
        scheme=_name(code), model=_name(model), close=close, seed=_seed_repr(seed), method="fast",
        round_times=round_times, stragglers=stragglers, arrivals=arrivals,
        waitout_rounds=waitout, job_done_round=np.arange(rounds), finish_times=finish,
    )


def _seed_repr(seed):
    return seed if isinstance(seed, (int, type(None))) and not isinstance(seed, bool) else repr(seed)


# ---------------------------------------------------------------------------------- event path


def _events(scheme, model, draw, rounds, mu, close, seed, show) -> SimulationResult:
    n = scheme.n
    sizes = np.asarray(scheme.partition_sizes, dtype=np.float64)
    c = _message_time(model, getattr(scheme, "chunks", 1))
    observe = getattr(scheme, "observe_states", None)
    round_times = np.empty(rounds)
    stragglers = np.zeros((rounds, n), dtype=bool)
    arrivals = np.full((rounds, n), -1.0)
    finish = np.zeros((rounds, n))
    waitout = np.zeros(rounds, dtype=bool)
    done: dict[int, int] = {}
    started = -1  # highest job any plan gave work to: unfinished jobs are reported as -1
    cache: dict = {}
    with _progress(show, rounds, "simulating") as prog:
        task = prog.add_task("rounds", total=rounds) if prog is not None else None
        for t in range(rounds):
            if observe is not None:
                observe(t, draw.straggling[t])
            plan = scheme.plan(t)
            started = max([started, *(task.job for tasks in plan.values() for task in tasks)])
            times, wk, idx, comp = _round_events(plan, n, sizes, draw.intercept[t], draw.slope[t], c, cache, t)
            planned_msgs = np.bincount(wk, minlength=n)
            order = np.lexsort((idx, wk, times))
            times, wk, idx = times[order], wk[order], idx[order]
            N = times.size
            planned = np.flatnonzero(np.isfinite(comp))
            i = 0
            end = None

            def feed_until(limit):
                nonlocal i
                while i < N and times[i] <= limit:
                    scheme.on_result(t, int(wk[i]), int(idx[i]), None, float(times[i]))
                    i += 1

            if mu is not None and planned.size:
                cw = comp[planned]
                cutoff = min((1.0 + mu) * cw.min(), cw.max())
                feed_until(cutoff)
                if scheme.ready(t):
                    end = cutoff
                else:
                    waitout[t] = True
            if end is None:
                while i < N:
                    feed_until(times[i])
                    if scheme.ready(t):
                        end = float(times[i - 1])
                        break
                else:
                    if not (N == 0 and scheme.ready(t)):
                        raise NotDecodableError(
                            f"{_name(scheme)} cannot finish round {t} even with every message"
                        )
                    end = 0.0
            counts = np.bincount(wk[:i], minlength=n)  # leading messages in by the close
            last = np.full(n, -1.0)
            last[wk[:i]] = times[:i]  # sorted by time, so the last write is the latest message
            strag = round_stragglers(scheme, counts, planned_msgs)
            arrived = np.zeros(n, dtype=bool)
            arrived[planned] = ~strag[planned] & (counts[planned] > 0)
            round_times[t] = end
            stragglers[t, planned] = ~arrived[planned]
            arrivals[t] = np.where(arrived, last, -1.0)
            finish[t, planned] = comp[planned]
            for job, _ in scheme.close(t, frozenset(np.flatnonzero(arrived).tolist())):
                if job in done:
                    raise ProtocolError(f"{_name(scheme)} finished job {job} twice (rounds {done[job]} and {t})")
                done[job] = t
            if prog is not None and (t % 256 == 255 or t == rounds - 1):
                prog.update(task, completed=t + 1)
    jobs = max(max(done, default=-1), started) + 1
    job_done_round = np.full(max(jobs, rounds if isinstance(scheme, StaticScheme) else jobs), -1)
    for job, t in done.items():
        job_done_round[job] = t
    return SimulationResult(
        scheme=_name(scheme), model=_name(model), close=close, seed=_seed_repr(seed), method="events",
        round_times=round_times, stragglers=stragglers, arrivals=arrivals,
        waitout_rounds=waitout, job_done_round=job_done_round, finish_times=finish,
    )


def _round_events(plan, n, sizes, intercept, slope, c, cache, t):
    """Arrival times of every message of the round: ``(times, workers, indices, completion)``;
    ``completion[w]`` is the arrival of worker ``w``'s last message (``nan`` if it has no task)."""
    prefixes, workers = [], []
    for w, tasks in plan.items():
        if not 0 <= w < n:
            raise ProtocolError(f"plan({t}) names worker {w}; workers are 0..{n - 1}")
        prefix = _cached_schedule(tasks, sizes, cache)
        if prefix.size:
            prefixes.append(prefix)
            workers.append(w)
    comp = np.full(n, np.nan)
    if not prefixes:
        return np.zeros(0), np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp), comp
    counts = np.fromiter(map(len, prefixes), dtype=np.intp, count=len(prefixes))
    wk = np.repeat(np.asarray(workers, dtype=np.intp), counts)
    P = np.concatenate(prefixes)
    a = intercept[wk] + slope[wk] * P
    np.maximum(a, 0.0, out=a)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    idx = np.arange(P.size) - np.repeat(starts, counts)
    multi = np.flatnonzero(counts > 1)
    if multi.size:
        # messages of one worker go out in order over one link: a_i = max(c_i, a_{i-1}) + c,
        # in the same operation order as the fast path
        for j in multi:
            lo, hi = starts[j], starts[j] + counts[j]
            prev = None
            for r in range(lo, hi):
                v = a[r] if prev is None else max(a[r], prev)
                prev = v + c if c else v
                a[r] = prev
        single = np.repeat(counts == 1, counts)
        if c:
            a[single] += c
    elif c:
        a += c
    comp[wk[starts + counts - 1]] = a[starts + counts - 1]
    return a, wk, idx, comp


def _cached_schedule(tasks, sizes, cache) -> np.ndarray:
    """:func:`task_schedule` prefix loads, cached per (coefficients, partitions) of the tasks.

    Read-only coefficient arrays (every code's encoders) are keyed by identity and kept alive by
    the cache, so an id cannot be reused while cached; writeable ones by their bytes."""
    key = tuple(
        (id(task.coefficients), task.partitions) if not task.coefficients.flags.writeable
        else (task.coefficients.shape, task.coefficients.tobytes(), task.partitions)
        for task in tasks
    )
    hit = cache.get(key)
    if hit is not None:
        return hit[1]
    prefix, _ = task_schedule(tasks, sizes)
    if len(cache) < 65536:
        cache[key] = ([task.coefficients for task in tasks], prefix)
    return prefix
