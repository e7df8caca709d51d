"""The direct channels between the driver and its workers (gradcode.runtime.channel): the wire
format, the worker's loop without Ray (messages equal to the core's, aborts, errors, stale data,
strangers refused), and on Ray: both transports train exactly, parameters too large for a channel
take the object store, a worker without a channel takes actor calls beside the others, and a
worker whose process died gets its channel back once Ray restarted it."""

import math
import pickle
import socket
import threading
import time

import numpy as np
import pytest

from gradcode.codes.messages import Message
from gradcode.problems import DataSpec, make_dataset, make_problem, partition_rows
from gradcode.runtime import WireTask, WorkerCore
from gradcode.runtime.channel import (
    ChannelClosed,
    DriverChannels,
    WorkerChannel,
    WorkerTaskError,
    recv_frame,
    send_frame,
)
from runtime_util import rel
from test_runtime import DATA, SEED, reference, run  # the runtime tests' small run and its GD reference


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_frames_carry_arrays_bit_for_bit_messages_with_their_scales_and_large_buffers(pair):
    a, b = pair
    rng = np.random.default_rng(0)
    small = rng.standard_normal(7)
    big = rng.standard_normal(300_000).astype(np.float32)  # over the one-write size
    half = Message(rng.standard_normal(5).astype(np.float16), 3.5, 2.0 ** -8)
    sent = (4, "message", [small, big, half, np.arange(6).reshape(2, 3)[:, ::2]])
    out = {}
    reader = threading.Thread(target=lambda: out.setdefault("frame", recv_frame(b)))
    reader.start()
    send_frame(a, sent)
    reader.join(10)
    t, kind, (s, g, h, strided) = out["frame"]
    assert (t, kind) == (4, "message")
    np.testing.assert_array_equal(s, small)
    assert g.dtype == np.float32 and np.array_equal(g, big)
    assert isinstance(h, Message) and h.dtype == np.float16 and np.array_equal(h, half)
    assert (h.scale, h.factor) == (half.scale, half.factor)
    np.testing.assert_array_equal(strided, [[0, 2], [3, 5]])


def test_a_closed_connection_is_an_error_not_a_partial_frame(pair):
    a, b = pair
    a.sendall(b"\x00\x00\x00\x10")  # half a header, then the writer dies
    a.close()
    with pytest.raises(ChannelClosed):
        recv_frame(b)


class _Holder:
    """What a worker actor gives its channel: the core it computes with and the data it holds."""

    def __init__(self, core, generation=0):
        self.core, self._generation = core, generation

    def check(self, generation):
        from gradcode.runtime.actors import StaleWorkerError

        if generation != self._generation:
            raise StaleWorkerError(f"holds data {self._generation}, the task needs {generation}")


@pytest.fixture
def served():
    """A worker's channel in this process (no Ray) over a small logistic problem, and a driver
    connected to it as worker 0."""
    ds = make_dataset(DataSpec("tandon-synthetic", DATA, seed=SEED))
    problem = make_problem("logistic", ds)
    rows = partition_rows(problem.n_train, np.full(4, 0.25))
    holder = _Holder(WorkerCore(0, problem, {0: rows[0], 1: rows[1]}, chunks=1))
    channel = WorkerChannel(holder, "127.0.0.1", holder.check)
    token = b"t" * 32
    address = channel.listen(token)
    driver = DriverChannels()
    driver.connect(0, address, token)
    yield driver, holder, problem, rows, address
    driver.close_all()


def _frames(driver, until, timeout=10.0):
    out, end = [], time.monotonic() + timeout
    while not until(out) and time.monotonic() < end:
        out += [f for _, f in driver.wait(0.5)]
    return out


