"""The Ray runtime: real training with gradient coding (DESIGN.md "The runtime").

:func:`train` runs the master loop (:mod:`gradcode.runtime.master`) on Ray actors
(:mod:`gradcode.runtime.engine`, the only module that imports Ray) that run generic worker tasks
(:mod:`gradcode.runtime.worker`). Importing this package does not import Ray.
"""

from gradcode.runtime.master import (
    CheckpointError,
    RoundTimeoutError,
    RunDirInUseError,
    TrainResult,
    build_scheme,
    parse_failures,
    train,
)
from gradcode.runtime.worker import ProblemSpec, WireTask, WorkerCore

__all__ = [
    "CheckpointError",
    "ProblemSpec",
    "RoundTimeoutError",
    "RunDirInUseError",
    "TrainResult",
    "WireTask",
    "WorkerCore",
    "build_scheme",
    "parse_failures",
    "train",
]
