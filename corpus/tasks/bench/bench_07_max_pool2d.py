import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """2x2 max pooling with stride 2."""

    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=2)

    def forward(self, x):
        return self.pool(x)


batch = 64
channels = 64
height = 512
width = 512


def get_inputs():
    return [torch.randn(batch, channels, height, width)]


def get_init_inputs():
    return []
