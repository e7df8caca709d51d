"""Your own PyTorch model, trained with gradient codes (the optional extra ``gradcode[torch]``).

    import torch
    from gradcode.runtime import TrainSpec
    from gradcode.torch import TorchConfig, fit
    result = fit(MyNet(), (X, y), TrainSpec("crc", workers=6, stragglers=2, delay=0.2),
                 torch_config=TorchConfig(optimizer=torch.optim.Adam, optimizer_params={"lr": 1e-3},
                                          batch_size=120, epochs=2), engine="inprocess")
    result.model        # MyNet, trained;   result.history[-1]["loss"]

:func:`fit` (:mod:`gradcode.torch.training`) runs mini-batch training on Ray or in process;
:class:`Workers` (:mod:`gradcode.torch.workers`) gives your own loop the coded gradient; what the
workers compute and how the master steps is in :mod:`gradcode.torch.problem`; built-in models in
:mod:`gradcode.torch.models`; readers for the data files the papers' data sets come in (MNIST idx,
CIFAR-10/100 python batches) and the bundled digits in :mod:`gradcode.torch.data`. A run's
``model.pt`` and ``optimizer.pt`` (plain ``state_dict`` files for other torch code) and
:func:`load_run`, which reads them: :mod:`gradcode.torch.saved`.
"""

from gradcode._lazy import lazy_names

#: where each public name lives: imported on first use, so that ``gradcode.torch.config`` (the
#: command line's options) loads without loading torch
_HOMES = {
    "FitResult": ".training", "fit": ".training", "TorchConfig": ".config", "MLP": ".models", "ResNet18": ".models",
    "SmallCNN": ".models", "make_model": ".models", "digits": ".data", "load_data": ".data", "read_cifar": ".data",
    "read_mnist": ".data", "TensorBoard": ".tensorboard", "Workers": ".workers", "load_run": ".saved",
    "SavedRun": ".saved",
}

__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_names(__name__, _HOMES, globals())
