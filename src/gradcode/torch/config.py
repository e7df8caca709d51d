"""How a torch model trains (:class:`TorchConfig`), beside the runtime's
:class:`~gradcode.runtime.config.TrainSpec`. This module imports no torch, so that the command
line can offer these fields as options (:mod:`gradcode.experiments.cli_options`) without torch
installed or loaded."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gradcode._options import described
from gradcode._validation import check_choice, check_int, check_real
from gradcode.codes.precision import WIRE_DTYPES

#: what a worker's forward pass may run in under torch.autocast
AUTOCAST_DTYPES = ("bfloat16", "float16")

__all__ = ["AUTOCAST_DTYPES", "WIRE_DTYPES", "TorchConfig", "batch_size_given"]


class _DefaultBatch(int):
    """``TorchConfig.batch_size``'s default, 64, as an ``int`` that remembers it was not given:
    ``TorchConfig(batch_size=64)`` and ``TorchConfig()`` are otherwise the same value, and only the
    first should stand against a ``DataLoader``'s own batch size (:func:`batch_size_given`). It is
    64 in every other respect (arithmetic, comparison, JSON, pickling)."""


def batch_size_given(config: TorchConfig) -> bool:
    """Whether ``config.batch_size`` was given (``None`` included) rather than left at its default:
    the rule by which a ``DataLoader``'s own ``batch_size`` applies (:func:`gradcode.torch.fit`)."""
    return type(config.batch_size) is not _DefaultBatch