def test_the_worker_loop_sends_what_its_core_computes(served):
    driver, holder, problem, rows, _ = served
    x = np.random.default_rng(1).standard_normal(problem.dim)
    task = WireTask(0, (0, 1), np.array([[[1.0], [-2.0]]]), 0)
    assert driver.request(0, 3, 0, [task], (), False, True, [x])
    (frame,) = _frames(driver, lambda f: len(f) >= 1)
    want = problem.gradient(x, rows[0]) - 2 * problem.gradient(x, rows[1])
    assert frame[:2] == (3, "message") and np.array_equal(frame[2], next(holder.core.run(3, [task], [x])))
    np.testing.assert_allclose(frame[2], want, rtol=1e-12)
    # a stream (two messages): each, then its end
    two = WireTask(0, (0, 1), np.array([[[1.0], [0.0]], [[0.0], [1.0]]]), 0)
    assert driver.request(0, 4, 0, [two], (), False, False, [x])
    frames = _frames(driver, lambda f: len(f) >= 3)
    assert [f[:2] for f in frames] == [(4, "message"), (4, "message"), (4, "end")]


def test_an_abort_ends_the_injected_sleep_at_once(served):
    driver, _, problem, _, _ = served
    task = WireTask(0, (0,), np.ones((1, 1, 1)), 0)
    start = time.monotonic()
    assert driver.request(0, 5, 0, [task], (30.0,), False, True, [np.zeros(problem.dim)])
    time.sleep(0.05)
    driver.abort(0, 5)
    frames = _frames(driver, lambda f: len(f) >= 1)
    assert [f[:2] for f in frames] == [(5, "end")] and time.monotonic() - start < 5


def test_a_raising_task_and_stale_data_come_back_as_errors(served):
    from gradcode.runtime.actors import StaleWorkerError

    driver, _, problem, _, _ = served
    wrong = WireTask(0, (3,), np.ones((1, 1, 1)), 0)  # a partition this worker does not store
    assert driver.request(0, 6, 0, [wrong], (), False, True, [np.zeros(problem.dim)])
    (frame,) = _frames(driver, lambda f: len(f) >= 1)
    assert frame[:2] == (6, "error") and isinstance(frame[2], WorkerTaskError)
    assert "stores only" in str(frame[2]) and isinstance(frame[2].cause, Exception)
    assert driver.request(0, 7, 1, [wrong], (), False, True, [np.zeros(problem.dim)])
    (frame,) = _frames(driver, lambda f: len(f) >= 1)
    assert frame[:2] == (7, "error") and isinstance(frame[2].cause, StaleWorkerError)


class _RaisesOSError:
    def run(self, t, tasks, params, sleeps, fail):
        raise FileNotFoundError("no such data file (test)")
        yield

    def abort(self, t):
        pass


def test_a_task_raising_an_os_error_is_reported_not_taken_for_the_driver_leaving(served):
    """An OSError of the task's own (a missing file) is its error, sent back as one; it used to
    be taken for a write to the driver failing, and the driver then heard nothing."""
    driver, holder, *_ = served
    holder.core = _RaisesOSError()
    assert driver.request(0, 8, 0, [], (), False, True, [])
    (frame,) = _frames(driver, lambda f: len(f) >= 1, timeout=5.0)
    assert frame[:2] == (8, "error") and isinstance(frame[2].cause, FileNotFoundError)
    assert driver.has(0)  # the channel stays open for the next task


def test_what_a_task_raises_stops_the_run_and_a_stale_worker_is_lost():
    """How the engine classes a channel's error frame: a task's own exception (a gradcode error
    included) stops the run as on the Ray path, stale data makes a lost task."""
    from gradcode.errors import NotDecodableError
    from gradcode.runtime.channel import _portable
    from gradcode.runtime.actors import StaleWorkerError, stale as _stale
    from gradcode.runtime.engine import lost as _lost

    assert not _lost(_portable(NotDecodableError("boom"))) and not _lost(_portable(ValueError("x")))
    assert _stale(_portable(StaleWorkerError("holds data 0"))) and not _stale(_portable(ValueError("x")))
    assert _lost(ChannelClosed("closed"))


def test_a_connection_without_the_token_is_closed_unread(served):
    *_, address = served
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(b"x" * 32 + pickle.dumps(("abort", 1)))
        sock.settimeout(5)
        try:  # closed by the worker: an end of stream, or a reset as it dropped the unread pickle
            assert sock.recv(1) == b""
        except ConnectionResetError:
            pass


