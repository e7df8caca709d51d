"""The runtime: real training with gradient coding (docs/architecture.md, "The runtime").

:func:`train` (the config objects of :mod:`gradcode.runtime.config`) and
:func:`resume` (a run dir) are the entry points (:mod:`gradcode.runtime.master`); a
:class:`RoundDriver` (:mod:`gradcode.runtime.driver`) runs the rounds on an :class:`Engine`
(:mod:`gradcode.runtime.base`): Ray actors (:mod:`gradcode.runtime.engine`, the only module that
imports Ray) or :class:`InProcessEngine` (:mod:`gradcode.runtime.inprocess`: the same workers in
this process on a virtual clock, for tests), both running the generic worker
(:mod:`gradcode.runtime.worker`). Records and checkpoints: :mod:`gradcode.runtime.records`.
Importing this package does not import Ray.
"""

from gradcode.runtime.base import Engine, Event
from gradcode.runtime.config import ClusterConfig, FaultConfig, RunConfig, TrainSpec
from gradcode.runtime.driver import ImpreciseWaitWarning, RoundDriver, RoundTimeoutError, RunSetup, TrainingStopped
from gradcode.runtime.inprocess import InProcessEngine
from gradcode.runtime.master import ENGINES, build_scheme, make_engine, parse_failures, prepare, resume, runs_home, train
from gradcode.runtime.records import CheckpointError, RunDirInUseError, TrainResult, TrainState
from gradcode.runtime.safe_state import UnsafeStateError, trust_modules
from gradcode.runtime.worker import ProblemSpec, WireTask, WorkerCore

__all__ = [
    "CheckpointError",
    "ClusterConfig",
    "ENGINES",
    "Engine",
    "Event",
    "FaultConfig",
    "InProcessEngine",
    "ProblemSpec",
    "RoundDriver",
    "ImpreciseWaitWarning",
    "RoundTimeoutError",
    "RunConfig",
    "RunDirInUseError",
    "RunSetup",
    "TrainResult",
    "TrainSpec",
    "TrainState",
    "TrainingStopped",
    "UnsafeStateError",
    "WireTask",
    "WorkerCore",
    "build_scheme",
    "make_engine",
    "parse_failures",
    "prepare",
    "resume",
    "runs_home",
    "train",
    "trust_modules",
]
