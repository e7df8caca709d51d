"""Built-in models for :func:`gradcode.torch.fit` and ``gradcode train --model NAME``: an MLP, the
small CNN of the default demo, and a CIFAR ResNet-18 (He et al. 2016's BasicBlock network with the
3x3 stem CIFAR models use, 11.2 M parameters for 100 classes as in SGC App. L). Each is a plain
``nn.Module`` class; :func:`make_model` builds one from a name and the data's shape."""

from __future__ import annotations

from torch import nn

__all__ = ["MLP", "MODELS", "ResNet18", "SmallCNN", "make_model"]


class MLP(nn.Module):
    """``in -> hidden ... -> out`` with ReLU; inputs are flattened."""

    def __init__(self, n_in: int, n_out: int, hidden=(64,)):
        super().__init__()
        layers, width = [nn.Flatten()], n_in
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, n_out))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class SmallCNN(nn.Module):
    """conv3x3(c)-BN-ReLU-maxpool-conv3x3(2c)-ReLU-maxpool-linear, for ``(C, H, W)`` images
    (the MNIST CNN of SGC Sec. 4.2 in spirit, small enough for CI)."""

    def __init__(self, image_shape, n_out: int, channels: int = 8):
        super().__init__()
        C, H, W = image_shape
        self.net = nn.Sequential(
            nn.Conv2d(C, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(2 * channels * (H // 4) * (W // 4), n_out),
        )
        self.image_shape = tuple(image_shape)

    def forward(self, x):
        return self.net(x.reshape(x.shape[0], *self.image_shape))


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = nn.functional.relu(self.bn1(self.conv1(x)))
        return nn.functional.relu(self.bn2(self.conv2(out)) + self.short(x))


class ResNet18(nn.Module):
    """ResNet-18 for 32x32 images: 3x3 stem, four stages of two BasicBlocks (64-512 channels),
    global average pooling, linear head. ``width`` scales the channels (64 is the paper's)."""

    def __init__(self, n_out: int = 10, in_channels: int = 3, width: int = 64):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(in_channels, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
        stages, cin = [], w
        for i, cout in enumerate((w, 2 * w, 4 * w, 8 * w)):
            stride = 1 if i == 0 else 2
            stages += [_Block(cin, cout, stride), _Block(cout, cout, 1)]
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(cin, n_out)

    def forward(self, x):
        out = self.stages(self.stem(x))
        return self.head(out.mean(dim=(2, 3)))


MODELS = ("mlp", "cnn", "resnet18")


def make_model(name: str, *, n_in: int, n_out: int, image_shape=None, **params) -> nn.Module:
    """Built-in model ``name`` for inputs of ``n_in`` features (``image_shape`` for images) and
    ``n_out`` outputs."""
    if name == "mlp":
        return MLP(n_in, n_out, **params)
    if name == "cnn":
        if image_shape is None:
            raise ValueError("model 'cnn' needs image data (inputs of shape (C, H, W))")
        return SmallCNN(image_shape, n_out, **params)
    if name == "resnet18":
        if image_shape is None:
            raise ValueError("model 'resnet18' needs image data (inputs of shape (C, H, W))")
        return ResNet18(n_out, in_channels=image_shape[0], **params)
    raise ValueError(f"unknown model {name!r}; built-in models: {', '.join(MODELS)} (or FILE.py:NAME, module:NAME)")
