import torch
import torch.nn as nn

import cuda_extension
import numpy as np


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.from_numpy(np.maximum(x.numpy() * 2.0 + 1.0, 0.0).astype(np.float32))
