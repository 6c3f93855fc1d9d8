"""Importers: a KernelBench checkout (`level1` .. `level4` folders of task files) and the
CUDA-Agent-Ops-6K parquet file (columns `ops`, `data_source`, `code`), written into a set
directory with its index. Each imported program is loaded (parsed and imported, not run) so a
broken one is reported and skipped, never written.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from .loader import load_source
from .task import Task, TaskError, TaskSet, sanitize_id

Progress = Optional[Callable[[str], None]]


def operators_of(code: str) -> List[str]:
    """Torch operators a program uses, in order of first appearance: `nn.X` modules built and
    `torch.*` / `F.*` / tensor-method calls made inside the module's methods."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    found: List[str] = []

    def dotted(node) -> Optional[str]:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            parts.append(node.id)
            return ".".join(reversed(parts))
        return None

    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if not isinstance(node, ast.Call):
                continue
            name = dotted(node.func)
            if not name:
                continue
            head = name.split(".")[0]
            if head in ("torch", "nn", "F") and not name.startswith(("torch.nn.Module", "nn.Module")):
                if name.startswith("torch.nn.functional."):
                    name = "F." + name[len("torch.nn.functional."):]
                elif name.startswith("torch.nn."):
                    name = "nn." + name[len("torch.nn."):]
                if name not in ("super", "nn.Parameter", "torch.randn", "torch.zeros", "torch.ones"):
                    if name not in found:
                        found.append(name)
    return found


def sizes_of(code: str) -> Dict[str, object]:
    """Module-level constants assigned a number or a tuple of numbers (batch_size = 16, ...)."""
    sizes: Dict[str, object] = {}
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return sizes
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError):
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                sizes[node.targets[0].id] = value
            elif isinstance(value, tuple) and all(isinstance(v, (int, float)) for v in value):
                sizes[node.targets[0].id] = list(value)
    return sizes


def _level_dirs(root: Path) -> List[Tuple[int, Path]]:
    for base in (root, root / "KernelBench"):
        found = [(n, base / f"level{n}") for n in range(1, 5) if (base / f"level{n}").is_dir()]
        if found:
            return found
    raise TaskError(f"{root}: no level1..level4 folders (looked in {root} and {root}/KernelBench); "
                    "pass the root of a KernelBench checkout")


def _task_number(stem: str) -> Tuple[int, str]:
    m = re.match(r"^(\d+)_", stem)
    return (int(m.group(1)) if m else 1 << 30, stem)


def import_kernelbench(root, out_dir, set_name: Optional[str] = None, replace: bool = True,
                       progress: Progress = None) -> Tuple[TaskSet, List[str]]:
    """Imports every `levelN/*.py`; returns the set and one line per skipped file."""
    root = Path(root)
    ts = TaskSet.open_or_create(out_dir)
    if set_name:
        ts.name = set_name
    skipped: List[str] = []
    for level, folder in _level_dirs(root):
        files = sorted(folder.glob("*.py"), key=lambda p: _task_number(p.stem))
        for path in files:
            code = path.read_text()
            try:
                load_source(code, str(path))
            except TaskError as e:
                skipped.append(str(e))
                continue
            task_id = f"kb_l{level}_{sanitize_id(path.stem)}"
            task = Task(id=task_id, name=path.stem, level=level, operators=operators_of(code),
                        source="kernelbench", file=f"{task_id}.py", sizes=sizes_of(code))
            ts.add(task, code, replace=replace)
            if progress:
                progress(f"imported {task_id}")
    ts.save()
    return ts, skipped


def parse_ops(value) -> List[str]:
    """The `ops` column holds a list, or its JSON or Python-literal text, or comma-separated names."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    if hasattr(value, "tolist"):
        return [str(v) for v in value.tolist()]
    text = str(value).strip()
    if text.startswith("["):
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(text)
                if isinstance(parsed, (list, tuple)):
                    return [str(v) for v in parsed]
            except (ValueError, SyntaxError):
                pass
    return [part.strip().strip("'\"") for part in text.strip("[]").split(",") if part.strip()]


def import_ops6k(parquet_path, out_dir, set_name: Optional[str] = None, limit: Optional[int] = None,
                 replace: bool = True, progress: Progress = None) -> Tuple[TaskSet, List[str]]:
    """Imports the rows of an Ops-6K parquet file; returns the set and one line per skipped row."""
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise TaskError("pyarrow is not installed in the harness python; "
                        "pip install -r tools/requirements.txt") from e
    parquet_path = Path(parquet_path)
    if not parquet_path.is_file():
        raise TaskError(f"{parquet_path}: no such file; pass the Ops-6K .parquet file")
    try:
        table = pq.read_table(parquet_path)
    except Exception as e:
        raise TaskError(f"{parquet_path}: not a readable parquet file ({e})") from e
    missing = [c for c in ("ops", "data_source", "code") if c not in table.column_names]
    if missing:
        raise TaskError(f"{parquet_path}: lacks column(s) {', '.join(missing)}; Ops-6K rows have "
                        f"ops, data_source and code (found: {', '.join(table.column_names)})")
    ops_col = table.column("ops").to_pylist()
    src_col = table.column("data_source").to_pylist()
    code_col = table.column("code").to_pylist()
    ts = TaskSet.open_or_create(out_dir)
    if set_name:
        ts.name = set_name
    skipped: List[str] = []
    rows = len(code_col) if limit is None else min(limit, len(code_col))
    for row in range(rows):
        code = code_col[row]
        name = f"{parquet_path.name} row {row}"
        if not isinstance(code, str) or not code.strip():
            skipped.append(f"{name}: empty code")
            continue
        try:
            load_source(code, name)
        except TaskError as e:
            skipped.append(str(e))
            continue
        ops = parse_ops(ops_col[row]) or operators_of(code)
        task_id = f"ops6k_{row:05d}"
        task = Task(id=task_id, name=sanitize_id("_".join(ops))[:80] or task_id,
                    level=1 if len(ops) <= 1 else 2, operators=ops,
                    source=f"ops-6k:{src_col[row]}" if src_col[row] else "ops-6k",
                    file=f"{task_id}.py", sizes=sizes_of(code))
        ts.add(task, code, replace=replace)
        if progress and row % 100 == 0:
            progress(f"imported {row + 1}/{rows}")
    ts.save()
    return ts, skipped
