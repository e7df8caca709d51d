"""Direct channels: each round's tasks and messages over one TCP connection per worker.

Each of Ray's actor calls costs the driver the serialisation of its arguments and Ray's dispatch,
so a round of them with no work at all costs several times the gloo all-reduce that DDP pays: with
no straggler that cost alone made a coded step markedly slower than a DDP step
(``benchmarks/bench_ray_paths.py``, path b'; BENCHMARKS.md, "2026-11-27: synchronous workers when
nothing sleeps, small parameters inside the task"). A channel is a persistent loop in the worker
process fed through a socket: the driver writes a round's request, the worker computes and writes
its messages back, the driver waits for all its workers with one ``select``. Without Ray's
dispatch, a round with no work costs a fraction of the actor calls' round and one with work comes
close to the compute's own time (path e; BENCHMARKS.md, "2026-11-27: rounds through direct
channels, Ray for the rest"). Ray stays the engine: it places, starts, restarts and kills the
workers, tells the driver where each one listens, and carries what does not fit a channel
(payloads above :data:`CHANNEL_BYTES`, where its shared-memory object store moves bytes faster
than a socket).

Wire format: a frame is a header (``!II``: the pickle's length, the number of out-of-band buffers),
one ``!Q`` length per buffer, the pickle (protocol 5) and the buffers' raw bytes: numpy arrays
travel as their own bytes, not copied into the pickle. Requests (driver to worker) are
``("run", t, generation, tasks, sleeps, fail, one, params)``, ``("reduce", t, order)`` (the
collective path's reduction, on a thread of its own beside the tasks: the messages it reads were
kept before their notes were sent) and ``("abort", t)``;
replies are ``(t, "message", payload)``, ``(t, "end", None)`` (the task ended: aborted in its
sleep, or a stream's last message was sent), ``(t, "reduced", reply)``, ``(t, "error",
WorkerTaskError)`` (the task raised) and ``(t, "reduce-error", WorkerTaskError)`` (the reduction
raised).

Trust: a worker accepts a connection only after it presents the token the driver gave the worker
through Ray (:meth:`WorkerChannel.listen`), within :attr:`WorkerChannel.TOKEN_TIMEOUT` seconds;
pickles are read only from connections that did. At most :attr:`WorkerChannel.MAX_CONNECTIONS`
connections are served at once (the driver's, one it re-opened while the old one still ran, and a
few strangers waiting to present a token); one more is closed unread. On a cluster whose every
node is the driver's machine (the embedded local cluster) the workers listen on the loopback
address only; elsewhere on their node's address. The driver trusts its workers as it trusts Ray's
results.
"""

from __future__ import annotations

import contextlib
import hmac
import pickle
import queue
import selectors
import socket
import struct
import threading
import time
import traceback
from typing import Any, Callable

from gradcode.errors import GradcodeError

__all__ = ["CHANNEL_BYTES", "ChannelClosed", "DriverChannels", "WorkerChannel", "WorkerTaskError",
           "recv_frame", "send_frame"]

#: largest parameter array a round sends through a channel; above it the round goes through Ray's
#: object store (one ``ray.put`` read by every worker, results returned through shared memory,
#: where a socket copies every byte twice and the driver sends the parameters once per worker): a
#: channel is the faster up to 2 MB and the slower from 4 MB on (``bench_ray_paths.py --compute 0
#: --d``; BENCHMARKS.md, "2026-11-27: rounds through direct channels, Ray for the rest").
CHANNEL_BYTES = 2 * 2**20

_HEAD = struct.Struct("!II")
_LEN = struct.Struct("!Q")
#: frames up to this size are joined and written with one call
_SMALL = 1 << 16
#: seconds a frame may take to arrive once its first bytes did (a worker dying mid-frame)
FRAME_TIMEOUT = 60.0
_TOKEN_BYTES = 32


class ChannelClosed(GradcodeError):
    """The worker's end of a channel closed: its process died (or the connection broke)."""


class _DriverGone(GradcodeError):
    """Writing to the driver failed: its end closed (its tasks go with it)."""


class WorkerTaskError(GradcodeError):
    """A task raised in the worker; ``cause`` is its exception (or a stand-in that names it when it
    could not be pickled), and the message holds the worker's traceback."""

    def __init__(self, message: str, cause: BaseException | None = None):
        super().__init__(message)
        self.cause = cause

    def __reduce__(self):
        return type(self), (self.args[0], self.cause)


def send_frame(sock: socket.socket, obj: Any) -> None:
    """Write ``obj`` as one frame (numpy arrays as out-of-band buffers: not copied into the pickle)."""
    buffers: list[pickle.PickleBuffer] = []
    body = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    head = _HEAD.pack(len(body), len(raws)) + b"".join(_LEN.pack(r.nbytes) for r in raws)
    if len(body) + sum(r.nbytes for r in raws) <= _SMALL:
        sock.sendall(b"".join([head, body, *raws]))
        return
    sock.sendall(head + body)
    for raw in raws:
        sock.sendall(raw)


