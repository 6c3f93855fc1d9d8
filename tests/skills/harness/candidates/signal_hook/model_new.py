"""A timer signal whose handler runs the candidate's code at any moment of the harness's own
calls (between drawing an input set and starting the clock, for one)."""
import signal

import torch.nn as nn

import cuda_extension

signal.signal(signal.SIGALRM, lambda number, frame: None)
signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return cuda_extension.linear_relu(x, self.linear.weight, self.linear.bias)
