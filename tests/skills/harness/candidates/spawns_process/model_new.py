import torch
import torch.nn as nn

import cuda_extension
import subprocess


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        subprocess.run(['true'])
        return cuda_extension.fused_forward(x)
