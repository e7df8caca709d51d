"""The Ray cluster a run uses: started here or joined, one session for several runs, Ray's files.

:func:`connect` is how every run reaches Ray: this process's embedded local cluster
(:func:`local_cluster`: started by the first run that needs it and kept, with its idle worker
actors, for the runs after it until the interpreter exits or :func:`shutdown`), a cluster at an
address (joined for the run, left at its end), or a Ray session the user started (used as it is).
:func:`init_ray` starts an embedded local cluster or joins one at an address;
:func:`ray_session` keeps one session (and its idle worker actors) for several runs;
:func:`ray_temp_dir`, :func:`retire_temp_dir` and :func:`reap_dead_temp_dirs` keep Ray's files out
of ``/tmp`` once the cluster ends, however it ends. The workers themselves are
:mod:`gradcode.runtime.engine`'s.

Why the embedded cluster outlives a run: starting it, and a process for each worker, is most of
what a ``with Workers(...)`` block costs before its first round on a small machine, many times
what resetting idle workers with new data costs (BENCHMARKS.md, "A second block's start-up"); a
user who trains, evaluates and trains again in one process (a notebook, a hyper-parameter loop)
paid it at every block.

Behaviour of Ray 2.60 measured on these machines and what is done about it:

* Ray 2.60 turns token authentication on by default: a local cluster started here sets
  ``RAY_AUTH_MODE=disabled`` unless the user set it; Ray's temp dir is a short ``/tmp/gcray-*``
  (Unix caps socket paths at 107 characters; :func:`init_ray` alone puts it under its ``run_dir``
  when that is short enough), removed when the cluster stops, after its logs are copied to the
  latest run's ``run_dir/ray/logs`` (:func:`retire_temp_dir`): the embedded cluster outlives the run
  that started it, whose folder the user may delete meanwhile; the dashboard is off, workers' logs
  are not forwarded to the driver, and Ray logs only errors (to stderr);
* a driver killed with SIGKILL (or by the OOM killer) takes most of Ray's processes with it
  (measured: the embedded cluster's gcs_server, raylet and workers exit with it) but not Ray's
  dashboard and runtime-env agents, which a watchdog process then stops
  (:mod:`~gradcode.runtime.watchdog`), and it cannot remove its ``/tmp/gcray-*`` folder. Each such folder holds an owner file that its driver keeps ``flock``-ed
  while it lives (the kernel drops the lock when the process dies, however it dies), so the next
  local run removes the folders whose lock is free (:func:`reap_dead_temp_dirs`), after copying
  their logs to the dead run's ``run_dir/ray/logs``;
* joining a cluster at an address where nothing answers makes ``ray.init`` retry for ~14 minutes
  (20 attempts of ~41 s, measured) and end in a raw ``ConnectionError``: :func:`init_ray` first
  connects to the address itself, retrying until ``start_timeout``, and fails with a
  :class:`~gradcode.errors.GradcodeError` that says what to check.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import glob
import json
import logging
import os
import shutil
import socket
import tempfile
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

import ray

import gradcode.runtime.watchdog as watchdog
from gradcode.errors import GradcodeError

__all__ = ["ClusterRestartWarning", "IgnoredOptionWarning", "connect", "disconnect", "in_use", "init_ray",
           "local_cluster", "ray_session", "ray_temp_dir", "reap_dead_temp_dirs", "retire_temp_dir", "session",
           "short_temp_dir", "shutdown", "wait_for_address", "warn_ignored"]

try:
    import fcntl
except ImportError:  # Windows has no fcntl: temp dirs of dead drivers are not detected there
    fcntl = None

#: longest temp dir Ray accepts here: its socket paths add ~60 characters and Unix caps them at 107
_MAX_TEMP_DIR = 40
#: where the short temp dirs go, and their name prefix
_TEMP_ROOT, _TEMP_PREFIX = "/tmp", "gcray-"
#: file in a short temp dir: its driver's pid and run dir, ``flock``-ed by the driver while it lives
_OWNER_FILE = "gradcode-driver.lock"
#: temp dirs this process made -> the open descriptor holding their owner lock
_claims: dict[str, int] = {}


def ray_temp_dir(run_dir: str | os.PathLike | None) -> str:
    """Where Ray keeps its session files: ``run_dir/ray`` when short enough, else ``/tmp/gcray-*``
    (claimed by this process: :func:`reap_dead_temp_dirs` leaves it alone while we live)."""
    if run_dir is not None:
        path = Path(run_dir).resolve() / "ray"
        if len(str(path)) <= _MAX_TEMP_DIR:
            path.mkdir(parents=True, exist_ok=True)
            return str(path)
    return short_temp_dir(run_dir)


def short_temp_dir(run_dir: str | os.PathLike | None = None) -> str:
    """A new ``/tmp/gcray-*`` folder for Ray's files, claimed by this process for ``run_dir``
    (whose ``ray/logs`` get its logs should this process die without removing it)."""
    path = tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=_TEMP_ROOT)
    _claim(path, run_dir)
    return path


def _claim(path: str, run_dir) -> None:
    """Write ``path``'s owner file (pid, run dir) and keep it ``flock``-ed until the temp dir is
    retired or this process ends. The file is written and locked under another name, then renamed
    into place, so a reaper never sees it unlocked."""
    if fcntl is None:
        return
    owner = os.path.join(path, _OWNER_FILE)
    fd = os.open(owner + ".new", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    info = {"pid": os.getpid(), "run_dir": None if run_dir is None else str(Path(run_dir).resolve())}
    os.write(fd, json.dumps(info).encode())
    os.replace(owner + ".new", owner)
    _claims[path] = fd


def _reclaim(path: str, run_dir) -> None:
    """Name ``run_dir`` in the owner file of ``path`` (claimed by this process), rewritten in
    place through the descriptor holding its lock: a later run's logs go to that run's folder."""
    fd = _claims.get(str(path))
    if fd is None:
        return
    info = {"pid": os.getpid(), "run_dir": None if run_dir is None else str(Path(run_dir).resolve())}
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)


def _release(path) -> None:
    fd = _claims.pop(str(path), None)
    if fd is not None:
        os.close(fd)  # drops the lock


def reap_dead_temp_dirs(root: str = _TEMP_ROOT) -> list[str]:
    """Remove the ``gcray-*`` temp dirs under ``root`` whose driver died without cleaning up
    (SIGKILL, the OOM killer, a lost machine): those whose owner file is not locked any more. Their
    logs go to the dead run's ``run_dir/ray/logs`` first, if that folder still exists. Folders
    without an owner file (another user's, or one being set up) and folders of live drivers are
    left alone. Returns the folders removed. Called by every local :func:`init_ray`."""
    removed: list[str] = []
    if fcntl is None:
        return removed
    for path in sorted(glob.glob(os.path.join(root, _TEMP_PREFIX + "*"))):
        if path in _claims:
            continue
        try:
            fd = os.open(os.path.join(path, _OWNER_FILE), os.O_RDONLY)
        except OSError:  # no owner file, or not ours to read
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # its driver is alive
                continue
            try:
                info = json.loads(os.read(fd, 1 << 16) or b"{}")
                run_dir, owner = info.get("run_dir"), int(info["pid"])
            except (ValueError, AttributeError, KeyError, TypeError):
                run_dir, owner = None, None
            if not os.path.isdir(path):  # another reaper was first
                continue
            # processes its watchdog did not stop (none was started); never the owner pid itself
            watchdog.kill_session(path, spare=() if owner is None else (owner,))
            retire_temp_dir(path, run_dir if run_dir and os.path.isdir(run_dir) else None)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


class IgnoredOptionWarning(RuntimeWarning):
    """An engine option had no effect (Ray was already running, or a cluster was joined)."""


def warn_ignored(message: str) -> None:
    warnings.warn(message, IgnoredOptionWarning, stacklevel=3)  # on stderr, unless filtered


def retire_temp_dir(temp_dir: str | os.PathLike, run_dir: str | os.PathLike | None) -> None:
    """After ``ray.shutdown()``: keep Ray's logs under ``run_dir/ray/logs`` and delete a temp dir
    that lies outside ``run_dir`` (a ``/tmp/gcray-*`` made because ``run_dir/ray`` was too long
    for Unix socket names), so that nothing of the run is left in ``/tmp``. A temp dir inside
    ``run_dir`` stays where it is. The owner lock is dropped last, once the folder is gone, so a
    reaper never takes a folder being retired for a dead driver's."""
    watchdog.stop(str(temp_dir))
    try:
        temp = Path(temp_dir).resolve()
        if run_dir is not None:
            home = Path(run_dir).resolve()
            if temp == home / "ray" or home in temp.parents:
                return
            logs = temp / "session_latest" / "logs"
            if logs.is_dir():
                dest = home / "ray" / "logs"
                try:
                    shutil.copytree(logs.resolve(), dest, dirs_exist_ok=True, ignore_dangling_symlinks=True)
                except (OSError, shutil.Error):  # logs are a courtesy: never fail a finished run for them
                    pass
        shutil.rmtree(temp, ignore_errors=True)
    finally:
        _release(temp_dir)


def init_ray(*, address: str | None = None, num_cpus: int | None = None, run_dir=None,
             start_timeout: float = 120.0, temp_dir: str | None = None) -> str | None:
    """Start (``address=None``: an embedded local cluster) or join (``address``) Ray, quietly.
    Returns the temp dir of a local cluster (None when joining): ``temp_dir`` when given (a folder
    of :func:`short_temp_dir`), else :func:`ray_temp_dir` of ``run_dir``. Used by :func:`connect`.

    A local start runs the workers at the driver's priority (Ray's default lowers them to niceness
    15; on a cluster started by hand, ``RAY_worker_niceness=0 ray start ...`` does the same) and
    first removes the temp dirs of dead drivers (:func:`reap_dead_temp_dirs`). A
    join first checks that something answers at ``address`` within ``start_timeout`` seconds
    (:func:`wait_for_address`); a failed start or join is a :class:`GradcodeError`."""
    kwargs: dict[str, Any] = dict(
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        configure_logging=True,
    )
    if address is None:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        reap_dead_temp_dirs()
        temp_dir = temp_dir if temp_dir is not None else ray_temp_dir(run_dir)
        # Ray runs its worker processes at niceness 15 (below the driver): they do the training's
        # compute, and beside any other load the scheduler's weights owe them ~3 % of a core each
        # (measured: fit's start-up took 70 s instead of 13 beside two busy loops); an embedded
        # cluster keeps them at the driver's priority
        kwargs.update(num_cpus=num_cpus, _temp_dir=temp_dir, _system_config={"worker_niceness": 0})
    else:
        if num_cpus is not None:
            warn_ignored(f"num_cpus={num_cpus} is ignored: joining the cluster at {address!r}, whose nodes"
                          " have their own CPUs")
        temp_dir = None
        wait_for_address(address, start_timeout)
        kwargs.update(address=address)
    try:
        ray.init(**kwargs)
    except Exception as exc:  # Ray raises bare Exception too ("node timed out during startup")
        if temp_dir is not None:
            retire_temp_dir(temp_dir, run_dir)
        where = "start a local Ray cluster" if address is None else f"join the Ray cluster at {address!r}"
        hint = "" if address is None else (
            " (is a cluster running there? `ray start --head` prints its address; leave out --address"
            " to run on an embedded local cluster)"
        )
        raise GradcodeError(f"could not {where}: {type(exc).__name__}: {exc}{hint}") from None
    if temp_dir is not None:
        watchdog.start(temp_dir)
    return temp_dir


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` that a join of ``address`` connects to first, or None when Ray resolves it
    otherwise (``auto`` with no cluster recorded: ``ray.init`` then fails at once by itself)."""
    addr = address.removeprefix("ray://")
    if addr == "auto":
        try:  # the address recorded by the last `ray start` on this machine, or RAY_ADDRESS
            from ray._private.services import canonicalize_bootstrap_address

            addr = canonicalize_bootstrap_address("auto")
        except Exception:
            return None
        if not addr:
            return None
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)


def wait_for_address(address: str, timeout: float) -> None:
    """Return once a TCP connection to ``address`` (``host:port``, ``ray://host:port`` or ``auto``)
    succeeds; retry every 0.5 s (a head node may still be starting) and raise
    :class:`GradcodeError` after ``timeout`` seconds. ``ray.init`` alone would retry for ~14
    minutes before a raw ``ConnectionError``."""
    target = _host_port(address)
    if target is None:
        return
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            socket.create_connection(target, timeout=max(min(left, 5.0), 0.05)).close()
            return
        except OSError as exc:
            last = exc
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(0.5, left))
    raise GradcodeError(
        f"no Ray cluster answers at {address!r}: could not connect to {target[0]}:{target[1]} within"
        f" {timeout:g} s (start timeout; last error: {type(last).__name__}: {last}). Check that the"
        " cluster is running (`ray start --head` prints the address to use), the host, the port and"
        " any firewall, or leave out --address to run on an embedded local cluster"
    )


#: what this process shares between runs: ``embedded`` (this process's embedded cluster, while it
#: runs: its temp dir, its CPUs and the latest run dir it served), ``cluster`` (the settings a
#: :func:`ray_session` joined a cluster with; None otherwise), ``pool`` (idle worker actors and the
#: data generation each holds, by ``(interruptible, worker_cpus, worker_gpus)``; only actors
#: restarted without limit; there while the embedded cluster runs or a :func:`ray_session` lasts)
#: and ``block`` (a :func:`ray_session` is open)
session: dict = {}

#: the engines using Ray now (connected and not yet disconnected): the embedded cluster is neither
#: restarted nor stopped under them
_users: weakref.WeakSet = weakref.WeakSet()
_exit_hook = False  # whether _at_exit is registered


class ClusterRestartWarning(RuntimeWarning):
    """This process's embedded Ray cluster was stopped and started again: a run asked for another
    number of CPUs than it has, or its head node was gone. Its idle workers ended with it, and the
    start costs what a first run's does (seconds)."""


def in_use() -> bool:
    """Whether a run uses Ray now (an engine between :func:`connect` and :func:`disconnect`: an
    open ``Workers`` block, a ``fit`` or ``train`` in progress) or a :func:`ray_session` is open.
    An engine dropped without its ``shutdown`` (a reference cycle) is collected first, so that it
    does not count."""
    if _users:
        gc.collect()
    return bool(session.get("block")) or len(_users) > 0


def connect(address: str | None = None, num_cpus: int | None = None, *, run_dir=None, start_timeout: float = 120.0,
            user=None, quiet: bool = False) -> str:
    """Reach Ray for a run; ``user`` (its engine) counts as using it until :func:`disconnect`.
    Returns how: ``"embedded"``, this process's embedded cluster (:func:`local_cluster`: started
    now, or the one earlier runs left), when ``address`` is None and no other Ray session runs here;
    ``"joined"``, the cluster at ``address`` joined now (an embedded cluster no run uses is stopped
    first), which :func:`disconnect` leaves, never stops; ``"running"``, a Ray session started
    otherwise (yours, a :func:`ray_session`'s, or the embedded cluster while another run uses it
    and this one names an address), used as it is, with an :class:`IgnoredOptionWarning` naming the
    settings it then ignores (none with ``quiet``)."""
    _forget_lost()
    if address is None and (not ray.is_initialized() or "embedded" in session):
        local_cluster(num_cpus, run_dir=run_dir, start_timeout=start_timeout)
        kind = "embedded"
    else:
        if address is not None and "embedded" in session and not in_use():
            _stop_embedded()
        if not ray.is_initialized():
            init_ray(address=address, num_cpus=num_cpus, start_timeout=start_timeout)
            kind = "joined"
        else:
            kind = "running"
            applied = session.get("cluster")  # settings a ray_session applied are not ignored
            if not quiet and (applied is None or (applied.address, applied.num_cpus) != (address, num_cpus)):
                ignored = [f"{k}={v!r}" for k, v in (("address", address), ("num_cpus", num_cpus)) if v is not None]
                if ignored:
                    warn_ignored(f"{' and '.join(ignored)} ignored: Ray is already running in this process"
                                 " and its session is used")
    if user is not None:
        _users.add(user)
    return kind


def disconnect(user, kind: str) -> None:
    """``user`` no longer uses Ray; a cluster it joined (``kind`` ``"joined"``) is left (Ray's
    session in this process ends; the cluster itself runs on). The embedded cluster stays."""
    if user is not None:
        _users.discard(user)
    if kind == "joined" and ray.is_initialized():
        ray.shutdown()


def local_cluster(num_cpus: int | None = None, *, run_dir=None, start_timeout: float = 120.0) -> bool:
    """This process's embedded local cluster: started on first use (``num_cpus`` CPUs, Ray's files
    in a :func:`short_temp_dir`) and kept, with the worker actors that runs leave in the pool, until
    the interpreter exits (an ``atexit`` hook) or :func:`shutdown`. Returns True when the running
    one serves. ``num_cpus`` None takes it as it is; a number of CPUs other than it has starts it
    again, with a :class:`ClusterRestartWarning` saying why, unless a run uses it, in which case
    it is kept and an :class:`IgnoredOptionWarning` says that ``num_cpus`` is ignored. ``run_dir``:
    the run it now serves, whose ``ray/logs`` get Ray's logs when it stops."""
    held = session.get("embedded")
    if held is not None and num_cpus is not None and num_cpus != held["cpus"]:
        if in_use():
            warn_ignored(f"num_cpus={num_cpus} ignored: this process's embedded Ray cluster, with {held['cpus']:g}"
                         " CPUs, is in use by another run")
        else:
            idle = sum(len(actors) for actors in session.get("pool", {}).values())
            warnings.warn(f"num_cpus={num_cpus}: this process's embedded Ray cluster has {held['cpus']:g} CPUs, so it"
                          f" is started again ({idle} idle workers end with it); ask for the same num_cpus, or"
                          " none, to keep it", ClusterRestartWarning, stacklevel=4)
            _stop_embedded()
            held = None
    if held is not None:
        if run_dir is not None:
            held["run_dir"] = str(Path(run_dir).resolve())
            _reclaim(held["temp_dir"], run_dir)
        return True
    temp_dir = short_temp_dir(run_dir)
    init_ray(num_cpus=num_cpus, run_dir=run_dir, start_timeout=start_timeout, temp_dir=temp_dir)
    cpus = float(ray.cluster_resources().get("CPU", 0.0))
    session.update(embedded={"temp_dir": temp_dir, "cpus": cpus, "gcs": _gcs_address(),
                             "run_dir": None if run_dir is None else str(Path(run_dir).resolve())},
                   cluster=None, pool={})
    global _exit_hook
    if not _exit_hook:  # registered after Ray's own hook, so it runs before it
        atexit.register(_at_exit)
        _exit_hook = True
    return False


def _forget_lost() -> None:
    """Forget an embedded cluster that is gone, removing its files, so that the next run starts
    another: Ray shut down in this process (``ray.shutdown()`` called by the user), or its head node
    not answering (killed, out of memory), which a :class:`ClusterRestartWarning` says."""
    held = session.get("embedded")
    if held is None:
        return
    if ray.is_initialized() and _gcs_address() not in (None, held.get("gcs")):
        # Ray was shut down and started again here (by the user): another cluster, whose actors and
        # files are not the embedded one's; forget that one without touching this session
        _forget_embedded()
        return
    if ray.is_initialized() and _head_answers():
        return
    if ray.is_initialized():
        warnings.warn("this process's embedded Ray cluster is gone (its head node does not answer): another is"
                      " started", ClusterRestartWarning, stacklevel=4)
    _stop_embedded()


def _gcs_address() -> str | None:
    """The head node (GCS) address of this process's Ray session (None when it cannot be read)."""
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:
        return None


def _forget_embedded() -> None:
    """Drop what this process kept of an embedded cluster that Ray no longer runs (its pool of
    actors, its temp dir) without stopping the Ray session that now runs here."""
    held = session.pop("embedded", None)
    session.pop("pool", None)
    session.pop("cluster", None)
    if held is not None:
        run_dir = held["run_dir"]
        retire_temp_dir(held["temp_dir"], run_dir if run_dir is not None and os.path.isdir(run_dir) else None)


def _head_answers() -> bool:
    """Whether the head node (GCS) of this process's Ray session accepts a connection (True when
    its address cannot be read: nothing to tell)."""
    try:
        host, _, port = ray.get_runtime_context().gcs_address.rpartition(":")
        target = (host.strip("[]"), int(port))
    except Exception:
        return True
    try:
        with socket.create_connection(target, timeout=2.0):
            return True
    except OSError:
        return False


def _stop_embedded() -> None:
    """Stop this process's embedded cluster (its actors with it) and retire its temp dir, keeping
    Ray's logs in the latest run's ``run_dir/ray/logs`` when that folder still exists."""
    held = session.pop("embedded", None)
    if held is None:
        return
    session.pop("pool", None)
    session.pop("cluster", None)
    if ray.is_initialized():
        with contextlib.suppress(Exception):
            ray.shutdown()
    run_dir = held["run_dir"]
    retire_temp_dir(held["temp_dir"], run_dir if run_dir is not None and os.path.isdir(run_dir) else None)


def _at_exit() -> None:
    with contextlib.suppress(Exception):
        _stop_embedded()


def shutdown() -> None:
    """Stop this process's embedded Ray cluster now rather than when the interpreter exits: its
    idle workers end, its logs go to the latest run's ``run_dir/ray/logs``, its ``/tmp/gcray-*``
    folder is removed, and the next run starts another. In a Ray session gradcode did not start
    (yours, or a cluster a :func:`ray_session` joined) only the idle workers gradcode keeps there
    end. Refused (:class:`GradcodeError`) while a run uses Ray (:func:`in_use`); nothing happens
    when nothing runs."""
    if in_use():
        raise GradcodeError("gradcode.runtime.shutdown(): a run still uses Ray (an open Workers block, a fit or train"
                            " in progress, or a ray_session); call it once they have ended")
    if "embedded" in session:
        _stop_embedded()
        return
    for actors in session.get("pool", {}).values():
        for a, _ in actors:
            with contextlib.suppress(Exception):
                ray.kill(a, no_restart=True)
        actors.clear()


@contextlib.contextmanager
def ray_session(cluster=None, *, run_dir=None):
    """One Ray session for several runs (``gradcode train --scheme crc,frc,uncoded``): Ray starts
    (or joins ``cluster.address``) once, every :class:`~gradcode.runtime.engine.RayEngine` made
    inside uses it without warning that its cluster settings are ignored, and the runs share the
    worker actors. Locally it is this process's embedded cluster (:func:`local_cluster`), which
    the block keeps from being restarted and which, with its idle workers, outlives the block; a
    joined cluster is left at the end, its idle workers ended. Inside a Ray session that is already
    running (yours) it only shares the workers; inside an outer ``ray_session`` it does nothing.

    The worker actors are shared: an engine's :meth:`~gradcode.runtime.engine.RayEngine.shutdown`
    leaves its live actors to the next engine, which makes them its workers with
    :meth:`AsyncWorker.reset <gradcode.runtime.actors.AsyncWorker.reset>` (a rebuilt core, ~ms)
    instead of starting processes (~0.5 s each, measured on 2 cores). Ray restarts a dead actor
    with its *first* constructor arguments, so every task names the data generation it needs and a
    worker that holds another refuses it (a lost task); the engine resets a reused worker after any
    lost task before it gives it work. Only actors restarted without limit (``max_restarts=-1``)
    are shared: Ray counts restarts over an actor's life."""
    from gradcode.runtime.config import ClusterConfig

    cluster = cluster if cluster is not None else ClusterConfig()
    if session.get("block"):  # an outer ray_session
        yield
        return
    kind = connect(cluster.address, cluster.num_cpus, run_dir=run_dir, start_timeout=cluster.start_timeout,
                   quiet=True)
    if "embedded" in session:  # this process's cluster: its pool outlives the block
        session["block"] = True
        try:
            yield
        finally:
            session.pop("block", None)
        return
    session.update(cluster=cluster if kind == "joined" else None, pool={}, block=True)
    try:
        yield
    finally:
        for actors in session["pool"].values():
            for a, _ in actors:
                with contextlib.suppress(Exception):
                    ray.kill(a, no_restart=True)
        session.clear()
        if kind == "joined" and ray.is_initialized():
            ray.shutdown()
