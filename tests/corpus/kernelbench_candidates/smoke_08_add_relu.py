# A KernelBench-format candidate whose sources are built at run time from a loop: cuda-agent
# cannot read them from the text, so it is judged as a candidate that did not compile.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

parts = []
for op in ("add", "relu"):
    parts.append("// " + op)

fused = load_inline(name="fused", cpp_sources="\n".join(parts), functions=["add_relu"])


class ModelNew(nn.Module):
    def forward(self, x, y):
        return fused.add_relu(x, y)
