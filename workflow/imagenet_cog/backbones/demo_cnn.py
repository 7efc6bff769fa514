"""The demo's own small network, pretrained by the workflow on the demo's IN-1K images.

Four 3x3 convolution blocks (batch norm, ReLU, 2x2 max pooling after the first three) and
global average pooling give a 128-d feature; ``head`` is the classifier of pretraining,
which the registry cuts like any other. A few CPU minutes train it on 32-pixel images
(see :mod:`imagenet_cog.demo_pretraining`).
"""

from __future__ import annotations

from torch import nn

WIDTH = 32
FEATURE_DIM = 4 * WIDTH
# The registry builds the network before a checkpoint is loaded into it; its classifier is
# cut either way, so its size does not matter there.
REGISTRY_CLASSES = 1000


def _block(inputs: int, outputs: int) -> list[nn.Module]:
    return [nn.Conv2d(inputs, outputs, 3, padding=1, bias=False), nn.BatchNorm2d(outputs), nn.ReLU(inplace=True)]


class DemoCNN(nn.Module):
    def __init__(self, num_classes: int = REGISTRY_CLASSES):
        super().__init__()
        self.features = nn.Sequential(
            *_block(3, WIDTH), nn.MaxPool2d(2),
            *_block(WIDTH, 2 * WIDTH), nn.MaxPool2d(2),
            *_block(2 * WIDTH, 4 * WIDTH), nn.MaxPool2d(2),
            *_block(4 * WIDTH, FEATURE_DIM),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.head = nn.Linear(FEATURE_DIM, num_classes)

    def forward(self, images):
        return self.head(self.features(images))


def demo_cnn(num_classes: int = REGISTRY_CLASSES) -> DemoCNN:
    return DemoCNN(num_classes)
