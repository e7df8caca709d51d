"""A training run's progress bar on stderr, fed by the run's per-round callback: the bar of
``gradcode train`` and of :func:`gradcode.torch.fit` (``TorchConfig.progress``), one
implementation in the runtime so that the command line and the Python API draw the same line::

    training ━━━━━━━━━━━━━━━━━━━━━━━━━━ 12/60 rounds loss 0.3127  round 24 ms 0:00:03

It never writes to stdout (a ``--json`` document stays one document), and it starts at the first
round's record, so an error while the run is set up is printed alone, not under an empty bar.
"""

from __future__ import annotations

import sys

__all__ = ["RoundBar", "show_progress"]


def show_progress(progress: bool | None) -> bool:
    """Whether a run draws its bar: ``progress`` when given, else only when stderr is a terminal
    (a script's log file, a CI job or a test's captured stderr get no bar)."""
    if progress is not None:
        return bool(progress)
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


class RoundBar:
    """A rich progress bar over a run's ``rounds`` (None: a count without a total, for a run whose
    length the loop decides), on ``console`` (default: a console on stderr). Call it with each
    round's record (it is the run's ``callback``, or part of it): it shows the rounds done, the last
    loss (the smallest of several models') and the round's time. :meth:`close` (or leaving a
    ``with`` block) stops it; the finished bar stays on the terminal."""

    def __init__(self, rounds: int | None, console=None, *, what: str = "training"):
        self.rounds, self.what = rounds, what
        if console is None:
            from rich.console import Console

            console = Console(stderr=True, emoji=False)
        self.console = console
        self._bar = None
        self._task = None

    def __enter__(self) -> RoundBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        count = "{task.completed}/{task.total} rounds" if self.rounds is not None else "{task.completed} rounds"
        self._bar = Progress(TextColumn(self.what), BarColumn(), TextColumn(count), TextColumn("{task.fields[info]}"),
                             TimeElapsedColumn(), console=self.console, transient=False)
        self._task = self._bar.add_task(self.what, total=self.rounds, info="")
        self._bar.start()

    def __call__(self, record: dict) -> None:
        if self._bar is None:
            self._start()
        loss = record["loss"]
        loss = loss if isinstance(loss, float) else min(loss)
        self._bar.update(self._task, completed=record["round"] + 1,
                         info=f"loss {loss:.4g}  round {record['time'] * 1e3:.0f} ms")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
