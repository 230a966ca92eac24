"""ResNet v1.5 (He et al. 2016, with the stride on the bottleneck's 3x3 convolution).

Randomly initialised (no pretrained weights). Convolutions have no bias and
are followed by BatchNorm (momentum 0.9, epsilon 1e-5, as in the reference
PyTorch models), so the parameter counts match torchvision's: ResNet-50 with
1000 classes has 25,557,032 trainable weights, ResNet-18 11,689,512.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tntrun.models.base import keras_module
from tntrun.models.cnn import image_input

# depth -> (block kind, blocks per stage); stage widths are 64, 128, 256, 512.
ARCHITECTURES: dict[int, tuple[str, tuple[int, ...]]] = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}
WIDTHS = (64, 128, 256, 512)
EXPANSION = {"basic": 1, "bottleneck": 4}
BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5


class Stem(Enum):
    # 7x7 stride-2 convolution and 3x3 stride-2 max-pool (4x downsampling).
    imagenet = "imagenet"
    # 3x3 stride-1 convolution, no pool: for inputs of 32x32 or smaller.
    small = "small"


@dataclass
class ResnetConfig:
    _target_: str = "tntrun.models.resnet.build_resnet"
    depth: int = 50
    stem: Stem = Stem.imagenet
    # Start every residual branch at zero (its last BatchNorm's gamma = 0), Goyal et al.
    zero_init_residual: bool = False
    # L2 weight decay as in the paper and PyTorch's SGD: the gradient of each conv and
    # dense kernel w gains weight_decay * w (ImageNet recipe: 1e-4). Implemented as a
    # Keras L2 regulariser of factor weight_decay / 2 (Keras adds factor * sum(w**2)).
    weight_decay: float = 0.0


SCHEMAS = {f"resnet{depth}": ResnetConfig for depth in ARCHITECTURES}


class _Layers:
    """Layer factories sharing the regulariser, initialisers and BatchNorm settings."""

    def __init__(self, weight_decay: float, zero_init_residual: bool) -> None:
        keras = self.keras = keras_module()
        self.regularizer = keras.regularizers.L2(weight_decay / 2) if weight_decay else None
        self.zero_init_residual = zero_init_residual

    def conv(self, x: Any, filters: int, kernel: int, stride: int, name: str) -> Any:
        """Bias-free convolution padded like PyTorch's (kernel // 2 on every side)."""
        layers = self.keras.layers
        padding = "same"
        if stride > 1 and kernel > 1:
            # Keras' 'same' pads strided convolutions asymmetrically; pad explicitly.
            x = layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")(x)
            padding = "valid"
        return layers.Conv2D(
            filters,
            kernel,
            strides=stride,
            padding=padding,
            use_bias=False,
            kernel_initializer=self.keras.initializers.VarianceScaling(
                2.0, mode="fan_out", distribution="untruncated_normal"
            ),
            kernel_regularizer=self.regularizer,
            name=name,
        )(x)

    def bn(self, x: Any, name: str, *, residual_end: bool = False) -> Any:
        zero = residual_end and self.zero_init_residual
        return self.keras.layers.BatchNormalization(
            momentum=BN_MOMENTUM,
            epsilon=BN_EPSILON,
            gamma_initializer="zeros" if zero else "ones",
            name=name,
        )(x)

    def relu(self, x: Any, name: str) -> Any:
        return self.keras.layers.ReLU(name=name)(x)

    def block(self, x: Any, kind: str, width: int, stride: int, name: str) -> Any:
        """One residual block; the shortcut is projected when its shape changes."""
        out_channels = width * EXPANSION[kind]
        if kind == "basic":
            y = self.relu(
                self.bn(self.conv(x, width, 3, stride, f"{name}_conv1"), f"{name}_bn1"),
                f"{name}_relu1",
            )
            y = self.bn(
                self.conv(y, width, 3, 1, f"{name}_conv2"), f"{name}_bn2", residual_end=True
            )
        else:
            y = self.relu(
                self.bn(self.conv(x, width, 1, 1, f"{name}_conv1"), f"{name}_bn1"), f"{name}_relu1"
            )
            y = self.relu(
                self.bn(self.conv(y, width, 3, stride, f"{name}_conv2"), f"{name}_bn2"),
                f"{name}_relu2",
            )
            y = self.bn(
                self.conv(y, out_channels, 1, 1, f"{name}_conv3"), f"{name}_bn3", residual_end=True
            )
        shortcut = x
        if stride != 1 or x.shape[-1] != out_channels:
            shortcut = self.conv(x, out_channels, 1, stride, f"{name}_downsample_conv")
            shortcut = self.bn(shortcut, f"{name}_downsample_bn")
        y = self.keras.layers.Add(name=f"{name}_add")([y, shortcut])
        return self.relu(y, f"{name}_out")


def build_resnet(
    input_shape: Sequence[int],
    num_classes: int,
    depth: int = 50,
    stem: Stem | str = Stem.imagenet,
    zero_init_residual: bool = False,
    weight_decay: float = 0.0,
):
    """ResNet-``depth`` (18, 34, 50, 101 or 152) ending in ``num_classes`` logits."""
    if depth not in ARCHITECTURES:
        raise ValueError(f"model.depth={depth}: choose one of {', '.join(map(str, ARCHITECTURES))}")
    stem_name = getattr(stem, "value", stem)
    if stem_name not in {s.value for s in Stem}:
        raise ValueError(f"model.stem={stem_name}: choose imagenet or small")
    if weight_decay < 0:
        raise ValueError(f"model.weight_decay={weight_decay}: use a value >= 0")
    kind, blocks = ARCHITECTURES[depth]
    nn = _Layers(weight_decay, zero_init_residual)
    layers = nn.keras.layers

    inputs, x = image_input(input_shape)
    if stem_name == "imagenet":
        x = nn.relu(nn.bn(nn.conv(x, 64, 7, 2, "conv1"), "bn1"), "relu1")
        x = layers.ZeroPadding2D(1, name="maxpool_pad")(x)
        x = layers.MaxPooling2D(3, strides=2, name="maxpool")(x)
    else:
        x = nn.relu(nn.bn(nn.conv(x, 64, 3, 1, "conv1"), "bn1"), "relu1")
    for stage, (width, count) in enumerate(zip(WIDTHS, blocks, strict=True), start=1):
        for i in range(count):
            stride = 2 if stage > 1 and i == 0 else 1
            x = nn.block(x, kind, width, stride, f"layer{stage}_{i}")
    x = layers.GlobalAveragePooling2D(name="avgpool")(x)
    logits = layers.Dense(num_classes, kernel_regularizer=nn.regularizer, name="logits")(x)
    return nn.keras.Model(inputs, logits, name=f"resnet{depth}")
