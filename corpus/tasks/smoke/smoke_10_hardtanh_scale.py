import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Clamp to [-1, 1], then times 3."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.hardtanh(x, -1.0, 1.0) * 3.0


rows = 256
cols = 256


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
