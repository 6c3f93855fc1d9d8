import torch
import torch.nn as nn

import cuda_extension

torch.set_default_dtype(torch.float64)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.fused_forward(x)
