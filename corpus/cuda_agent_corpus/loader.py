"""Loading a task program and checking that it can be used before any rollout depends on it.

Every failure -- a syntax error, a missing `Model`, an exception in `get_inputs`, a forward that
raises or returns no tensor -- becomes a `TaskError` with one line naming the task and the
problem, never an exception escaping into the caller's loop.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import sys
import time
import traceback
import uuid
from pathlib import Path
from types import ModuleType
from typing import List, Optional, Sequence

from .task import TaskError

REQUIRED = ("Model", "get_inputs", "get_init_inputs")


def _last_frame(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (line {tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}".replace("\n", " ")


def load_source(code: str, name: str = "task") -> ModuleType:
    """Executes task text as a fresh module (never cached in sys.modules)."""
    module = ModuleType(f"cuda_agent_task_{uuid.uuid4().hex}")
    module.__file__ = name
    try:
        compiled = compile(code, name, "exec")
    except SyntaxError as e:
        raise TaskError(f"{name}: does not parse: {e.msg} at line {e.lineno}; "
                        "fix the program text") from e
    try:
        exec(compiled, module.__dict__)
    except Exception as e:  # the task's own import-time code failed
        raise TaskError(f"{name}: fails to import: {_last_frame(e)}") from e
    missing = [n for n in REQUIRED if not hasattr(module, n)]
    if missing:
        raise TaskError(f"{name}: lacks {', '.join(missing)}; a task defines class Model, "
                        "get_inputs() and get_init_inputs()")
    return module


def load_file(path) -> ModuleType:
    path = Path(path)
    try:
        code = path.read_text()
    except OSError as e:
        raise TaskError(f"{path}: cannot read ({e.strerror}); check the path") from e
    return load_source(code, str(path))


@dataclasses.dataclass
class Validation:
    output_shapes: List[List[int]]
    input_shapes: List[List[int]]
    forward_ms: float


def _tensors(value) -> list:
    import torch
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            out.extend(_tensors(v))
        return out
    return []


def instantiate(module: ModuleType, name: str, device: str = "cpu", seed: int = 0):
    """Builds (model, inputs) on `device` with a fixed seed; TaskError on any failure."""
    import torch
    torch.manual_seed(seed)
    try:
        init = module.get_init_inputs()
        if not isinstance(init, (list, tuple)):
            raise TypeError(f"get_init_inputs() returned {type(init).__name__}, not a list")
        model = module.Model(*init)
    except Exception as e:
        raise TaskError(f"{name}: Model(*get_init_inputs()) fails: {_last_frame(e)}") from e
    try:
        inputs = module.get_inputs()
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f"get_inputs() returned {type(inputs).__name__}, not a list")
    except Exception as e:
        raise TaskError(f"{name}: get_inputs() fails: {_last_frame(e)}") from e
    try:
        model = model.to(device).eval()
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
    except Exception as e:
        raise TaskError(f"{name}: cannot move the model or inputs to {device}: "
                        f"{_last_frame(e)}") from e
    return model, inputs


def run_forward(model, inputs: Sequence, name: str):
    import torch
    try:
        with torch.no_grad():
            out = model(*inputs)
    except Exception as e:
        raise TaskError(f"{name}: forward fails: {_last_frame(e)}") from e
    tensors = _tensors(out)
    if not tensors:
        raise TaskError(f"{name}: forward returned {type(out).__name__}, not a tensor; "
                        "a task's forward returns one or more tensors")
    return out, tensors


def validate(module_or_path, device: str = "cpu", seed: int = 0,
             name: Optional[str] = None) -> Validation:
    """Imports (if given a path), instantiates and runs the forward once; TaskError on failure."""
    import torch
    if isinstance(module_or_path, ModuleType):
        module, name = module_or_path, name or getattr(module_or_path, "__file__", "task")
    else:
        module, name = load_file(module_or_path), name or str(module_or_path)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise TaskError(f"{name}: device {device} requested but torch sees no GPU; use --device cpu")
    model, inputs = instantiate(module, name, device, seed)
    start = time.perf_counter()
    _, tensors = run_forward(model, inputs, name)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elapsed = (time.perf_counter() - start) * 1e3
    for t in tensors:
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise TaskError(f"{name}: forward produces NaN or Inf; change the sizes or operators")
    return Validation(output_shapes=[list(t.shape) for t in tensors],
                      input_shapes=[list(x.shape) for x in inputs if isinstance(x, torch.Tensor)],
                      forward_ms=elapsed)
