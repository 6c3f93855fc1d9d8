import os

import torch.nn as nn

import cuda_extension

# argv[0] of the process left behind, so that a test can look for it anywhere on the host
MARK = os.environ.get("CUDA_AGENT_TEST_MARK", "cuda-agent-detached")


def detach():
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv("/bin/sleep", [MARK, "600"])
        os._exit(0)
    os.waitpid(child, 0)  # the grandchild is adopted by init


detach()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.fused_forward(x)
