"""Task format, index and loader: good tasks load and run, broken ones give one-line errors."""
import json

import pytest

from cuda_agent_corpus.loader import load_source, validate
from cuda_agent_corpus.task import Task, TaskError, TaskSet

GOOD = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.lin(x))


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return [8]
'''


def test_good_task_validates(tmp_path):
    p = tmp_path / "t.py"
    p.write_text(GOOD)
    v = validate(p)
    assert v.output_shapes == [[4, 8]]
    assert v.input_shapes == [[4, 8]]


@pytest.mark.parametrize("code, fragment", [
    ("def broken(:\n", "does not parse"),
    ("import no_such_module_xyz\n", "fails to import"),
    ("import torch\nclass Model(torch.nn.Module): pass\n", "lacks get_inputs, get_init_inputs"),
    (GOOD.replace("return [8]", "return [9]"), "forward fails"),
    (GOOD.replace("return [torch.randn(4, 8)]", "raise RuntimeError('boom')"), "get_inputs() fails"),
    (GOOD.replace("return torch.relu(self.lin(x))", "return 3"), "not a tensor"),
    (GOOD.replace("return torch.relu(self.lin(x))", "return x / 0 * 0"), "NaN or Inf"),
])
def test_broken_tasks_give_one_line_errors(tmp_path, code, fragment):
    p = tmp_path / "bad.py"
    p.write_text(code)
    with pytest.raises(TaskError) as err:
        validate(p)
    message = str(err.value)
    assert fragment in message
    assert "\n" not in message and str(p) in message


def test_missing_file_is_a_task_error(tmp_path):
    with pytest.raises(TaskError, match="cannot read"):
        validate(tmp_path / "absent.py")


def test_modules_are_not_cached():
    a = load_source(GOOD, "a")
    b = load_source(GOOD.replace("[4, 8]", "[2, 8]").replace("randn(4, 8)", "randn(2, 8)"), "b")
    assert a.get_inputs()[0].shape[0] == 4 and b.get_inputs()[0].shape[0] == 2


def test_index_round_trip_and_errors(tmp_path):
    ts = TaskSet(tmp_path / "s", "s")
    ts.add(Task(id="t1", level=1, operators=["torch.relu"], source="test", file="",
                sizes={"n": 8}), GOOD)
    ts.save()
    again = TaskSet.open(tmp_path / "s")
    assert again.tasks["t1"].to_json()["sizes"] == {"n": 8}
    assert again.path_of(again.tasks["t1"]).read_text() == GOOD
    with pytest.raises(TaskError, match="already in set"):
        again.add(Task(id="t1", level=1, operators=[], source="x", file=""), GOOD)
    with pytest.raises(TaskError, match="must be letters"):
        again.add(Task(id="../evil", level=1, operators=[], source="x", file=""), GOOD)
    (tmp_path / "s" / "index.json").write_text(json.dumps({"tasks": [{"id": "x"}]}))
    with pytest.raises(TaskError, match="lacks level, operators, source, file"):
        TaskSet.open(tmp_path / "s")
    with pytest.raises(TaskError, match="no index.json"):
        TaskSet.open(tmp_path / "nowhere")
