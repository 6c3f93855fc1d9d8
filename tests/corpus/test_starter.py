"""The shipped starter sets and their demonstrations: every task loads, smoke tasks run on CPU,
every demonstration is well formed and references real files."""
import json
import re
from pathlib import Path

import pytest

from cuda_agent_corpus.loader import load_file, validate
from cuda_agent_corpus.task import TaskSet

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
TOOLS = {"Bash", "Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "BashOutput", "KillBash"}
SETS = {"smoke": "cpu", "bench": "cuda"}


@pytest.mark.parametrize("name", SETS)
def test_set_index_and_categories(name):
    ts = TaskSet.open(CORPUS / "tasks" / name)
    assert len(ts.tasks) >= 20
    index = json.loads((CORPUS / "tasks" / name / "index.json").read_text())
    cats = {entry["category"] for entry in index["tasks"]}
    assert cats == {"single", "fused", "block"}
    for task in ts.tasks.values():
        load_file(ts.path_of(task))  # bench tasks are H200-sized: import only


def test_smoke_tasks_run_on_cpu():
    # Their speed is a number, not an assertion: `cuda-agent corpus validate corpus/tasks/smoke`
    # prints each forward's time (a few ms on 2 cores).
    ts = TaskSet.open(CORPUS / "tasks" / "smoke")
    for task in ts.tasks.values():
        v = validate(ts.path_of(task))
        assert v.output_shapes, task.id
        assert v.forward_ms > 0, task.id


@pytest.mark.parametrize("name, device", SETS.items())
def test_demonstrations_are_well_formed(name, device):
    ts = TaskSet.open(CORPUS / "tasks" / name)
    for task in ts.tasks.values():
        folder = CORPUS / "demos" / name / task.id
        demo = json.loads((folder / "demo.json").read_text())
        assert demo["task_id"] == task.id and demo["device"] == device
        assert demo["final"]
        tools = [s["tool"] for s in demo["steps"]]
        assert set(tools) <= TOOLS
        commands = [s["arguments"]["command"] for s in demo["steps"] if s["tool"] == "Bash"]
        assert commands == ["build", "verify", "profile"]
        written = set()
        for step in demo["steps"]:
            for value in step["arguments"].values():
                if isinstance(value, dict):
                    assert (folder / value["$file"]).is_file(), value
            if step["tool"] == "Write":
                written.add(step["arguments"]["file_path"])
        assert "model_new.py" in written
        kernels = {p.relative_to(folder).as_posix() for p in (folder / "kernels").iterdir()}
        assert kernels <= written
        suffix = ".cpp" if device == "cpu" else ".cu"
        assert any(k.endswith(suffix) and not k.endswith("_binding.cpp") for k in kernels)
        model_new = (folder / "model_new.py").read_text()
        assert "import cuda_extension" in model_new and "class ModelNew" in model_new
        # forward only calls the extension: no torch compute spelled in it
        forward = model_new.split("def forward")[1]
        assert not re.search(r"\b(torch|F)\.\w+\(", forward), task.id
        for binding in (folder / "kernels").glob("*_binding.cpp"):
            text = binding.read_text()
            assert "REGISTER_BINDING(" in text
            calls = set(re.findall(r"torch::(\w+)\(", text))
            assert calls <= {"empty", "empty_like"}, (binding, calls)
