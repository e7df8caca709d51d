"""The runtime: real training with gradient coding (docs/architecture.md, "The runtime").

:func:`train` (the config objects of :mod:`gradcode.runtime.config`) and
:func:`resume` (a run dir) are the entry points (:mod:`gradcode.runtime.training`; what a run is
made of: :mod:`gradcode.runtime.setup`; a run in progress: :mod:`gradcode.runtime.session`); a
:class:`RoundDriver` (:mod:`gradcode.runtime.driver`) runs the rounds on an :class:`Engine`
(:mod:`gradcode.runtime.base`): Ray actors (:mod:`gradcode.runtime.engine`; with
:mod:`gradcode.runtime.cluster`, which starts or joins the cluster, the only modules that import
Ray) or :class:`InProcessEngine` (:mod:`gradcode.runtime.inprocess`: the same workers in this
process on a virtual clock, for tests), both running the generic worker
(:mod:`gradcode.runtime.worker`). Records and checkpoints: :mod:`gradcode.runtime.records`.
The embedded Ray cluster a run starts stays up, with its idle workers, for the process's next
runs; :func:`shutdown` stops it before the interpreter exits (:mod:`gradcode.runtime.cluster`).
Importing this package does not import Ray.
"""

from gradcode._lazy import lazy_names

#: where each public name lives: imported on first use, so that the config objects
#: (``gradcode.runtime.config``, what the command line builds its options from) load without the
#: driver, the codes and numba
_HOMES = {
    "Engine": ".base", "Event": ".base",
    "shutdown": ".cluster", "ClusterRestartWarning": ".cluster", "IgnoredOptionWarning": ".cluster",
    "ClusterConfig": ".config", "FaultConfig": ".config", "RunConfig": ".config", "TrainSpec": ".config",
    "ImpreciseWaitWarning": ".driver", "RoundDriver": ".driver", "RoundTimeoutError": ".driver", "RunSetup": ".driver",
    "TrainingStopped": ".driver",
    "InProcessEngine": ".inprocess", "describe_clock": ".inprocess",
    "ScalarLog": ".loggers", "MLflowLog": ".loggers",
    "RoundBar": ".progress",
    "ENGINES": ".session", "make_engine": ".session", "runs_home": ".session",
    "build_scheme": ".setup", "parse_failures": ".setup", "prepare": ".setup",
    "resume": ".training", "train": ".training",
    "CheckpointError": ".records", "RunDirInUseError": ".records", "TrainResult": ".records", "TrainState": ".records",
    "UnsafeStateError": ".safe_state", "trust_modules": ".safe_state",
    "ProblemSpec": ".worker", "WireTask": ".worker", "WorkerCore": ".worker",
}

__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_names(__name__, _HOMES, globals())
