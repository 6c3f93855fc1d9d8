"""The four acceptance filters of a synthesized task, as one function a worker process runs.

1. execution: the task runs in eager mode and under torch.compile, and both agree;
2. determinism: two runs on the same inputs give bitwise-equal outputs;
3. non-constant output: two different input draws give different outputs, and the output is
   not the same value everywhere;
4. runtime: the median eager forward time lies in [runtime_min_ms, runtime_max_ms].

`filter_task` takes and returns plain dicts so it can be sent to any worker process (a local
process pool today, a GPU pool slot later).
"""
from __future__ import annotations

import dataclasses
import time
from typing import Optional

from .loader import instantiate, load_source, run_forward, _tensors
from .task import TaskError

# Stages in the order they run; a rejection names the first one that failed.
STAGES = ("import", "eager", "compile", "deterministic", "nonconstant", "runtime")


@dataclasses.dataclass
class FilterConfig:
    device: str = "cpu"
    compile: bool = True             # run the torch.compile check at all
    compile_backend: str = "inductor"
    compile_mode: Optional[str] = None
    runtime_min_ms: float = 1.0
    runtime_max_ms: float = 100.0
    timing_runs: int = 5
    tolerance: float = 1e-2          # eager vs compile agreement, as the harness's atol/rtol
    seed: int = 0
    cpu_threads: int = 1             # torch intra-op threads on cpu (0: leave torch's default)

    @staticmethod
    def from_dict(d: dict) -> "FilterConfig":
        fields = {f.name for f in dataclasses.fields(FilterConfig)}
        return FilterConfig(**{k: v for k, v in d.items() if k in fields})


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch
        torch.cuda.synchronize()


def _outputs_equal(a, b) -> bool:
    import torch
    ta, tb = _tensors(a), _tensors(b)
    return len(ta) == len(tb) and all(x.shape == y.shape and torch.equal(x, y)
                                      for x, y in zip(ta, tb))


def _outputs_close(a, b, tol: float) -> bool:
    import torch
    ta, tb = _tensors(a), _tensors(b)
    return len(ta) == len(tb) and all(
        x.shape == y.shape and torch.allclose(x.float(), y.float(), atol=tol, rtol=tol)
        for x, y in zip(ta, tb))


def _median_ms(model, inputs, device: str, runs: int) -> float:
    import torch
    times = []
    with torch.no_grad():
        for _ in range(runs):
            _sync(device)
            start = time.perf_counter()
            model(*inputs)
            _sync(device)
            times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return times[len(times) // 2]


def _reject(stage: str, reason: str, **extra) -> dict:
    return {"accepted": False, "stage": stage, "reason": reason.replace("\n", " ")[:400], **extra}


def filter_task(payload: dict) -> dict:
    """payload: {"id", "code", "config": FilterConfig fields}. Returns {"id", "accepted",
    "stage" (the failed stage, or "accepted"), "reason", "eager_ms", "seconds"}."""
    started = time.perf_counter()
    result = _filter(payload)
    result["id"] = payload.get("id", "")
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def _filter(payload: dict) -> dict:
    import torch
    cfg = FilterConfig.from_dict(payload.get("config", {}))
    name = payload.get("id", "task")
    device = cfg.device
    if device == "cpu" and cfg.cpu_threads > 0:
        # One intra-op thread per filter process: workers share the cores, and timings taken
        # while torch.compile's helper processes are alive are otherwise dominated by contention.
        torch.set_num_threads(cfg.cpu_threads)
    try:
        module = load_source(payload["code"], name)
    except TaskError as e:
        return _reject("import", str(e))
    try:
        model, inputs = instantiate(module, name, device, cfg.seed)
        out, tensors = run_forward(model, inputs, name)
        _sync(device)
    except TaskError as e:
        return _reject("eager", str(e))
    except Exception as e:  # out of memory and the like
        return _reject("eager", f"{type(e).__name__}: {e}")
    if not all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point()):
        return _reject("eager", "output holds NaN or Inf")

    if cfg.compile:
        try:
            torch._dynamo.reset()
            compiled = torch.compile(model, backend=cfg.compile_backend, mode=cfg.compile_mode)
            with torch.no_grad():
                compiled_out = compiled(*inputs)
            _sync(device)
        except Exception as e:
            return _reject("compile", f"torch.compile fails: {type(e).__name__}: {e}")
        if not _outputs_close(out, compiled_out, cfg.tolerance):
            return _reject("compile", "compiled output differs from eager beyond tolerance")

    # Determinism: a fresh model from the same seed on the same inputs.
    try:
        model2, inputs2 = instantiate(module, name, device, cfg.seed)
        out2, _ = run_forward(model2, inputs2, name)
        out3, _ = run_forward(model2, inputs2, name)
        _sync(device)
    except TaskError as e:
        return _reject("deterministic", str(e))
    if not _outputs_equal(out, out2) or not _outputs_equal(out2, out3):
        return _reject("deterministic", "two runs on the same inputs differ")

    # Non-constant: another input draw must change the output, and the output must vary.
    torch.manual_seed(cfg.seed + 7919)
    other = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    out_other, _ = run_forward(model, other, name)
    if _outputs_close(out, out_other, 1e-6):
        return _reject("nonconstant", "output does not depend on the inputs")
    if all(t.numel() <= 1 or bool((t == t.flatten()[0]).all()) for t in tensors):
        return _reject("nonconstant", "output is the same value everywhere")

    eager_ms = _median_ms(model, inputs, device, max(1, cfg.timing_runs))
    if not (cfg.runtime_min_ms <= eager_ms <= cfg.runtime_max_ms):
        return _reject("runtime", f"eager forward takes {eager_ms:.3f} ms, outside "
                       f"[{cfg.runtime_min_ms}, {cfg.runtime_max_ms}] ms", eager_ms=eager_ms)
    return {"accepted": True, "stage": "accepted", "reason": "", "eager_ms": eager_ms}
