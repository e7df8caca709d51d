""":class:`TensorBoard`: a run's records as TensorBoard event files (``torch.utils.tensorboard``).

Beside the run dir's ``rounds.jsonl`` (every round's arrivals, messages and faults), the scalars a
practitioner watches, by round: ``train/loss`` (the batch's mean loss), ``round/time_s`` (the
round's duration: plan to close), ``round/elapsed_s`` and ``round/stragglers``; on evaluation
rounds each held-out metric as ``eval/<name>`` (``eval/accuracy``, ``eval/loss``...). With several
models (``models=M``) every scalar is under ``model<m>/``. Use it as :func:`~gradcode.torch.fit`'s
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
        t = int(record["round"])
        losses = record["loss"] if isinstance(record["loss"], list) else [record["loss"]]
        several = len(losses) > 1
        add = self.writer.add_scalar
        for m, loss in enumerate(losses):
            add(f"model{m}/train/loss" if several else "train/loss", float(loss), t)
        add("round/time_s", float(record["time"]), t)
        add("round/elapsed_s", float(record["elapsed"]), t)
        add("round/stragglers", int(record["stragglers"]), t)
        for entry in record.get("metrics", ()):
            prefix = f"model{entry.get('model', 0)}/eval" if several else "eval"
            for name, value in entry.items():
                if name not in ("round", "elapsed", "model", "train_loss") and isinstance(value, (int, float)):
                    add(f"{prefix}/{name}", float(value), t)

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> TensorBoard:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