def test_wait_reports_a_closed_worker_once():
    server = socket.create_server(("127.0.0.1", 0))
    driver = DriverChannels()
    driver.connect(2, server.getsockname()[:2], b"k" * 32)
    conn, _ = server.accept()
    conn.close()
    assert driver.wait(5.0) == [(2, None)] and not driver.has(2)
    assert driver.wait(0.01) == [] and not driver.request(2, 0, 0, [], (), False, True, [])
    server.close()


# ---------------------------------------------------------------------------- on Ray


@pytest.mark.parametrize("transport", ["channels", "ray"])
@pytest.mark.parametrize("scheme, params", [("crc", {"s": 1}), ("partial", {"s": 1, "alpha": 2.0})])
def test_both_transports_train_exactly_with_a_straggler(ray_session, tmp_path, transport, scheme, params):
    import warnings

    from gradcode.runtime.engine import ChannelWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", ChannelWarning)  # every worker had its channel
        res = run(tmp_path, scheme=scheme, scheme_params=params, stragglers=1, delay=0.05, transport=transport)
    assert rel(res.final_params, reference(6)) < 1e-9
    assert (res.arrivals[res.injected > 0] < 0).mean() >= 0.5  # the late worker was left out


def test_parameters_above_the_channel_limit_go_through_the_object_store(ray_session, tmp_path, monkeypatch):
    from gradcode.runtime import engine
    from gradcode.runtime.transports.channels import Channels

    puts = []
    monkeypatch.setattr(Channels, "inline_bytes", 16)  # every parameter vector is "large"
    real_put = engine.ray.put
    monkeypatch.setattr(engine.ray, "put", lambda x: puts.append(x.nbytes) or real_put(x))
    res = run(tmp_path, scheme="crc", stragglers=1, delay=0.05, fail=["2@2"])
    assert rel(res.final_params, reference(6)) < 1e-9 and len(puts) == 6


def test_a_worker_without_a_channel_takes_actor_calls_beside_the_others(ray_session, tmp_path, monkeypatch):
    from gradcode.runtime import channel, engine

    connect = channel.DriverChannels.connect

    def refuse_worker_0(self, w, address, token, timeout=5.0):
        if w == 0:
            raise ConnectionRefusedError("refused (test)")
        return connect(self, w, address, token, timeout)

    monkeypatch.setattr(channel.DriverChannels, "connect", refuse_worker_0)
    with pytest.warns(engine.ChannelWarning, match="worker 0's direct channel .*refused"):
        res = run(tmp_path, scheme="crc", stragglers=1, delay=0.05)
    assert rel(res.final_params, reference(6)) < 1e-9


def test_a_dead_workers_channel_is_opened_again_once_ray_restarted_it(ray_session):
    from gradcode.runtime import ProblemSpec
    from gradcode.runtime.engine import RayEngine

    spec = ProblemSpec(DataSpec("tandon-synthetic", DATA, seed=SEED), "logistic")
    rows = partition_rows(320, np.full(2, 0.5))
    engine = RayEngine()
    try:
        engine.spawn([(spec, {0: rows[0]}, 1), (spec, {1: rows[1]}, 1)], interruptible=False)
        x = engine.put(np.zeros(spec.build()[0].dim))
        task = WireTask(0, (0,), np.ones((1, 1, 1)), 0)
        engine.submit(0, 0, [task], [x], fail=True)
        events, deadline = [], time.monotonic() + 30
        while not events and time.monotonic() < deadline:
            events = engine.poll(1.0)
        assert [(e.worker, e.kind, e.lost) for e in events] == [(0, "failed", True)]
        assert not engine.transport.channels.has(0)
        delivered, deadline = [], time.monotonic() + 60
        for t in range(1, 10_000):  # actor calls while Ray restarts it, then its channel again
            engine.submit(0, t, [task], [x])
            while engine.busy(0) and time.monotonic() < deadline:
                delivered += [e for e in engine.poll(1.0) if e.kind == "message"]
            if engine.transport.channels.has(0) or time.monotonic() > deadline:
                break
        assert engine.transport.channels.has(0) and delivered
        engine.submit(0, t + 1, [task], [x])
        got, deadline = [], time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = engine.poll(1.0)
        assert got[0].kind == "message" and math.isfinite(float(np.sum(got[0].payload)))
    finally:
        engine.shutdown()


