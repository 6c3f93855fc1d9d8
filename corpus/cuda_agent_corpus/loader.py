"""Loading a task program and checking that it can be used before any rollout depends on it.

Every failure -- a syntax error, a missing `Model`, an exception in `get_inputs`, a forward that
raises or returns no tensor -- becomes a `TaskError` with one line naming the task and the
problem, never an exception escaping into the caller's loop. The error is a `TaskLoadError`
whose `cause` names the stage that failed (CAUSES), so that many failures can be counted.

`validate_task` is the same check as a plain-dict function that `workers.WorkerPool` runs.
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

# Why a task failed, in the order the stages run; `corpus validate` counts failures by these.
# timeout and crash come from the worker pool (the task hung, or took its process down).
CAUSES = ("read", "parse", "import", "missing_symbols", "init", "inputs", "device",
          "out_of_memory", "forward", "no_tensor", "non_finite", "timeout", "crash", "error")


# What a task's own code may raise and still be a failure of that task: SystemExit too (a
# task calling sys.exit() must not end the process validating it).
TASK_FAILURES = (Exception, SystemExit)


class TaskLoadError(TaskError):
    """A TaskError that names the stage that failed (one of CAUSES)."""

    def __init__(self, message: str, cause: str):
        super().__init__(message)
        self.cause = cause


def _is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(exc, torch.OutOfMemoryError):
        return True
    return "can't allocate memory" in str(exc)  # the CPU allocator's RuntimeError


def _failure(name: str, what: str, exc: BaseException, cause: str) -> TaskLoadError:
    """`name: what fails: Type: message (line N)`, as an out_of_memory failure where it is one."""
    return TaskLoadError(f"{name}: {what} fails: {_last_frame(exc)}",
                         "out_of_memory" if _is_out_of_memory(exc) else cause)


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
        raise TaskLoadError(f"{name}: does not parse: {e.msg} at line {e.lineno}; "
                            "fix the program text", "parse") from e
    try:
        exec(compiled, module.__dict__)
    except TASK_FAILURES as e:  # the task's own import-time code failed
        raise TaskLoadError(f"{name}: fails to import: {_last_frame(e)}", "import") from e
    missing = [n for n in REQUIRED if not hasattr(module, n)]
    if missing:
        raise TaskLoadError(f"{name}: lacks {', '.join(missing)}; a task defines class Model, "
                            "get_inputs() and get_init_inputs()", "missing_symbols")
    return module


def load_file(path) -> ModuleType:
    path = Path(path)
    try:
        code = path.read_text()
    except OSError as e:
        raise TaskLoadError(f"{path}: cannot read ({e.strerror}); check the path", "read") from e
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


def _drawn(device: Optional[str], make):
    """make() with tensors created on `device` by default (None: where make puts them)."""
    import torch
    if device is None:
        return make()
    with torch.device(device):
        return make()


def instantiate(module: ModuleType, name: str, device: str = "cpu", seed: int = 0,
                draw_on_device: bool = False):
    """Builds (model, inputs) on `device` with a fixed seed; TaskError on any failure.

    draw_on_device: construct the model and draw the inputs with `device` as torch's default
    device, instead of on the CPU and then moved. On a GPU this is far faster for KernelBench's
    large torch.rand inputs and Linear weights (the values differ from CPU-drawn ones, which
    validation does not need). A stage that fails that way is retried on the CPU, so a task
    that only works CPU-first is not reported broken."""
    import torch
    target = device if draw_on_device and device != "cpu" else None

    def attempt(what: str, cause: str, make):
        try:
            return _drawn(target, make)
        except TASK_FAILURES as e:
            if target is None or _is_out_of_memory(e):
                raise _failure(name, what, e, cause) from e
        try:
            return make()
        except TASK_FAILURES as e:
            raise _failure(name, what, e, cause) from e

    def make_model():
        init = module.get_init_inputs()
        if not isinstance(init, (list, tuple)):
            raise TypeError(f"get_init_inputs() returned {type(init).__name__}, not a list")
        return module.Model(*init)

    def make_inputs():
        inputs = module.get_inputs()
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f"get_inputs() returned {type(inputs).__name__}, not a list")
        return inputs

    torch.manual_seed(seed)  # seeds the CPU and every GPU generator
    model = attempt("Model(*get_init_inputs())", "init", make_model)
    inputs = attempt("get_inputs()", "inputs", make_inputs)
    try:
        model = model.to(device).eval()
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
    except Exception as e:
        raise _failure(name, f"moving the model or inputs to {device}", e, "device") from e
    return model, inputs


def run_forward(model, inputs: Sequence, name: str, device: str = "cpu"):
    """One forward without gradients, synchronized on a GPU so that its errors surface here."""
    import torch
    try:
        with torch.no_grad():
            out = model(*inputs)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    except TASK_FAILURES as e:
        raise _failure(name, "forward", e, "forward") from e
    tensors = _tensors(out)
    if not tensors:
        raise TaskLoadError(f"{name}: forward returned {type(out).__name__}, not a tensor; "
                            "a task's forward returns one or more tensors", "no_tensor")
    return out, tensors


def validate(module_or_path, device: str = "cpu", seed: int = 0,
             name: Optional[str] = None, draw_on_device: bool = False) -> Validation:
    """Imports (if given a path), instantiates and runs the forward once; TaskError on failure."""
    import torch
    if isinstance(module_or_path, ModuleType):
        module, name = module_or_path, name or getattr(module_or_path, "__file__", "task")
    else:
        module, name = load_file(module_or_path), name or str(module_or_path)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise TaskError(f"{name}: device {device} requested but torch sees no GPU; use --device cpu")
    model, inputs = instantiate(module, name, device, seed, draw_on_device)
    start = time.perf_counter()
    _, tensors = run_forward(model, inputs, name, device)
    elapsed = (time.perf_counter() - start) * 1e3
    for t in tensors:
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise TaskLoadError(f"{name}: forward produces NaN or Inf; change the sizes or "
                                "operators", "non_finite")
    return Validation(output_shapes=[list(t.shape) for t in tensors],
                      input_shapes=[list(x.shape) for x in inputs if isinstance(x, torch.Tensor)],
                      forward_ms=elapsed)


def validate_task(payload: dict) -> dict:
    """validate() as a plain-dict function for a worker process. payload: {"path", "device",
    "seed", "draw_on_device"}; errors name the path. Returns {"ok", "cause" (None when ok), "error",
    "output_shapes", "input_shapes", "forward_ms"}."""
    module = None
    try:
        module = load_file(payload["path"])
        v = validate(module, device=payload.get("device", "cpu"), seed=payload.get("seed", 0),
                     name=str(payload["path"]), draw_on_device=payload.get("draw_on_device", False))
    except TaskError as e:
        return {"ok": False, "cause": getattr(e, "cause", "error"), "error": str(e)}
    finally:
        # A module's functions and its globals form a cycle that only the garbage collector
        # frees; clearing it now frees what the task keeps at module level (GPU memory too)
        # before the next task in this worker needs it.
        if module is not None:
            module.__dict__.clear()
    return {"ok": True, "cause": None, "error": "", "output_shapes": v.output_shapes,
            "input_shapes": v.input_shapes, "forward_ms": round(v.forward_ms, 3)}
