"""Importers on fixtures written here in KernelBench's layout and Ops-6K's parquet schema."""
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cuda_agent_corpus.importers import import_kernelbench, import_ops6k, operators_of, parse_ops
from cuda_agent_corpus.loader import validate
from cuda_agent_corpus.task import TaskError, TaskSet

KB_MATMUL = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """Simple model that performs a single square matrix multiplication (C = A * B)"""
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)

N = 64

def get_inputs():
    A = torch.randn(N, N)
    B = torch.randn(N, N)
    return [A, B]

def get_init_inputs():
    return []  # No special initialization inputs needed
'''

KB_CONV = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        x = self.conv(x)
        x = torch.relu(x)
        return x

batch_size = 2
in_channels = 3
out_channels = 4
height, width = 16, 16
kernel_size = 3

def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
'''


def write_kernelbench(root):
    (root / "KernelBench" / "level1").mkdir(parents=True)
    (root / "KernelBench" / "level2").mkdir(parents=True)
    (root / "KernelBench" / "level1" / "1_Square_matrix_multiplication_.py").write_text(KB_MATMUL)
    (root / "KernelBench" / "level2" / "1_Conv2D_ReLU.py").write_text(KB_CONV)
    (root / "KernelBench" / "level2" / "2_Broken.py").write_text("def oops(:\n")


def test_kernelbench_layout(tmp_path):
    write_kernelbench(tmp_path / "kb")
    ts, skipped = import_kernelbench(tmp_path / "kb", tmp_path / "out", "kb")
    assert sorted(ts.tasks) == ["kb_l1_1_Square_matrix_multiplication", "kb_l2_1_Conv2D_ReLU"]
    conv = ts.tasks["kb_l2_1_Conv2D_ReLU"]
    assert conv.level == 2 and conv.source == "kernelbench"
    assert conv.operators == ["nn.Conv2d", "torch.relu"]
    assert conv.sizes["batch_size"] == 2 and conv.sizes["kernel_size"] == 3
    assert len(skipped) == 1 and "2_Broken.py" in skipped[0] and "does not parse" in skipped[0]
    reopened = TaskSet.open(tmp_path / "out")
    for task in reopened.tasks.values():
        validate(reopened.path_of(task))


def test_kernelbench_without_levels_is_an_error(tmp_path):
    with pytest.raises(TaskError, match="no level1..level4"):
        import_kernelbench(tmp_path, tmp_path / "out")


def test_ops6k_parquet(tmp_path):
    table = pa.table({
        "ops": ['["nn.Conv2d", "torch.relu"]', "['torch.matmul']", "torch.tanh, torch.sum"],
        "data_source": ["cuda-agent-ops-6k", "cuda-agent-ops-6k", None],
        "code": [KB_CONV, KB_MATMUL, "class Model: pass\n"],
    })
    path = tmp_path / "ops6k.parquet"
    pq.write_table(table, path)
    ts, skipped = import_ops6k(path, tmp_path / "out", "ops6k")
    assert sorted(ts.tasks) == ["ops6k_00000", "ops6k_00001"]
    assert ts.tasks["ops6k_00000"].operators == ["nn.Conv2d", "torch.relu"]
    assert ts.tasks["ops6k_00000"].level == 2
    assert ts.tasks["ops6k_00001"].operators == ["torch.matmul"]
    assert ts.tasks["ops6k_00001"].level == 1
    assert ts.tasks["ops6k_00001"].source == "ops-6k:cuda-agent-ops-6k"
    assert len(skipped) == 1 and "row 2" in skipped[0] and "lacks get_inputs" in skipped[0]
    validate(ts.path_of(ts.tasks["ops6k_00000"]))

    limited, _ = import_ops6k(path, tmp_path / "limited", limit=1)
    assert list(limited.tasks) == ["ops6k_00000"]


def test_ops6k_wrong_schema(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"ops": ["x"], "text": ["y"]}), path)
    with pytest.raises(TaskError, match="lacks column"):
        import_ops6k(path, tmp_path / "out")
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(TaskError, match="not a readable parquet"):
        import_ops6k(tmp_path / "junk.parquet", tmp_path / "out")


def test_ops_parsing_and_extraction():
    assert parse_ops(["a", "b"]) == ["a", "b"]
    assert parse_ops('["a", "b"]') == ["a", "b"]
    assert parse_ops("['a','b']") == ["a", "b"]
    assert parse_ops("a, b") == ["a", "b"]
    assert operators_of(KB_MATMUL) == ["torch.matmul"]
