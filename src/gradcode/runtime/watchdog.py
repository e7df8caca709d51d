"""Stop an embedded Ray cluster's processes when its driver dies without shutting it down.

Measured (Ray 2.60, Linux): a driver killed with SIGKILL takes the cluster's gcs_server, raylet and
workers with it, but Ray's ``DashboardAgent`` and ``RuntimeEnvAgent`` stay alive, re-parented to
init, for as long as the machine runs (their fate-sharing check did not fire in a minute). So a
local :func:`~gradcode.runtime.cluster.init_ray` starts this watchdog beside the cluster: a small
process in a session of its own that checks every half second whether the driver still lives
(the same pid with the same start time, so a reused pid does not fool it). When the driver is
gone it sends SIGTERM, then after two seconds SIGKILL, to every process that holds a file open
under the cluster's temp dir (all of Ray's processes for that cluster keep their logs open
there; the processes of other clusters, and the user's, do not), and exits. A driver that shuts
Ray down normally stops its watchdog (:func:`stop`). Linux only (it reads ``/proc``); elsewhere
nothing is started.

Run as ``python .../watchdog.py DRIVER_PID TEMP_DIR`` (the file itself, so that the watchdog imports
only the standard library, not gradcode and numpy).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import time

__all__ = ["kill_session", "session_processes", "start", "stop"]

_POLL = 0.5
_GRACE = 2.0
#: watchdogs of this process's clusters, by temp dir
_running: dict[str, subprocess.Popen] = {}


def _start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/PID/stat`` (start time in clock ticks), or None if no such process or
    only its zombie is left (a dead driver whose parent has not reaped it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if len(fields) < 20 or fields[0] in ("Z", "X") else fields[19]


def session_processes(temp_dir: str) -> list[int]:
    """Pids of the processes (other than this one) with a file open under ``temp_dir``."""
    root = os.path.realpath(temp_dir) + os.sep
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}").startswith(root):
                    found.append(int(entry))
                    break
            except OSError:
                continue
    return found


def _signal_all(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def watch(driver: int, temp_dir: str) -> None:
    """The watchdog's loop (module docstring)."""
    born = _start_time(driver)
    while born is not None and _start_time(driver) == born and os.path.isdir(temp_dir):
        time.sleep(_POLL)
    if os.path.isdir(temp_dir):
        kill_session(temp_dir)


def kill_session(temp_dir: str, spare=()) -> None:
    """SIGTERM, then after a grace period SIGKILL, to the processes of the cluster at ``temp_dir``
    (those holding a file under it, but this process and ``spare``); the SIGKILL goes only to the
    same processes (same pid and start time) that were sent SIGTERM."""
    if not os.path.isdir("/proc"):
        return
    pids = [p for p in session_processes(temp_dir) if p not in spare]
    born = {p: _start_time(p) for p in pids}
    pids = [p for p, b in born.items() if b is not None]
    if not pids:
        return
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + _GRACE
    while time.monotonic() < deadline and any(_start_time(p) == born[p] for p in pids):
        time.sleep(0.1)
    _signal_all([p for p in pids if _start_time(p) == born[p]], signal.SIGKILL)


def start(temp_dir: str) -> None:
    """Start the watchdog of the cluster whose temp dir is ``temp_dir`` (Linux; else nothing)."""
    if not os.path.isdir("/proc") or temp_dir in _running:
        return
    if not _running:  # a normal exit shuts Ray down itself (Ray's own atexit hook): stop the watchdogs
        atexit.register(_stop_all)
    _running[temp_dir] = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), str(os.getpid()), str(temp_dir)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )


def stop(temp_dir: str) -> None:
    """Stop that watchdog (the driver shut its cluster down itself)."""
    proc = _running.pop(str(temp_dir), None)
    if proc is not None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()


def _stop_all() -> None:
    for temp_dir in list(_running):
        stop(temp_dir)


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2])
