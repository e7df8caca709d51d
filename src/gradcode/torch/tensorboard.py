""":class:`TensorBoard`: a run's records as TensorBoard event files (``torch.utils.tensorboard``).

Beside the run dir's ``rounds.jsonl`` (every round's arrivals, messages and faults), the scalars a
practitioner watches, by round (:func:`gradcode.runtime.loggers.scalars`: ``train/loss``,
``round/time_s``, ``round/elapsed_s``, ``round/stragglers``, ``round/overflows``, ``eval/<name>``; with several models
the loss and metrics under ``model<m>/``); :class:`~gradcode.runtime.loggers.ScalarLog` writes the
same as CSV or JSON lines. Use it as :func:`~gradcode.torch.fit`'s
``callback`` (or call it from your own, or on :attr:`gradcode.torch.Workers.history`'s records)::

    with TensorBoard("tb/crc") as tb:
        fit(net, data, spec, callback=tb)
"""

from __future__ import annotations

import os

__all__ = ["TensorBoard"]


class TensorBoard:
    """Writes each round record it is called with to TensorBoard event files under ``log_dir``."""

    def __init__(self, log_dir: str | os.PathLike, *, flush_secs: int = 10):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # pragma: no cover - tensorboard comes with gradcode[torch]
            raise ImportError(f"TensorBoard logging needs the tensorboard package: pip install tensorboard ({exc})"
                              ) from None
        self.log_dir = str(log_dir)
        self.writer = SummaryWriter(log_dir=self.log_dir, flush_secs=flush_secs)

    def __call__(self, record: dict) -> None:
        from gradcode.runtime.loggers import scalars

        t = int(record["round"])
        for name, value in scalars(record).items():
            self.writer.add_scalar(name, value, t)

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> TensorBoard:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
