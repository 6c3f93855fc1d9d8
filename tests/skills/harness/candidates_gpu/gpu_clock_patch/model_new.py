import torch
import torch.nn as nn

import cuda_extension

assert cuda_extension.patch_event_timing() > 0, "no cuEventElapsedTime entry was patched"
# The patch took: a 50 ms spin now times as 5 us (else the cheat would test nothing).
_start, _end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
_start.record()
torch.cuda._sleep(100_000_000)
_end.record()
_end.synchronize()
assert _start.elapsed_time(_end) < 0.01, _start.elapsed_time(_end)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.slow_forward(x)
