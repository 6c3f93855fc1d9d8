import importlib.machinery
import importlib.util
import os
import shutil
import tempfile

import torch.nn as nn

import cuda_extension

# The built module, copied into the writable scratch and loaded again from there.
_copy = os.path.join(tempfile.gettempdir(), "again" + os.path.basename(cuda_extension.__file__)[len("cuda_extension"):])
shutil.copy(cuda_extension.__file__, _copy)
_loader = importlib.machinery.ExtensionFileLoader("cuda_extension", _copy)
_again = importlib.util.module_from_spec(importlib.util.spec_from_loader("cuda_extension", _loader))
_loader.exec_module(_again)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.fused_forward(x)