def test_a_channel_serves_a_bounded_number_of_connections_and_closes_silent_ones(monkeypatch):
    """Strangers without the token: at most ``MAX_CONNECTIONS`` are held at once (one more is
    closed unread), each for at most ``TOKEN_TIMEOUT`` seconds."""
    monkeypatch.setattr(WorkerChannel, "MAX_CONNECTIONS", 3)
    monkeypatch.setattr(WorkerChannel, "TOKEN_TIMEOUT", 0.5)
    holder = _Holder(None)
    channel = WorkerChannel(holder, "127.0.0.1", holder.check)
    address = channel.listen(b"t" * 32)
    held = [socket.create_connection(address) for _ in range(3)]
    time.sleep(0.2)  # the three are being served
    extra = socket.create_connection(address)
    extra.settimeout(2.0)
    start = time.monotonic()
    assert extra.recv(1) == b"" and time.monotonic() - start < 1.0  # closed unread, at once
    for sock in held:  # silent: closed once their time to present the token is up
        sock.settimeout(5.0)
        assert sock.recv(1) == b""
    time.sleep(0.1)
    driver = DriverChannels()  # the slots are free again: the driver with the token gets in
    try:
        driver.connect(0, address, b"t" * 32)
        assert driver.has(0)
    finally:
        driver.close_all()
        for sock in held + [extra]:
            sock.close()


def test_on_the_embedded_cluster_the_channels_listen_on_loopback(ray_session):
    """Every node is this machine: the workers listen on 127.0.0.1, not on the node's address."""
    from gradcode.runtime import ProblemSpec
    from gradcode.runtime.engine import RayEngine

    spec = ProblemSpec(DataSpec("tandon-synthetic", DATA, seed=SEED), "logistic")
    rows = partition_rows(320, np.full(2, 0.5))
    engine = RayEngine()
    try:
        engine.spawn([(spec, {0: rows[0]}, 1), (spec, {1: rows[1]}, 1)], interruptible=False)
        assert engine.one_machine()
        peers = [engine.transport.channels._socks[w].getpeername()[0] for w in range(2)]
        assert peers == ["127.0.0.1", "127.0.0.1"]
    finally:
        engine.shutdown()


def test_a_restart_needs_nothing_from_the_object_store(ray_session, capfd):
    """Workers are created with their thread count only and get their data by a task (``reset``):
    Ray's error about constructor arguments in the object store (a restart fails once they went out
    of scope: https://github.com/ray-project/ray/issues/53727) is not printed, and a worker killed
    after the driver dropped its own references to the data is restarted by Ray, reset, and
    computes again."""
    import gc
    import os
    import signal

    from gradcode.runtime import ProblemSpec
    from gradcode.runtime.engine import RayEngine

    engine = RayEngine()
    try:
        rows = partition_rows(320, np.full(2, 0.5))
        engine.spawn([(ProblemSpec(DataSpec("tandon-synthetic", DATA, seed=SEED), "logistic"), {j: rows[j]}, 1)
                      for j in range(2)], interruptible=False)
        dim = ProblemSpec(DataSpec("tandon-synthetic", DATA, seed=SEED), "logistic").build()[0].dim
        del rows
        gc.collect()
        x = np.zeros(dim)
        task = WireTask(0, (0,), np.ones((1, 1, 1)), 0)
        os.kill(engine.pids()[0], signal.SIGKILL)
        delivered, deadline = [], time.monotonic() + 60
        for t in range(1, 10_000):  # lost while Ray restarts it, then reset, then computing
            engine.submit(0, t, [task], [x])
            while engine.busy(0) and time.monotonic() < deadline:
                delivered += [e for e in engine.poll(1.0) if e.kind == "message"]
            if delivered or time.monotonic() > deadline:
                break
        assert delivered and math.isfinite(float(np.sum(delivered[0].payload)))
        assert "53727" not in capfd.readouterr().err
    finally:
        engine.shutdown()
