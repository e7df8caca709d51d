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

Transports (``transport``): ``"star"`` (default) is the papers' model above: every message
travels to the master over its worker's own link. ``"collective"`` is the runtime's collective path
(:mod:`gradcode.runtime.replica`): a worker sends the master only a note (no payload: it arrives
``message_time(0)`` after its computation, the model's ``comm_latency``), the round closes by the
same rule on the notes, and then its members (the workers with a message in by the close) all-reduce
their weighted messages, a ring over ``k`` members on the same links: the round takes
``2 (k - 1) message_time(1 / k)`` more (:func:`~gradcode.schemes.timing.ring_allreduce_time`;
``2 (k - 1) comm_latency + 2 (k - 1) / k comm`` under a communication component), and nothing
travels back (each member steps its own replica). Its arrival tables hold the notes' arrivals. Only
schemes the runtime runs collectively (``Scheme.collective_support``) with a static code (those
with decoding coefficients; GC-DC, which the runtime also runs collectively, not yet here) are
accepted; they run on the fast path (a scheme given as such is closed
round by round as there).

The master's link (``master_link``): under the papers' model (``"separate"``, the default) the
master receives every worker's messages in parallel, each on its worker's own link, and sending
the parameters back costs nothing, so a star round costs one message time whatever ``n`` and the
collective gains only through its notes. ``"shared"`` gives the master one link like the
workers': each message crosses its worker's link, then queues for the master's (first come,
first served, store and forward: ``a_(j) = max(a_(j-1), r_(j)) + (message_time(f) -
message_time(0))`` over the round's messages in the order ``r`` they reach it), and the round then
sends the new parameters to the ``n`` workers over it, one after another: ``n (message_time(1) -
message_time(0)) + message_time(0)`` more. The collective path sends no payload to the master and
no parameters back, so the shared link changes nothing there. Static codes only, as the
collective.

Memory: rounds are processed in blocks (at most :data:`_BLOCK` rounds, fewer for large ``n``): the
delay model is drawn block by block, each block's rounds are computed and folded into running
summaries (:class:`~gradcode.sim.summary.RunStats`: counts, exact total, variance, a batch-means
confidence interval, quantiles exact or within 1e-4 relative), and the block is dropped. The
per-round tables (``round_times``, ``stragglers``, ``arrivals``, ``finish_times``,
``waitout_rounds``, ``job_done_round``) are kept only with ``records=True``, or by default
(``records=None``) while they fit in :data:`AUTO_RECORDS_BYTES`; so memory does not grow with
the number of rounds unless records are asked for. Records or not, the draws, the rounds and the
summaries are the same (the same blocks are drawn and summarised; the records are a copy).

Drawing by blocks gives exactly the rounds of one whole-run draw and leaves the Generator where
that draw does: each model says how it streams (:meth:`DelayModel.draw_blocks`): models whose draw
is Generator calls over ``(rounds, n)`` arrays transformed row by row (``fixed``, ``partial``,
``bernoulli``, ``shifted-exp``) draw per block, traces replay their rows per block, and the Markov
and shared-access models (``gilbert-elliot``, ``time-varying``, ``shared-access``) carry their
state from block to block, reading each array of the whole draw from its own fork of the
Generator's stream (PCG64 and Philox can jump ahead; another bit generator gets one whole draw,
sliced). Tests check every model bit for bit.

