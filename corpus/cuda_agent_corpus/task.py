"""Tasks on disk: one Python file per task in the KernelBench format (`Model`, `get_inputs`,
`get_init_inputs`) and one index per set (`index.json`) holding each task's metadata.

A set directory looks like::

    tasks/<set>/index.json         {"set": "<set>", "tasks": [<entry>, ...]}
    tasks/<set>/<task_id>.py       the program text

An entry is ``{"id", "name", "level", "operators", "source", "sizes", "file"}``; ``file`` is
relative to the set directory.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Dict, List, Optional

INDEX_NAME = "index.json"
_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class TaskError(Exception):
    """A task that cannot be used: one line naming the task, the problem and the fix."""


@dataclasses.dataclass
class Task:
    id: str
    level: int
    operators: List[str]
    source: str
    file: str
    name: str = ""
    sizes: Dict[str, object] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "name": self.name or self.id,
            "level": self.level,
            "operators": list(self.operators),
            "source": self.source,
            "sizes": dict(self.sizes),
            "file": self.file,
        }

    @staticmethod
    def from_json(entry: dict, where: str) -> "Task":
        missing = [k for k in ("id", "level", "operators", "source", "file") if k not in entry]
        if missing:
            raise TaskError(f"{where}: index entry lacks {', '.join(missing)}; "
                            "each entry needs id, level, operators, source and file")
        if not isinstance(entry["operators"], list):
            raise TaskError(f"{where}: 'operators' of task {entry['id']!r} must be a list of names")
        return Task(id=str(entry["id"]), level=int(entry["level"]),
                    operators=[str(o) for o in entry["operators"]], source=str(entry["source"]),
                    file=str(entry["file"]), name=str(entry.get("name", "")),
                    sizes=dict(entry.get("sizes", {})))


def check_id(task_id: str) -> str:
    if not _ID_PATTERN.match(task_id):
        raise TaskError(f"task id {task_id!r} must be letters, digits, '_', '-' or '.', "
                        "starting with a letter or digit")
    return task_id


def sanitize_id(text: str) -> str:
    """A usable task id from free text (a KernelBench file name, an Ops-6K operator list)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.-")
    return cleaned or "task"


class TaskSet:
    """One set directory and its index. Writes are atomic (temporary file then rename)."""

    def __init__(self, directory: os.PathLike, name: Optional[str] = None):
        self.dir = Path(directory)
        self.name = name or self.dir.name
        self.tasks: Dict[str, Task] = {}

    @staticmethod
    def open(directory: os.PathLike) -> "TaskSet":
        directory = Path(directory)
        index = directory / INDEX_NAME
        if not index.is_file():
            raise TaskError(f"{directory}: no {INDEX_NAME}; a set directory needs one "
                            "(`cuda-agent corpus import` or `synth` writes it)")
        try:
            doc = json.loads(index.read_text())
        except json.JSONDecodeError as e:
            raise TaskError(f"{index}: not valid JSON ({e}); fix or regenerate the index") from e
        if not isinstance(doc, dict) or not isinstance(doc.get("tasks"), list):
            raise TaskError(f"{index}: must be an object with a 'tasks' list")
        ts = TaskSet(directory, doc.get("set") or directory.name)
        for i, entry in enumerate(doc["tasks"]):
            task = Task.from_json(entry, f"{index} entry {i}")
            if task.id in ts.tasks:
                raise TaskError(f"{index}: task id {task.id!r} appears twice; ids must be unique")
            ts.tasks[task.id] = task
        return ts

    @staticmethod
    def open_or_create(directory: os.PathLike) -> "TaskSet":
        directory = Path(directory)
        if (directory / INDEX_NAME).is_file():
            return TaskSet.open(directory)
        return TaskSet(directory)

    def path_of(self, task: Task) -> Path:
        return self.dir / task.file

    def add(self, task: Task, code: str, replace: bool = False) -> Path:
        check_id(task.id)
        if task.id in self.tasks and not replace:
            raise TaskError(f"task id {task.id!r} already in set {self.name!r}; "
                            "choose another id or pass --replace")
        self.dir.mkdir(parents=True, exist_ok=True)
        task.file = task.file or f"{task.id}.py"
        path = self.dir / task.file
        _atomic_write(path, code)
        self.tasks[task.id] = task
        return path

    def save(self) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        doc = {"set": self.name, "tasks": [t.to_json() for t in self.tasks.values()]}
        path = self.dir / INDEX_NAME
        _atomic_write(path, json.dumps(doc, indent=1) + "\n")
        return path


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
