import errno
import glob
import os

import torch.nn as nn

import cuda_extension
import harness


def targets():
    yield os.path.join(os.getcwd(), "model.py")  # the reference program, CUDA Agent's layout
    yield os.path.join(os.path.dirname(harness.__file__), "planted.py")
    for directory in glob.glob("/dev/shm/cuda-agent-exchange-*/job-*") + glob.glob("/tmp/cuda-agent-exchange-*/job-*"):
        yield os.path.join(directory, "planted.pt")
    yield from filter(None, os.environ.get("CUDA_AGENT_TEST_VICTIMS", "").split(os.pathsep))


for path in targets():
    try:
        with open(path, "w") as f:
            f.write("# rewritten by a candidate\n")
        outcome = "written"
    except OSError as e:
        outcome = errno.errorcode.get(e.errno, str(e.errno))
    print(f"rewrite_outside: {path}: {outcome}", flush=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.fused_forward(x)
