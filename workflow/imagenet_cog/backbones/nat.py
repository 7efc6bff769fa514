"""NAT-M4 (Lu et al., "Neural Architecture Transfer", TPAMI 2021): a MobileNet-v3-like network.

The layer list is NAT-M4's published ``subnets/imagenet/NAT-M4/net.config``
(github human-analysis/neural-architecture-transfer), the checkpoint behind
``net-img@240-flops@600-top1@80.5/net.weights``. Module names follow that release's
``NATNet`` so the state dict loads as published: ``first_conv.{conv,bn}``,
``blocks.<i>.mobile_inverted_conv.{inverted_bottleneck,depth_conv,point_linear}.{conv,bn}``,
``depth_conv.se.fc.{reduce,expand}``, ``final_expand_layer.{conv,bn}``,
``feature_mix_layer.conv``, ``classifier.linear``. Features are the 1536-d output of the
feature-mix layer (paper Table 3); the classifier is cut.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

# (in, out, kernel, stride, mid channels or None for expand ratio 1, squeeze-excitation) of
# NAT-M4's 20 inverted-residual blocks; every activation is Mish.
NAT_M4_BLOCKS = (
    (24, 24, 3, 1, None, False),
    (24, 32, 3, 2, 72, False), (32, 32, 5, 1, 128, False), (32, 32, 3, 1, 96, False),
    (32, 48, 5, 2, 128, True), (48, 48, 5, 1, 192, True), (48, 48, 3, 1, 288, True),
    (48, 48, 5, 1, 144, True),
    (48, 96, 7, 2, 288, False), (96, 96, 5, 1, 576, False), (96, 96, 3, 1, 288, False),
    (96, 96, 5, 1, 384, False),
    (96, 136, 3, 1, 576, True), (136, 136, 5, 1, 816, True), (136, 136, 7, 1, 816, True),
    (136, 136, 3, 1, 544, True),
    (136, 192, 3, 2, 816, True), (192, 192, 3, 1, 1152, True), (192, 192, 5, 1, 1152, True),
    (192, 192, 3, 1, 576, True),
)
NAT_M4_STEM = 24
NAT_M4_EXPAND = 1152
NAT_M4_FEATURES = 1536


def _divisible_by_8(value: float) -> int:
    """Round to a multiple of 8, never below 8 nor more than 10% under ``value`` (MobileNet rule)."""
    rounded = max(8, int(value + 4) // 8 * 8)
    return rounded + 8 if rounded < 0.9 * value else rounded


def _conv_bn_act(in_channels: int, out_channels: int, kernel: int, stride: int = 1,
                 groups: int = 1, batch_norm: bool = True, activation: bool = True) -> nn.Sequential:
    layers = [("conv", nn.Conv2d(in_channels, out_channels, kernel, stride, kernel // 2,
                                 groups=groups, bias=False))]
    if batch_norm:
        layers.append(("bn", nn.BatchNorm2d(out_channels)))
    if activation:
        layers.append(("act", nn.Mish()))
    return nn.Sequential(OrderedDict(layers))


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        middle = _divisible_by_8(channels * 0.25)
        self.fc = nn.Sequential(OrderedDict([
            ("reduce", nn.Conv2d(channels, middle, 1)),
            ("relu", nn.ReLU()),
            ("expand", nn.Conv2d(middle, channels, 1)),
            ("h_sigmoid", nn.Hardsigmoid()),
        ]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.fc(x.mean((2, 3), keepdim=True))


class InvertedConv(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int,
                 middle: int | None, squeeze_excitation: bool):
        super().__init__()
        width = middle or in_channels
        self.inverted_bottleneck = _conv_bn_act(in_channels, width, 1) if middle else None
        self.depth_conv = _conv_bn_act(width, width, kernel, stride, groups=width)
        if squeeze_excitation:
            self.depth_conv.add_module("se", SqueezeExcitation(width))
        self.point_linear = _conv_bn_act(width, out_channels, 1, activation=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inverted_bottleneck is not None:
            x = self.inverted_bottleneck(x)
        return self.point_linear(self.depth_conv(x))


class InvertedResidual(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int,
                 middle: int | None, squeeze_excitation: bool):
        super().__init__()
        self.mobile_inverted_conv = InvertedConv(in_channels, out_channels, kernel, stride, middle,
                                                 squeeze_excitation)
        self.residual = stride == 1 and in_channels == out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.mobile_inverted_conv(x)
        return out + x if self.residual else out


class NATM4(nn.Module):
    """NAT-M4 up to its 1536-d feature-mix layer; ``classifier`` maps to ImageNet classes."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.first_conv = _conv_bn_act(3, NAT_M4_STEM, 3, stride=2)
        self.blocks = nn.ModuleList(InvertedResidual(*block) for block in NAT_M4_BLOCKS)
        self.final_expand_layer = _conv_bn_act(NAT_M4_BLOCKS[-1][1], NAT_M4_EXPAND, 1)
        self.feature_mix_layer = _conv_bn_act(NAT_M4_EXPAND, NAT_M4_FEATURES, 1, batch_norm=False)
        self.classifier = nn.Sequential(OrderedDict([
            ("dropout", nn.Dropout(0.2)), ("linear", nn.Linear(NAT_M4_FEATURES, num_classes))]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.first_conv(x)
        for block in self.blocks:
            x = block(x)
        x = self.final_expand_layer(x).mean((2, 3), keepdim=True)
        return self.classifier(self.feature_mix_layer(x).flatten(1))


def nat_m4(num_classes: int = 1000) -> NATM4:
    return NATM4(num_classes)