def _read(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ChannelClosed("the connection closed")
        got += k
    return buf


def recv_frame(sock: socket.socket) -> Any:
    """Read one frame written by :func:`send_frame` (blocking until it is whole)."""
    size, count = _HEAD.unpack(_read(sock, _HEAD.size))
    lengths = struct.unpack(f"!{count}Q", _read(sock, _LEN.size * count)) if count else ()
    body = _read(sock, size)
    return pickle.loads(body, buffers=[_read(sock, n) for n in lengths])


def _nodelay(sock: socket.socket) -> socket.socket:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class WorkerChannel:
    """The worker's end: a listening socket and, for the connected driver, a thread that reads
    its requests (an abort acts at once) and one that computes them in order and writes the
    messages back. ``holder`` is the worker actor: its ``core`` (a
    :class:`~gradcode.runtime.worker.WorkerCore`, replaced by a reset) and ``_generation`` are
    read at each request; ``check(generation)`` raises when the worker does not hold that data."""

    #: connections served at once; one more is closed unread
    MAX_CONNECTIONS = 8
    #: seconds a connection has to present the token before it is closed
    TOKEN_TIMEOUT = 5.0

    def __init__(self, holder, host: str, check: Callable[[int], None]):
        self.holder, self.check = holder, check
        self._token = b""
        self._slots = threading.BoundedSemaphore(self.MAX_CONNECTIONS)
        # one task at a time on the core, also across connections (a driver that reconnected
        # while its old connection's task still ran)
        self._computing = threading.Lock()
        self._server = socket.create_server((host, 0))
        threading.Thread(target=self._accept, name="gradcode-channel", daemon=True).start()

    def listen(self, token: bytes) -> tuple[str, int]:
        """Accept connections that present ``token`` from now on; returns ``(host, port)``."""
        self._token = bytes(token)
        host, port = self._server.getsockname()[:2]
        return host, port

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:  # out of descriptors, say: the listener stays, try again
                time.sleep(0.1)
                continue
            if not self._slots.acquire(blocking=False):  # too many at once: closed unread
                conn.close()
                continue
            threading.Thread(target=self._serve_counted, args=(conn,), daemon=True).start()

    def _serve_counted(self, conn: socket.socket) -> None:
        try:
            self._serve(conn)
        finally:
            self._slots.release()

    def _serve(self, conn: socket.socket) -> None:
        """One driver's connection: it must present the token first (else it is closed unread);
        then a thread computes its requests while this one reads them."""
        try:
            conn.settimeout(self.TOKEN_TIMEOUT)
            ok = hmac.compare_digest(_read(conn, _TOKEN_BYTES), self._token)
            conn.settimeout(None)
        except (OSError, ChannelClosed):
            ok = False
        if not ok:
            conn.close()
            return
        work: queue.SimpleQueue = queue.SimpleQueue()
        reductions: queue.SimpleQueue = queue.SimpleQueue()
        conn, sending = _nodelay(conn), threading.Lock()  # two threads write frames: one at a time
        threading.Thread(target=self._compute, args=(conn, sending, work), daemon=True).start()
        threading.Thread(target=self._reductions, args=(conn, sending, reductions), daemon=True).start()
        self._read_requests(conn, work, reductions)

    def _read_requests(self, conn: socket.socket, work: queue.SimpleQueue, reductions: queue.SimpleQueue) -> None:
        try:
            while True:
                request = recv_frame(conn)
                if request[0] == "abort":
                    if self.holder.core is not None:  # a worker that holds no data runs nothing
                        self.holder.core.abort(request[1])
                elif request[0] == "reduce":
                    reductions.put(request)
                else:
                    work.put(request)
        except (OSError, ChannelClosed, EOFError, pickle.UnpicklingError):
            pass
        finally:
            work.put(None)
            reductions.put(None)

    def _compute(self, conn: socket.socket, sending, work: queue.SimpleQueue) -> None:
        try:
            while (request := work.get()) is not None:
                with self._computing:
                    self._run(conn, sending, *request[1:])
        except _DriverGone:  # its tasks are dropped with it
            pass
        finally:  # whatever ended this loop, the driver sees the channel close (FIN), not silence
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _run(self, conn, sending, t, generation, tasks, sleeps, fail, one, params) -> None:
        try:
            self.check(generation)
            sent = False
            for message in self.holder.core.run(t, tasks, params, sleeps, fail):
                _send(conn, sending, (t, "message", message))
                sent = True
            if not (one and sent):
                _send(conn, sending, (t, "end", None))
        except _DriverGone:
            raise
        except Exception as exc:  # the task raised (an OSError of its own included)
            _send(conn, sending, (t, "error", _portable(exc)))

    def _reductions(self, conn: socket.socket, sending, reductions: queue.SimpleQueue) -> None:
        """The collective path's reductions (``holder.reduce``), in the order they came, on a
        thread of their own: a worker still computing a round (a straggler) takes part in the
        reduction of messages it kept earlier (a sequential scheme's job) without the round
        waiting for its computation."""
        try:
            while (request := reductions.get()) is not None:
                t, order = request[1:]
                try:
                    reply = self.holder.reduce(order)
                except Exception as exc:
                    _send(conn, sending, (t, "reduce-error", _portable(exc)))
                    continue
                _send(conn, sending, (t, "reduced", reply))
        except _DriverGone:
            pass


def _send(conn: socket.socket, sending: threading.Lock, frame) -> None:
    try:
        with sending:
            send_frame(conn, frame)
    except OSError as exc:
        raise _DriverGone from exc


def _portable(exc: Exception) -> WorkerTaskError:
    """``exc`` as it crosses to the driver: a :class:`WorkerTaskError` with the worker's traceback
    and ``exc`` as its ``cause`` (a stand-in naming it when it does not pickle)."""
    text = "".join(traceback.format_exception(exc))
    try:
        pickle.loads(pickle.dumps(exc))
        cause = exc
    except Exception:
        cause = RuntimeError(f"{type(exc).__name__}: {exc}")
    return WorkerTaskError(text, cause)


class DriverChannels:
    """The driver's ends: one connection per worker that has one, and a selector over them.

    :meth:`connect` opens worker ``w``'s; :meth:`request` and :meth:`abort` write to it;
    :meth:`wait` returns ``(worker, frame)`` for every frame that arrived within ``timeout``
    seconds, and ``(worker, None)`` for a connection that closed (the worker's process died).
    A connection that fails is closed and forgotten: :meth:`has` then says False."""

    def __init__(self):
        self._socks: dict[int, socket.socket] = {}
        self._selector = selectors.DefaultSelector()

    def has(self, w: int) -> bool:
        return w in self._socks

    def connect(self, w: int, address: tuple[str, int], token: bytes, timeout: float = 5.0) -> None:
        """Connect to worker ``w`` listening at ``address`` (raises ``OSError`` when it cannot)."""
        self.close(w)
        sock = socket.create_connection(tuple(address), timeout=timeout)
        try:
            sock.sendall(token)
        except OSError:
            sock.close()
            raise
        sock.settimeout(FRAME_TIMEOUT)
        self._socks[w] = _nodelay(sock)
        self._selector.register(sock, selectors.EVENT_READ, w)

    def request(self, w: int, t: int, generation: int, tasks, sleeps, fail: bool, one: bool, params) -> bool:
        """Send round ``t``'s tasks to worker ``w``; False when it cannot (no channel, or it closed)."""
        return self._write(w, ("run", t, generation, tasks, tuple(sleeps), bool(fail), bool(one), tuple(params)))

    def _write(self, w: int, frame) -> bool:
        sock = self._socks.get(w)
        if sock is None:
            return False
        try:
            send_frame(sock, frame)
            return True
        except OSError:
            self.close(w)
            return False

    def reduce(self, w: int, t: int, order) -> bool:
        """Send worker ``w`` its order of round ``t``'s reduction (the collective path); False when
        it cannot (no channel, or it closed)."""
        return self._write(w, ("reduce", t, order))

    def abort(self, w: int, t: int) -> None:
        """Ask worker ``w`` to stop its rounds ``<= t``. A write that fails leaves the connection
        to :meth:`wait`, which reports it closed (and so the task it ran)."""
        sock = self._socks.get(w)
        if sock is not None:
            with contextlib.suppress(OSError):
                send_frame(sock, ("abort", int(t)))

    def wait(self, timeout: float) -> list[tuple[int, Any]]:
        """Frames that arrived within ``timeout`` seconds (at least one unless the time ran out),
        then one more look, without waiting, for what came meanwhile (a bounded batch, as a
        worker streaming many messages would otherwise hold the driver here)."""
        if not self._socks:
            if timeout > 0:
                time.sleep(timeout)
            return []
        out: list[tuple[int, Any]] = []
        for wait in (timeout, 0):
            ready = self._selector.select(wait) if self._socks else []
            if not ready:
                break
            for key, _ in ready:
                w = key.data
                try:
                    out.append((w, recv_frame(key.fileobj)))
                except (OSError, ChannelClosed, EOFError):
                    self.close(w)
                    out.append((w, None))
                except Exception as exc:  # a whole frame this process cannot unpickle
                    out.append((w, (None, "unreadable", exc)))
        return out

    def close(self, w: int) -> None:
        sock = self._socks.pop(w, None)
        if sock is not None:
            self._selector.unregister(sock)
            sock.close()

    def close_all(self) -> None:
        for w in list(self._socks):
            self.close(w)
        self._selector.close()
        self._selector = selectors.DefaultSelector()