@dataclass(frozen=True)
class TorchConfig:
    """How a torch model trains, beside the :class:`~gradcode.runtime.config.TrainSpec` (the code,
    workers, stragglers, models, seed, closing rule) of :func:`fit`.

    ``loss(output, target)``: a scalar, or a loss by name (``"cross-entropy"``, ``"mse"``,
    ``"FILE.py:NAME"``: :func:`~gradcode.torch.loading.loss_function`); default cross-entropy for integer targets, mean squared
    error for float ones; ``loss_reduction``: whether it is the ``"mean"`` (torch's default) or the
    ``"sum"`` over the samples given, so that the decoded gradient is the batch's mean gradient.
    ``optimizer``: any ``torch.optim`` class by name in any case (``"sgd"``, ``"adam"``,
    ``"adamw"``, ``"RMSprop"``, ``"adagrad"``: :func:`~gradcode.torch.loading.optimizer_class`), your
    own as ``"FILE.py:NAME"`` / ``"package.module:NAME"``, a ``torch.optim`` class (built with
    ``optimizer_params``, e.g. ``{"lr": 0.1, "momentum": 0.9}``; ``"sgd"`` by name defaults to
    ``lr=0.01``) or a factory ``params -> Optimizer``; it steps on the master with the decoded
    gradient, once a round (an optimizer that needs a closure, as LBFGS, is refused).
    ``scheduler``: a factory ``optimizer -> LR scheduler``, or a schedule by name
    (``"step"``, ``"cosine"``, with parameters as ``"step:gamma=0.5"``:
    :func:`~gradcode.torch.loading.scheduler_factory`), stepped after every optimizer step.
    ``batch_size``: samples per job (None: full batch); left at its default (64), a
    ``DataLoader``'s own ``batch_size`` applies, and one given that differs from the loader's is
    refused, naming both (:func:`batch_size_given`).
    ``epochs``: the run's length when ``RunConfig.rounds`` is None (default one epoch of
    ``N / batch_size`` jobs per model).

    ``autocast``: ``"bfloat16"`` or ``"float16"`` runs each worker's forward pass (model and loss)
    under :func:`torch.autocast` in that type, the parameters and their gradients staying float32
    (None: float32 throughout). With float16 each worker scales its loss as
    :class:`torch.amp.GradScaler` does (from 2**16; halved after an overflow, doubled after 2000
    clean backward passes) and unscales its gradients before encoding them: a backward pass that
    overflows is run again at the halved scale on the same samples and seed (its buffers put
    back), so no step is skipped and every message is the unscaled gradient; each round records
    the re-run passes behind the messages it received (``TrainResult.overflows``, ``rounds.jsonl``,
    the history's ``overflows``, the ``round/overflows`` scalar). Do not wrap an own
    loop's :meth:`Workers.backward` in a ``GradScaler``: the gradients it sets are unscaled
    already (``scaler.step`` would divide them by its scale).

    ``wire_dtype``: what messages cross the wire in: ``"float32"`` (default), ``"float64"``, or
    ``"float16"``/``"bfloat16"`` (half the bytes, as SGC App. L). The master decodes in float64 and
    judges each decode's error bound in that precision against ``decode_rtol`` (default by
    precision, :data:`gradcode.codes.DEFAULT_RTOL`: 1e-3 for float32, 5e-2 for float16): within
    it, accepted; beyond it but no worse than a plain sum of the partial gradients (near an
    optimum), accepted and counted in the run's ``loose_rounds``; otherwise refused
    (:class:`~gradcode.codes.ImpreciseDecodeError`: the round waits for more workers).
    ``decode_strict`` refuses every decode beyond ``decode_rtol``. The bound is a worst case,
    typically far above the real error; codes with large coefficients (AGC with L >= 6,
    Vandermonde CGC) need float64 messages or a looser ``decode_rtol`` in float32.

    ``eval_data``: held-out data as :func:`fit`'s ``data``; loss, accuracy and ``metrics`` (``name
    -> fn(output, target)``) every ``RunConfig.eval_every`` rounds and after the last.

    ``clip_grad_norm``: the decoded batch gradient's norm is clipped to it before each optimizer
    step (``torch.nn.utils.clip_grad_norm_``). ``device``: where the workers compute and the
    master steps (``"cpu"``, ``"cuda"``, ``"cuda:N"``; None: the model's own device, CPU for a
    factory); a CUDA device on a machine without one is a one-line error. On Ray each worker
    reserves a share of the cluster's GPUs (``ClusterConfig.worker_gpus``).

    ``progress``: :func:`fit` draws a progress bar on stderr (rounds done, the last loss and round
    time: :class:`~gradcode.runtime.progress.RoundBar`, the command line's bar): ``True``, ``False``,
    or None (default) for only when stderr is a terminal (a notebook, a log file, CI: none).

    ``scheme="auto"`` (the spec's scheme): train uncoded for ``probe`` rounds (default 20), measure
    the workers, then switch, without restarting them or losing a job, to the GC, SR-SGC or M-SGC
    parameters that the paper's search predicts fastest for the rounds left (SGC App. K;
    :class:`~gradcode.schemes.switch.ProbeThenSwitch`; ``load_slope``: seconds per unit of load,
    estimated from the probe when not given; ``families``: those searched, a subset of
    ``"uncoded"``, ``"crc"``, ``"sr-sgc"``, ``"m-sgc"``).
    """

    loss: Callable | str | None = described(
        None, "cross-entropy (class targets), mse (float targets) or FILE.py:NAME / module:NAME, a loss(output,"
              " target) returning the batch's mean (default: by the targets' type).", torch_only=True)
    loss_reduction: str = described("mean", "Whether the loss is the mean (torch's default) or the sum over its"
                                            " samples.", torch_only=True)
    optimizer: Any = described("sgd", "Any torch.optim optimizer by name (sgd, adam, adamw, RMSprop, adagrad, ...;"
                                      " any case) or FILE.py:NAME / package.module:NAME (a class or a factory"
                                      " params -> optimizer).")
    optimizer_params: Mapping | None = described(None, "The torch optimizer's parameters, e.g. lr=0.1.")
    scheduler: Callable | str | None = described(
        None, "The learning rate's schedule, stepped every round: step (x gamma every step_size rounds; default a"
              " third of the rounds, gamma 0.1), cosine (to 0 over the rounds), with parameters as"
              " step:step_size=10,gamma=0.5; or FILE.py:NAME, a factory optimizer -> LR scheduler.",
        torch_only=True)
    batch_size: int | None = described(_DefaultBatch(64), "Samples per job, split over the partitions.",
                                        torch_only=True)
    epochs: float | None = described(None, "The run's length in epochs when --rounds is not given (default 1).",
                                     torch_only=True)
    wire_dtype: str = described("float32", "float32, float64, float16 or bfloat16 messages.", torch_only=True)
    decode_rtol: float | None = described(None, "A decode's tolerance on its relative error bound (default by the"
                                                " wire's precision); beyond it, a decode no worse than a plain sum"
                                                " is accepted and counted (loose_rounds), any other refused.",
                                          torch_only=True)
    decode_strict: bool = described(False, "Refuse every decode beyond --decode-rtol, and any whose bound is an"
                                           " estimate (messages without scales).", torch_only=True)
    autocast: str | None = described(None, "Each worker's forward pass under torch.autocast: bfloat16 or float16"
                                           " (float16 with loss scaling on the workers).", torch_only=True)
    eval_data: Any = described(None, "Held-out data.", cli=False)
    metrics: Mapping[str, Callable] | None = described(None, "Held-out metrics, name -> fn(output, target).",
                                                       cli=False)
    probe: int | None = described(None, "--scheme auto: rounds trained uncoded to measure the workers before"
                                        " switching to the scheme predicted fastest (default 20; SGC App. K).",
                                  torch_only=True)
    load_slope: float | None = described(
        None, "--scheme auto: seconds per unit of load that the search adds to the probe's times (SGC App. J's"
              " alpha; default: the injected delays' slope, fitted with --inject full, plus n x the fastest"
              " worker's own time in the probe).", torch_only=True)
    families: Sequence[str] | None = described(None, "--scheme auto: the families searched (repeatable): uncoded, crc, sr-sgc,"
                                    " m-sgc (default: all).", torch_only=True)
    clip_grad_norm: float | None = described(None, "Clip the decoded gradient's norm to this before each step.",
                                             torch_only=True)
    device: str | None = described(None, "Where the workers compute and the master steps: cpu, cuda or cuda:N"
                                         " (default: the model's; on Ray each worker reserves a share of the"
                                         " cluster's GPUs).", torch_only=True)
    progress: bool | None = described(None, "fit's progress bar on stderr: True, False, or None (default) for only"
                                            " when stderr is a terminal.", cli=False)

    def __post_init__(self):
        check_choice("loss_reduction", self.loss_reduction, ("mean", "sum"))
        check_choice("wire_dtype", self.wire_dtype, WIRE_DTYPES)
        if self.autocast is not None:
            check_choice("autocast", self.autocast, AUTOCAST_DTYPES)
        if self.batch_size is not None and type(self.batch_size) is not _DefaultBatch:
            object.__setattr__(self, "batch_size", check_int("batch_size", self.batch_size, minimum=1))
        from gradcode.torch.loading import check_scheduler, loss_function, optimizer_class

        object.__setattr__(self, "loss", loss_function(self.loss))
        optimizer_class(self.optimizer)  # an unknown name or a file that does not import, now
        check_scheduler(self.scheduler)
        if self.optimizer_params is not None:
            object.__setattr__(self, "optimizer_params", dict(self.optimizer_params))
        if self.clip_grad_norm is not None:
            object.__setattr__(self, "clip_grad_norm", check_real("clip_grad_norm", self.clip_grad_norm, minimum=0.0,
                                                                  strict_min=True))
        if self.device is not None:
            object.__setattr__(self, "device", str(self.device))
        if self.progress is not None and not isinstance(self.progress, bool):
            raise TypeError(f"progress must be True, False or None (when stderr is a terminal), got {self.progress!r}")
