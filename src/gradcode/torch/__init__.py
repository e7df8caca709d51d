"""Your own PyTorch model, trained with gradient codes (the optional extra ``gradcode[torch]``).

    import torch
    from gradcode.runtime import TrainSpec
    from gradcode.torch import TorchConfig, fit
    result = fit(MyNet(), (X, y), TrainSpec("crc", workers=6, stragglers=2, delay=0.2),
                 torch_config=TorchConfig(optimizer=torch.optim.Adam, optimizer_params={"lr": 1e-3},
                                          batch_size=120, epochs=2), engine="inprocess")
    result.model        # MyNet, trained;   result.history[-1]["loss"]

:func:`fit` (:mod:`gradcode.torch.fit`) runs mini-batch training on Ray or in process;
:class:`Workers` (:mod:`gradcode.torch.workers`) gives your own loop the coded gradient; what the
workers compute and how the master steps is in :mod:`gradcode.torch.problem`; built-in models in
:mod:`gradcode.torch.models`; readers for the data files the papers' data sets come in (MNIST idx,
CIFAR-10/100 python batches) and the bundled digits in :mod:`gradcode.torch.data`.
"""

from gradcode.torch.data import digits, load_data, read_cifar, read_mnist
from gradcode.torch.fit import FitResult, TorchConfig, fit, fit_configs
from gradcode.torch.models import MLP, ResNet18, SmallCNN, make_model
from gradcode.torch.tensorboard import TensorBoard
from gradcode.torch.workers import Workers

__all__ = ["FitResult", "MLP", "ResNet18", "SmallCNN", "TorchConfig", "digits", "fit", "fit_configs", "load_data",
           "make_model", "read_cifar", "read_mnist", "TensorBoard", "Workers"]
