import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Residual sum followed by layer normalisation (a transformer's add & norm)."""

    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x, residual):
        return self.norm(x + residual)


rows = 65536
features = 4096


def get_inputs():
    return [torch.randn(rows, features), torch.randn(rows, features)]


def get_init_inputs():
    return [features]