Two paths give identical results on the same draw (tests check it): the *fast path* for a
:class:`~gradcode.codes.LinearCode` computes every round at once from the code's
:func:`~gradcode.schemes.static.decode_rule` (an order statistic for MDS-like codes, per group
for FRC, per cluster for GC-SC, binary search with ``can_decode`` otherwise); the *event path*
runs a :class:`~gradcode.schemes.Scheme` through the protocol that dynamic schemes and the Ray
runtime use. For a scheme that plays batched rounds (:attr:`Scheme.batched_rounds <gradcode.schemes.Scheme.batched_rounds>`: the
sequential codes, GC-DC, static codes) the event path sorts a round's messages at once, asks the
scheme after how many of them it is ready (``ready_after``) and hands them over in one call
(``on_results``); for any other scheme it feeds each message with ``on_result`` and asks
``ready`` after each instant. Both give the same results bit for bit (tests compare every
record), and the per-message path stays the reference (``BATCHED = False`` selects it). A
scheme with :attr:`Scheme.compiled_rounds <gradcode.schemes.Scheme.compiled_rounds>` (SR-SGC,
M-SGC, GC-DC) goes further: a whole block of rounds is one compiled call (:meth:`Scheme.play_rounds`),
again with the same results bit for bit (``COMPILED = False`` selects the batched rounds). A
:class:`~gradcode.schemes.StaticScheme`'s rounds do not depend on each other, so they go by whole
blocks, as on the fast path, each closed in the scheme (``close_rounds``: its straggler history).
In simulation (no payloads) a static code's exact rule decides decodability on every path (for
CRC and GC-SC "any n - s" holds with probability one over the code's random draw); a round that
decodes real messages still solves, and refuses a solve above ``max_condition``.
"""

from __future__ import annotations

import numpy as np

from gradcode._validation import as_generator, check_choice, check_closing_rule, check_int
from gradcode.codes.base import LinearCode
from gradcode.errors import CollectiveUnsupportedError, NotDecodableError
from gradcode.schemes.base import ProtocolError
from gradcode.schemes.factory import as_scheme
from gradcode.schemes.static import code_loads, task_schedule
from gradcode.schemes.timing import message_arrivals, ring_allreduce_time
from gradcode.sim.result import RoundRecords, SimulationResult, records_nbytes
from gradcode.sim.summary import RunStats

#: rounds per block (fewer for large n: see _block_rounds); bounds the draw and (rounds, n, R)
#: temporaries held at once
_BLOCK = 8192
#: ... and the worker-messages per block, so that a block's temporaries stay near 8 MiB per array
_BLOCK_CELLS = 1 << 20
#: records=None keeps the per-round tables while they take at most this many bytes
AUTO_RECORDS_BYTES = 64 << 20
#: show a progress bar (auto mode) past this many worker-rounds on the fast path ...
_FAST_PROGRESS = 20_000_000
#: ... and past this many rounds on the event path
_EVENT_PROGRESS = 2_000


#: play rounds of batched schemes (:attr:`Scheme.batched_rounds`) with array calls; tests turn it
#: off to compare with the per-message path
BATCHED = True
#: ... and whole blocks of rounds of compiled schemes (:attr:`Scheme.compiled_rounds`) in one call;
#: tests turn it off to compare with the batched path
COMPILED = True

#: how a round's messages reach the master (module docstring, "Transports")
TRANSPORTS = ("star", "collective")
#: the master's link: each worker's own (the papers' model) or one for all (module docstring)
MASTER_LINKS = ("separate", "shared")

#: the most rounds one simulation takes (about 20 minutes at the fast path's best rate)
MAX_ROUNDS = 10**9


def simulate(
    scheme_or_code,
    model,
    rounds: int,
    seed=0,
    close="decodable",
    *,
    method: str = "auto",
    progress: bool | None = None,
    records: bool | None = None,
    waitout: str = "decodable",
    transport: str = "star",
    master_link: str = "separate",
) -> SimulationResult:
    """Simulate ``rounds`` rounds of a code or scheme under a delay model, in virtual time.

    ``scheme_or_code``: a :class:`~gradcode.codes.LinearCode` (run as job ``t`` in round ``t``) or
    a fresh :class:`~gradcode.schemes.Scheme` (driven from round 0; it keeps its state, e.g. the
    straggler history, for inspection afterwards). ``model``: a delay model
    (:func:`gradcode.make_delay_model`), a registry name, or a ``(rounds, workers)`` array of
    seconds replayed as a trace. ``seed``: an int, SeedSequence or Generator for the model's draw.
    ``close``: ``"decodable"`` or the mu of the SGC mu-tolerance rule (see the module docstring).
    ``waitout``: what a round the mu-deadline leaves unresolved waits for: ``"decodable"`` (the
    first instant its messages decode) or ``"all"`` (every worker's results: the SGC paper's
    rule, "it will wait out all the workers", Sec. 2; what its replays and ``gradcode tune`` use).
    ``method``: ``"fast"`` (codes only: vectorized over rounds; a StaticScheme given here is run
    through its code and is not driven, so its history stays empty), ``"events"`` (the protocol
    path: message by message, a round at once for batched schemes or a block of rounds in one
    compiled call for SR-SGC, M-SGC and GC-DC, see the module docstring)
    or ``"auto"`` (fast for codes, events for schemes). ``progress``: show a progress bar on
    stderr (default: on long runs only), or a callable ``progress(done)`` called with the rounds
    completed as the run advances (a caller's own bar; no bar is shown then).
    ``records``: keep the per-round tables (``round_times``, ``stragglers``, ``arrivals``,
    ``finish_times``, ... of the result; what traces, arrival tables, per-round CSVs and plots
    need): ``True`` always, ``False`` never
    (memory then does not grow with ``rounds``), ``None`` (default) while they take at most
    :data:`AUTO_RECORDS_BYTES` (``17 n + 17`` bytes a round). The summaries are the same either way.
    ``transport``: ``"star"`` (the papers' model: every message to the master) or ``"collective"``
    (notes to the master, then a ring all-reduce among the round's members; module docstring).
    ``master_link``: ``"separate"`` (the papers' model: the master receives on every worker's link
    at once) or ``"shared"`` (one link at the master: the star's messages queue for it and the new
    parameters go out over it; module docstring).
    """
    rounds = check_int("rounds", rounds, minimum=1)
    if rounds > MAX_ROUNDS:
        raise ValueError(f"rounds must be at most {MAX_ROUNDS:.0e}, got {rounds:.3g}: at the simulator's ~1e6 rounds a"
                         f" second at best, that run would take {rounds / 1e6 / 86400:.3g} days")
    mu = check_closing_rule(close, waitout)
    wait_all = waitout == "all"
    check_choice("method", method, ("auto", "fast", "events"))
    if records is not None and not isinstance(records, (bool, np.bool_)):
        raise TypeError(f"records must be True, False or None (keep them while small), got {records!r}")
    model = _as_model(model)
    given_code = isinstance(scheme_or_code, LinearCode)
    scheme = as_scheme(scheme_or_code, what="scheme_or_code")
    code = scheme.static_code
    if method == "fast" and code is None:
        raise ValueError("method='fast' needs a static code; use method='events' for a dynamic scheme")
    # "auto": the vectorized path for a code; a scheme given as such is driven (its state kept)
    use_fast = code is not None and (method == "fast" or (method == "auto" and given_code))
    n = check_int("scheme.n", scheme.n, minimum=1)
    if records is None:
        records = records_nbytes(rounds, n) <= AUTO_RECORDS_BYTES
    rng = as_generator(seed)
    links = _links(scheme, model, transport, master_link, fast=use_fast or scheme.batched_rounds,
                   name=_name(scheme_or_code))
    if use_fast or links is not None or (BATCHED and code is not None and scheme.batched_rounds):
        # a static scheme's rounds are independent: whole blocks at once, as on the fast path,
        # with each round closed in the scheme (its straggler history)
        show = progress if progress is not None else rounds * n >= _FAST_PROGRESS
        draws = draw_blocks(model, rounds, n, rng, _block_rounds(n * code.messages_per_worker))
        return _fast(code, model, draws, rounds, (mu, wait_all), close, seed, show, bool(records),
                     scheme=None if use_fast else scheme, links=links)
    show = progress if progress is not None else rounds >= _EVENT_PROGRESS
    draws = draw_blocks(model, rounds, n, rng, _block_rounds(n))
    return _events(scheme, model, draws, rounds, (mu, wait_all), close, seed, show, bool(records))


# ---------------------------------------------------------------------------------- helpers


def _as_model(model):
    from gradcode.stragglers import make_delay_model

    if isinstance(model, str):
        return make_delay_model(model)
    if isinstance(model, np.ndarray):
        return make_delay_model("trace", delays=model)
    if not all(hasattr(model, a) for a in ("draw", "draw_blocks", "message_time")):
        raise TypeError(
            "model must be a delay model (gradcode.make_delay_model), a model name or a"
            f" (rounds, workers) array of seconds; got {type(model).__name__}"
        )
    return model


def _block_rounds(cells_per_round: int) -> int:
    """Rounds per block: :data:`_BLOCK`, fewer when a round has many worker-messages."""
    return int(min(_BLOCK, max(64, _BLOCK_CELLS // max(1, cells_per_round))))


def draw_blocks(model, rounds: int, n: int, rng, block: int):
    """Yield ``(a, b, draw)``: the model's draw of rounds ``a .. b - 1`` in blocks of ``block``
    rounds, equal to the rows ``a:b`` of ``model.draw(rounds, n, rng)`` (and leaving ``rng`` in
    the same state): :meth:`DelayModel.draw_blocks`, where each model says how it streams
    (row-independent models draw per block, traces replay per block, the Markov models read forks
    of the Generator's stream; a model that cannot stream is drawn once and sliced). A draw with a
    non-finite intercept or slope (a model of one's own: the built-in ones refuse them) is an
    error here, before any path times it: NaN and infinity have no arrival order to simulate."""
    for a, b, draw in model.draw_blocks(rounds, n, rng, block):
        bad = ~(np.isfinite(draw.intercept) & np.isfinite(draw.slope))
        if bad.any():
            r, w = (int(x) for x in np.argwhere(bad)[0])
            raise ValueError(
                f"delay model {model!r} drew a non-finite delay for worker {w} in round {a + r} (intercept"
                f" {float(np.broadcast_to(draw.intercept, bad.shape)[r, w])}, slope"
                f" {float(np.broadcast_to(draw.slope, bad.shape)[r, w])}): delays must be finite seconds (a worker"
                " that never answers is a large finite delay)")
        yield a, b, draw


class _Callback:
    """``progress=fn``: the two calls the paths make on a rich Progress, passed on to ``fn(done)``."""

    def __init__(self, fn):
        self.fn = fn

    def add_task(self, *args, **kwargs):
        return None

    def update(self, task, *, completed: int) -> None:
        self.fn(completed)


def _progress(show, total: int, what: str):
    from contextlib import nullcontext

    if callable(show):
        return nullcontext(_Callback(show))
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


def _arrival_table(intercept, slope, P, Rw, c) -> np.ndarray:
    """``(rounds, n, R)`` arrival time of each message (``inf`` past a worker's last one)."""
    A = message_arrivals(intercept, slope, P, c)
    for w in np.flatnonzero(Rw < P.shape[1]):
        A[:, w, Rw[w]:] = np.inf
    return A


class _Sink:
    """Where the rounds of a run go, block by block: always the running summaries; with
    ``records``, also the per-round tables (allocated once for the whole run)."""

    def __init__(self, rounds: int, n: int, records: bool):
        self.stats = RunStats(rounds, n)
        self.records = records
        if records:  # every row is written by put()
            self.round_times = np.empty(rounds)
            self.stragglers = np.empty((rounds, n), dtype=bool)
            self.arrivals = np.empty((rounds, n))
            self.finish = np.empty((rounds, n))
            self.waitout = np.zeros(rounds, dtype=bool)

    def put(self, a, b, round_times, stragglers, waitout, write_tables=None):
        """Rounds ``a .. b - 1``. ``write_tables(arrivals, finish)`` fills those rounds' rows of
        the arrival and finish tables in place; it is called only with records, so that runs
        without them skip that work."""
        self.stats.add_block(round_times, stragglers, waitout)
        if self.records:
            self.round_times[a:b] = round_times
            self.stragglers[a:b] = stragglers
            if waitout is not None:
                self.waitout[a:b] = waitout
            write_tables(self.arrivals[a:b], self.finish[a:b])

    def result(self, job_done_round, **meta) -> SimulationResult:
        recs = None
        if self.records:
            recs = RoundRecords(self.round_times, self.stragglers, self.arrivals, self.waitout,
                                job_done_round(), self.finish)
        return SimulationResult(stats=self.stats, round_records=recs, **meta)


def _links(scheme, model, transport: str, master_link: str, *, fast: bool, name: str):
    """The :class:`_Links` of a run other than the papers' star (None for that one), after
    refusing what the simulator cannot time that way: the collective path for a scheme without
    reductions, and either for a scheme without a static code whose rounds batch (``fast``: they
    go on the fast path)."""
    check_choice("transport", transport, TRANSPORTS)
    check_choice("master_link", master_link, MASTER_LINKS)
    collective, shared = transport == "collective", master_link == "shared"
    code = scheme.static_code
    if collective:
        why = scheme.collective_support()
        if why is None and code is None:
            why = ("the simulator plays the collective path for static codes (their rounds on the fast path); a"
                   " dynamic scheme's rounds are not timed with a reduction yet")
        if why is not None:
            raise CollectiveUnsupportedError(f"transport='collective' cannot simulate {name}: {why}")
    if not (collective or shared):
        return None
    if code is None or not fast:
        raise ValueError(f"{'master_link=' + repr(master_link) if shared else 'transport=' + repr(transport)} times"
                         f" static codes on the fast path; {name} has no static code, or its rounds"
                         " do not batch (verification waits for spare results message by message)")
    return _Links(model, code.chunks, collective, shared)


class _Links:
    """How a round's messages reach the master and what the round costs after its close (module
    docstring, "Transports" and "The master's link"): the papers' star (``"star"``), the star
    through the master's one link (``shared``) or the collective path (``collective``)."""

    def __init__(self, model, chunks: int, collective: bool = False, shared: bool = False):
        self.model, self.collective, self.shared = model, collective, shared and not collective
        self.latency = float(model.message_time(0.0))
        self.whole = float(model.message_time(1.0))
        # a note carries no payload; a message 1 / chunks of the gradient
        self.message = self.latency if collective else _message_time(model, chunks)

    def arrivals(self, A: np.ndarray) -> np.ndarray:
        """The messages' arrivals at the master, ``A`` at the end of their workers' links."""
        return through_one_link(A, self.message - self.latency) if self.shared else A

    def after_close(self, end: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Each round's end, its close ``end`` plus what follows it: the members' ring (the
        workers with a message in by the close), or the parameters to the ``n`` workers one after
        another on the master's one link."""
        if self.collective:
            return end + ring_allreduce_time((counts > 0).sum(axis=1), self.model.message_time)
        if self.shared:
            return end + counts.shape[1] * (self.whole - self.latency) + self.latency
        return end

    def text(self) -> str:
        """What the result says of its transport, with the link parameters the times came from."""
        if self.collective:
            return (f"collective (notes {self.latency:.6g} s, then a ring all-reduce over the k members:"
                    f" 2 (k - 1) message_time(1 / k), message_time(1) = {self.whole:.6g} s)")
        if self.shared:
            return (f"star, one link at the master (messages queue for it; the parameters go back over it:"
                    f" message_time(1) = {self.whole:.6g} s)")
        return "star"


def _fast(code, model, draws, rounds, rule, close, seed, show, records, scheme=None,
          links: _Links | None = None) -> SimulationResult:
    """The vectorized path, block by block (``rule``: ``(mu, wait_all)``, the closing rule). With
    ``scheme`` (a batched scheme with a static code, driven on the event path), each block's
    rounds are also closed in the scheme, with the rows its own ``close`` would record (the
    workers not in: stragglers and workers with nothing in). ``links``: how messages reach the
    master (:class:`_Links`; default the papers' star)."""
    mu, wait_all = rule
    n = code.n
    P, Rw = code_loads(code)
    rule = code.decode_rule()
    links = links if links is not None else _Links(model, code.chunks)
    sink = _Sink(rounds, n, records)
    cols = np.arange(n)
    with _progress(show, rounds, "simulating") as prog:
        task = prog.add_task("rounds", total=rounds) if prog is not None else None
        for a, b, draw in draws:
            A = links.arrivals(_arrival_table(draw.intercept, draw.slope, P, Rw, links.message))
            # completion: the last message of each worker (a view for single-message codes)
            C = A[:, :, 0] if A.shape[2] == 1 else A[:, cols, Rw - 1]
            T = rule.decode_time(A)
            bad = np.flatnonzero(~np.isfinite(T))
            if bad.size:
                raise NotDecodableError(
                    f"{_name(code)} cannot decode round {a + int(bad[0])} even with every message"
                )
            if mu is None:
                end, wait = T, None
            else:
                cutoff = np.minimum((1.0 + mu) * C.min(axis=1), C.max(axis=1))
                wait = T > cutoff
                end = np.where(wait, C.max(axis=1) if wait_all else T, cutoff)
            # leading messages in by the close (and, for the records, the arrival of the last)
            if A.shape[2] == 1:
                counts = (C <= end[:, None]).view(np.int8)
            else:
                counts = (A <= end[:, None, None]).sum(axis=2)
            strag = code.straggling(counts)

            def write_tables(arrivals, finish, A=A, C=C, counts=counts, strag=strag):
                if A.shape[2] == 1:
                    np.copyto(arrivals, C)
                else:
                    np.copyto(arrivals, np.take_along_axis(A, np.maximum(counts - 1, 0)[:, :, None], axis=2)[:, :, 0])
                np.copyto(arrivals, -1.0, where=strag | (counts == 0))
                np.copyto(finish, C)

            if scheme is not None:
                scheme.close_rounds(a, strag | (counts == 0))
            sink.put(a, b, links.after_close(end, counts), strag, wait, write_tables)
            if prog is not None:
                prog.update(task, completed=b)
    sink.stats.jobs_done = rounds
    return sink.result(
        lambda: np.arange(rounds),
        scheme=_name(code if scheme is None else scheme), model=_name(model), close=close, seed=_seed_repr(seed),
        method="fast" if scheme is None else "events", transport=links.text(),
    )


def through_one_link(A: np.ndarray, seconds: float) -> np.ndarray:
    """When each message of ``A`` (``(rounds, n, R)`` times it reaches the master's link, ``inf``
    for none) is through that link, which passes one message at a time in ``seconds``, first come
    first served: sorted by arrival ``r``, ``a_(j) = max(a_(j-1), r_(j)) + seconds``, i.e.
    ``(j + 1) seconds + max_{i <= j} (r_(i) - i seconds)``, one cumulative maximum a round."""
    flat = A.reshape(A.shape[0], -1)
    order = np.argsort(flat, axis=1, kind="stable")
    r = np.take_along_axis(flat, order, axis=1)
    j = np.arange(r.shape[1])
    with np.errstate(invalid="ignore"):  # inf - j s stays inf: no message there
        out = (j + 1) * seconds + np.maximum.accumulate(r - j * seconds, axis=1)
    back = np.empty_like(flat)
    np.put_along_axis(back, order, out, axis=1)
    return back.reshape(A.shape)


def _seed_repr(seed):
    return seed if isinstance(seed, (int, type(None))) and not isinstance(seed, bool) else repr(seed)


# ---------------------------------------------------------------------------------- event path


class _JobLedger:
    """The jobs a run has finished, to catch a scheme finishing one twice, in memory bounded by
    the jobs finished out of order: every job below ``floor`` is done, ``ahead`` maps the done
    jobs at or above it to their round. (A job a scheme never finishes keeps the jobs after it
    in ``ahead``.) With records, ``rounds_of`` keeps every job's round for ``job_done_round``."""

    def __init__(self, records: bool):
        self.floor = 0
        self.ahead: dict[int, int] = {}
        self.count = 0
        self.rounds_of: dict[int, int] | None = {} if records else None

    def finish(self, job: int, t: int, scheme) -> None:
        if job < self.floor or job in self.ahead:
            first = self.ahead.get(job)
            if first is None and self.rounds_of is not None:
                first = self.rounds_of.get(job)
            when = f"rounds {first} and {t}" if first is not None else f"again in round {t}"
            raise ProtocolError(f"{_name(scheme)} finished job {job} twice ({when})")
        self.count += 1
        if self.rounds_of is not None:
            self.rounds_of[job] = t
        if job == self.floor:
            self.floor += 1
            while self.floor in self.ahead:
                del self.ahead[self.floor]
                self.floor += 1
        else:
            self.ahead[job] = t

    def highest(self) -> int:
        return max(self.floor - 1, max(self.ahead, default=-1))


class _BlockTables:
    """The per-round tables of one block of rounds ``[a, b)`` on the event path, filled by a
    compiled run of rounds (:meth:`put_played`) or round by round (:meth:`put_round`); the
    arrival and finish tables only when ``records`` are kept."""

    def __init__(self, m: int, n: int, records: bool):
        self.round_times = np.empty(m)
        self.stragglers = np.zeros((m, n), dtype=bool)
        self.waitout = np.zeros(m, dtype=bool)
        self.arrivals = np.full((m, n), -1.0) if records else None
        self.finish = np.zeros((m, n)) if records else None

    def put_played(self, k: int, played) -> int:
        """Rounds ``k, k + 1, ...`` of the block from a scheme's compiled ``play_rounds``; their count."""
        done = played.end.shape[0]
        self.round_times[k:k + done] = played.end
        self.waitout[k:k + done] = played.waitout
        self.stragglers[k:k + done] = played.stragglers
        if self.arrivals is not None:
            self.arrivals[k:k + done] = played.arrivals
            self.finish[k:k + done] = played.finish
        return done

    def put_round(self, k: int, end: float, planned, arrived, last, comp) -> None:
        self.round_times[k] = end
        self.stragglers[k, planned] = ~arrived[planned]
        if self.arrivals is not None:
            self.arrivals[k] = np.where(arrived, last, -1.0)
            self.finish[k, planned] = comp[planned]

    def write_tables(self, arr, fin) -> None:
        np.copyto(arr, self.arrivals)
        np.copyto(fin, self.finish)


def _events(scheme, model, draws, rounds, rule, close, seed, show, records) -> SimulationResult:
    mu = rule[0]
    c = _message_time(model, scheme.chunks)
    sink = _Sink(rounds, scheme.n, records)
    ledger = _JobLedger(records)
    started = -1  # highest job any plan gave work to: unfinished jobs are reported as -1
    step = _ProtocolRound(scheme, c, rule)
    blocks = BATCHED and scheme.batched_rounds and COMPILED and scheme.compiled_rounds
    with _progress(show, rounds, "simulating") as prog:
        task = prog.add_task("rounds", total=rounds) if prog is not None else None
        for a, b, draw in draws:
            tables = _BlockTables(b - a, scheme.n, records)
            t = a
            while t < b:
                k = t - a
                if blocks:  # as many rounds as the scheme's compiled code plays, then one by the protocol
                    played = scheme.play_rounds(t, draw.intercept[k:], draw.slope[k:], c, mu, rule[1], records,
                                                draw.straggling[k:], None if draw.rates is None else draw.rates[k:])
                    started = max(started, played.last_job)
                    for job, u in zip(played.jobs.tolist(), played.job_rounds.tolist()):
                        ledger.finish(job, u, scheme)
                    t += tables.put_played(k, played)
                    if t == b:
                        break
                started = max(started, step(t, draw, t - a, tables, ledger))
                t += 1
                if prog is not None and (t % 256 == 0 or t == rounds):
                    prog.update(task, completed=t)
            if blocks and prog is not None:
                prog.update(task, completed=b)
            sink.put(a, b, tables.round_times, tables.stragglers, tables.waitout if mu is not None else None,
                     tables.write_tables)
    sink.stats.jobs_done = ledger.count

    def job_done_round():
        jobs = max(ledger.highest(), started) + 1
        out = np.full(max(jobs, rounds if scheme.static_code is not None else jobs), -1)
        for job, t in ledger.rounds_of.items():
            out[job] = t
        return out

    return sink.result(
        job_done_round,
        scheme=_name(scheme), model=_name(model), close=close, seed=_seed_repr(seed), method="events",
    )


class _ProtocolRound:
    """One round of the event path by the scheme's protocol: observe the round's states, plan
    (a batched plan of loads, or tasks), play the arrivals, close; returns the highest job the
    plan gave work to."""

    def __init__(self, scheme, c: float, rule):
        self.scheme, self.c, self.rule = scheme, c, rule
        self.batched = BATCHED and scheme.batched_rounds
        self.sizes = np.asarray(scheme.partition_sizes, dtype=np.float64)
        self.cache: dict = {}

    def __call__(self, t: int, draw, k: int, tables: _BlockTables, ledger) -> int:
        scheme = self.scheme
        scheme.observe_states(t, draw.straggling[k], None if draw.rates is None else draw.rates[k])
        if self.batched:
            plan = scheme.plan_loads(t)
            started = plan.last_job
            end, tables.waitout[k], planned, arrived, last, comp = _play_batched(
                scheme, t, plan, draw.intercept[k], draw.slope[k], self.c, self.rule)
        else:
            plan = scheme.plan(t)
            started = max([-1, *(task.job for tasks in plan.values() for task in tasks)])
            end, tables.waitout[k], planned, arrived, last, comp = _play_round(
                scheme, t, plan, scheme.n, self.sizes, draw.intercept[k], draw.slope[k], self.c, self.cache,
                self.rule)
        tables.put_round(k, end, planned, arrived, last, comp)
        for job, _ in scheme.close(t, arrived):
            ledger.finish(job, t, scheme)
        return started


def _play_round(scheme, t, plan, n, sizes, intercept, slope, c, cache, rule):
    """Feed round ``t``'s messages to the scheme in time order until it closes under ``rule``,
    ``(mu, wait_all)`` (see the module docstring's closing rules). Returns ``(end, waited_out, planned, arrived, last, completion)``:
    the round's length, whether the mu-rule had to wait it out, the workers given a task, those
    that were not stragglers, the arrival of each worker's last message delivered by the close
    (-1 if none) and the arrival of each worker's last message (``nan`` without a task)."""
    mu, wait_all = rule
    times, wk, idx, comp = _round_events(plan, n, sizes, intercept, slope, c, cache, t)
    planned_msgs = np.bincount(wk, minlength=n)
    order = np.lexsort((idx, wk, times))
    times, wk, idx = times[order], wk[order], idx[order]
    N = times.size
    planned = np.flatnonzero(np.isfinite(comp))
    i = 0
    end = None
    waited = False

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
            waited = True
            if wait_all and N:  # the paper's wait-out: every worker's results, then close
                feed_until(times[-1])
                if not scheme.ready(t):
                    raise NotDecodableError(f"{_name(scheme)} cannot finish round {t} even with every message")
                end = float(times[-1])
    if end is None:
        while i < N:
            feed_until(times[i])
            if scheme.ready(t):
                end = float(times[i - 1])
                break
        else:
            if not (N == 0 and scheme.ready(t)):
                raise NotDecodableError(f"{_name(scheme)} cannot finish round {t} even with every message")
            end = 0.0
    counts = np.bincount(wk[:i], minlength=n)  # leading messages in by the close
    last = np.full(n, -1.0)
    last[wk[:i]] = times[:i]  # sorted by time, so the last write is the latest message
    strag = scheme.round_stragglers(counts, planned_msgs)
    arrived = np.zeros(n, dtype=bool)
    arrived[planned] = ~strag[planned] & (counts[planned] > 0)
    return end, waited, planned, arrived, last, comp


def _play_batched(scheme, t, plan, intercept, slope, c, rule):
    """:func:`_play_round` for a batched scheme (:attr:`Scheme.batched_rounds`), with the same
    results bit for bit: the round's messages are timed and sorted at once, the scheme says after
    how many of them it is ready (:meth:`Scheme.ready_after`), and it receives them in one call
    (:meth:`Scheme.on_results`). The stable sort of the times in (worker, index) order is the
    per-message path's order (time, then worker, then index)."""
    mu, wait_all = rule
    loads, msgs = plan.loads, plan.messages
    n, R = loads.shape
    A = message_arrivals(intercept, slope, loads, c)
    if R == 1:
        planned = np.flatnonzero(msgs)
        flat = A[:, 0] if planned.size == n else A[planned, 0]
        workers = np.arange(n, dtype=np.intp) if planned.size == n else planned
        indices = np.zeros(flat.size, dtype=np.intp)
    else:
        valid = np.arange(R) < msgs[:, None]
        flat = A[valid]
        workers, indices = np.nonzero(valid)
        planned = np.flatnonzero(msgs)
    order = np.argsort(flat, kind="stable")
    times, wk, idx = flat[order], workers[order], indices[order]
    N = times.size
    comp = np.full(n, np.nan)
    comp[planned] = A[planned, msgs[planned] - 1]
    need = scheme.ready_after(t, wk, idx)
    fed = 0
    end = None
    waited = False
    if mu is not None and planned.size:
        cw = comp[planned]
        cutoff = min((1.0 + mu) * cw.min(), cw.max())
        fed = int(np.searchsorted(times, cutoff, side="right"))
        if need is not None and need <= fed:
            end = cutoff
        else:
            waited = True
            if wait_all and N:
                if need is None:
                    raise NotDecodableError(f"{_name(scheme)} cannot finish round {t} even with every message")
                fed, end = N, float(times[-1])
    if end is None:
        if need is None or (N == 0 and need > 0):
            raise NotDecodableError(f"{_name(scheme)} cannot finish round {t} even with every message")
        if N == 0:
            end = 0.0
        else:  # the first instant after which it is ready; messages at that instant count
            fed = int(np.searchsorted(times, times[max(need, fed + 1) - 1], side="right"))
            end = float(times[fed - 1])
    scheme.on_results(t, wk[:fed], idx[:fed], times[:fed])
    counts = np.bincount(wk[:fed], minlength=n)
    last = np.full(n, -1.0)
    last[wk[:fed]] = times[:fed]
    strag = scheme.round_stragglers(counts, msgs)
    arrived = np.zeros(n, dtype=bool)
    arrived[planned] = ~strag[planned] & (counts[planned] > 0)
    return end, waited, planned, arrived, last, comp


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
    workers = np.asarray(workers, dtype=np.intp)
    R = int(counts.max())
    flat = np.concatenate(prefixes)
    if R == 1:
        dense = flat[:, None]
    else:  # pad each worker's prefixes with its last one: the real messages' times are unchanged
        starts = np.cumsum(counts) - counts
        dense = flat[starts[:, None] + np.minimum(np.arange(R), counts[:, None] - 1)]
    A = message_arrivals(intercept[workers], slope[workers], dense, c)
    valid = np.arange(R) < counts[:, None]
    a = A[valid]
    wk = np.repeat(workers, counts)
    idx = np.nonzero(valid)[1]
    comp[workers] = A[np.arange(workers.size), counts - 1]
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
