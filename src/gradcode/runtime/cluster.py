"""The Ray cluster a run uses: started here or joined, one session for several runs, Ray's files.

:func:`init_ray` starts an embedded local cluster or joins one at an address;
:func:`ray_session` keeps one session (and its idle worker actors) for several runs;
:func:`ray_temp_dir`, :func:`retire_temp_dir` and :func:`reap_dead_temp_dirs` keep Ray's files out
of ``/tmp`` once a run ends, however it ends. The workers themselves are
:mod:`gradcode.runtime.engine`'s.

Behaviour of Ray 2.60 measured on these machines and what is done about it:

* Ray 2.60 turns token authentication on by default: a local cluster started here sets
  ``RAY_AUTH_MODE=disabled`` unless the user set it; Ray's temp dir goes under the run's folder when
  that path is short enough for Unix socket names (else a short ``/tmp/gcray-*``, removed at
  shutdown after its logs are copied to ``run_dir/ray/logs``: :func:`retire_temp_dir`), the dashboard is
  off, workers' logs are not forwarded to the driver, and Ray logs only errors (to stderr);
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

import contextlib
import glob
import json
import logging
import os
import shutil
import socket
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import ray

import gradcode.runtime.watchdog as watchdog
from gradcode.errors import GradcodeError

__all__ = ["IgnoredOptionWarning", "init_ray", "ray_session", "ray_temp_dir", "reap_dead_temp_dirs",
           "retire_temp_dir", "session", "wait_for_address", "warn_ignored"]

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
             start_timeout: float = 120.0) -> str | None:
    """Start (``address=None``: an embedded local cluster) or join (``address``) Ray, quietly.
    Returns the temp dir of a local cluster (None when joining). Used by :class:`~gradcode.runtime.engine.RayEngine` and
    by the test suite's session fixture.

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
    temp_dir = None
    if address is None:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        reap_dead_temp_dirs()
        temp_dir = ray_temp_dir(run_dir)
        # Ray runs its worker processes at niceness 15 (below the driver): they do the training's
        # compute, and beside any other load the scheduler's weights owe them ~3 % of a core each
        # (measured: fit's start-up took 70 s instead of 13 beside two busy loops); an embedded
        # cluster keeps them at the driver's priority
        kwargs.update(num_cpus=num_cpus, _temp_dir=temp_dir, _system_config={"worker_niceness": 0})
    else:
        if num_cpus is not None:
            warn_ignored(f"num_cpus={num_cpus} is ignored: joining the cluster at {address!r}, whose nodes"
                          " have their own CPUs")
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


#: what :func:`ray_session` shares while it lasts: ``cluster`` (the settings it started Ray with,
#: None when it joined a running session) and ``pool`` (idle worker actors and the data generation
#: each holds, by ``(worker_cpus, worker_gpus)``; only actors restarted without limit); empty outside a session
session: dict = {}


@contextlib.contextmanager
def ray_session(cluster=None, *, run_dir=None):
    """One Ray session for several runs (``gradcode train --scheme crc,frc,uncoded``): Ray starts
    (or joins ``cluster.address``) once, every :class:`~gradcode.runtime.engine.RayEngine` made inside uses it without
    warning that its cluster settings are ignored, and it stops at the end, its logs kept under
    ``run_dir/ray/logs``. Inside a Ray session that is already running (yours) it only shares the
    workers; inside an outer ``ray_session`` it does nothing.

    The worker actors are shared too: an engine's :meth:`~gradcode.runtime.engine.RayEngine.shutdown` leaves its live
    actors to the next engine, which makes them its workers with
    :meth:`AsyncWorker.reset <gradcode.runtime.actors.AsyncWorker.reset>` (a
    rebuilt core, ~ms) instead of starting processes (~0.5 s each, measured on 2 cores). Ray
    restarts a dead actor with its *first* constructor arguments, so every task names the data
    generation it needs and a worker that holds another refuses it (a lost task); the engine
    resets a reused worker after any lost task before it gives it work. Only actors restarted
    without limit (``max_restarts=-1``) are shared: Ray counts restarts over an actor's life."""
    from gradcode.runtime.config import ClusterConfig

    cluster = cluster if cluster is not None else ClusterConfig()
    if "pool" in session:  # an outer ray_session
        yield
        return
    owned = not ray.is_initialized()
    temp_dir = None
    if owned:
        temp_dir = init_ray(address=cluster.address, num_cpus=cluster.num_cpus, run_dir=run_dir,
                            start_timeout=cluster.start_timeout)
    session.update(cluster=cluster if owned else None, pool={})
    try:
        yield
    finally:
        for actors in session["pool"].values():
            for a, _ in actors:
                with contextlib.suppress(Exception):
                    ray.kill(a, no_restart=True)
        session.clear()
        if owned:
            ray.shutdown()
            if temp_dir is not None:
                retire_temp_dir(temp_dir, run_dir)
