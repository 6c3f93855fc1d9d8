"""Anti-hacking checks that run inside the candidate's child process.

The child imports the candidate; these guards watch it. Each trick caught is recorded under a fixed
violation name (VIOLATIONS) with a one-line detail. The verdict on correctness is never taken here:
the trusted worker compares the outputs, so a candidate that defeats a guard still has to produce
the right numbers by itself.
"""
import gc
import os
import signal
import sys
import threading
import time

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# Every name the harness can put in `violations`, with what it means.
VIOLATIONS = {
    "torch_compute_in_forward": "a PyTorch operator computed inside ModelNew.forward",
    "torch_compute_in_binding": "a PyTorch (ATen) operator computed inside the extension's bindings",
    "host_fallback": "tensor data moved to Python/NumPy inside forward (numpy, tolist, item)",
    "library_fallback": "another compute library (NumPy, SciPy, Triton, Numba, CuPy, JAX, ctypes) used by the candidate",
    "torch_compile_fallback": "torch.compile / TorchDynamo / Inductor used by the candidate",
    "kernel_not_called": "forward never called a function of the built extension",
    "output_not_from_kernel": "the output was not produced by (returned from or passed to) an extension call",
    "model_new_is_reference": "ModelNew is, subclasses or wraps the reference Model",
    "loads_reference": "the candidate imported or read the reference task file",
    "output_memory_reuse": "the output holds memory the kernel never wrote (poisoned allocation read back)",
    "output_aliases_input": "the output shares memory with an input",
    "output_buffer_reused": "two calls returned the same output memory (results overwritten across calls)",
    "input_mutation": "forward changed its inputs",
    "cached_result": "forward returned a stale result for new values in the same input buffers",
    "lazy_or_subclassed_output": "the output is not a plain dense torch.Tensor on the task's device",
    "side_stream": "work left running on another CUDA stream when forward returned",
    "background_thread": "work left running on another thread when forward returned",
    "monkeypatch": "the candidate replaced a function of torch, time, the comparison functions or the harness",
    "process_hook": "the candidate left a hook in its process that runs its code inside the harness's own calls "
                    "(a torch function or dispatch mode, a trace, profile or monitoring function, a gc "
                    "callback, a signal handler, a Python thread, a kernel registered over an ATen operator)",
    "write_outside_sandbox": "the candidate wrote a file outside its solution directory",
    "spawns_process": "the candidate started a process or opened a network connection",
}

# ATen operators ModelNew.forward and the bindings may use: allocation, views and metadata.
ALLOCATION_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
}
ZEROING_OPS = {"zeros", "zeros_like", "new_zeros", "zero_"}
VIEW_OPS = {
    "view", "_unsafe_view", "_reshape_alias", "as_strided", "t", "transpose", "permute", "expand",
    "squeeze", "unsqueeze", "select", "slice", "narrow", "detach", "alias", "split",
    "split_with_sizes", "unbind", "diagonal", "view_as_real", "view_as_complex", "unfold",
    "lift_fresh", "resolve_conj", "resolve_neg",
}
METADATA_OPS = {
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride", "dim",
    "is_contiguous", "numel", "storage_offset", "is_same_size", "is_complex", "is_floating_point",
    "is_nonzero", "_has_compatible_shallow_copy_type",
}
ALLOWED_OPS = ALLOCATION_OPS | ZEROING_OPS | VIEW_OPS | METADATA_OPS

# Tensor methods that hand data to the Python side (a route around the dispatcher).
HOST_EXPORT_METHODS = {"numpy", "tolist", "item", "__array__", "__array_wrap__"}

# Modules whose fresh import by the candidate means computing with something other than its kernels.
FORBIDDEN_MODULE_PREFIXES = {
    "torch._inductor.compile_fx": "torch_compile_fallback",
    "torch._inductor.graph": "torch_compile_fallback",
    "numba": "library_fallback",
    "cupy": "library_fallback",
    "jax": "library_fallback",
    "scipy": "library_fallback",
    "tensorflow": "library_fallback",
}


class ViolationRaised(BaseException):
    """Aborts the candidate's forward; BaseException so `except Exception` cannot swallow it."""


class Violations:
    def __init__(self):
        self.found = {}  # name -> first detail

    def add(self, name, detail):
        assert name in VIOLATIONS, name
        self.found.setdefault(name, detail)

    def names(self):
        return sorted(self.found)

    def details(self):
        return "; ".join(f"{k}: {v}" for k, v in sorted(self.found.items()))


def poison_(t):
    """Fills fresh memory with a value a kernel that writes its output will overwrite."""
    with torch.no_grad():
        if t.dtype.is_floating_point or t.dtype.is_complex:
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.fill_(True)
        else:
            t.fill_(torch.iinfo(t.dtype).max if t.dtype != torch.uint8 else 255)


class ForwardDispatchGuard(TorchDispatchMode):
    """Sees every ATen operator of the forward, by any route (torch.*, F.*, Tensor methods,
    torch.ops.aten, aliases bound earlier, nn submodules, at:: calls from C++ bindings): allows
    allocation, views and metadata, poisons fresh allocations, records the rest."""

    def __init__(self, violations, extension_depth):
        super().__init__()
        self.violations = violations
        self.extension_depth = extension_depth  # list[int]: >0 while inside an extension call
        self.allocated = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        base = name.rstrip("_") if name.endswith("_") and name != "zero_" else name
        if name not in ALLOWED_OPS and base not in VIEW_OPS:
            where = "torch_compute_in_binding" if self.extension_depth[0] > 0 else "torch_compute_in_forward"
            self.violations.add(where, f"aten::{name} called")
            raise ViolationRaised(f"aten::{name} is not allowed in ModelNew.forward")
        out = func(*args, **kwargs)
        if name in ALLOCATION_OPS and isinstance(out, torch.Tensor):
            poison_(out)
            self.allocated.append(out)
        return out


class ForwardFunctionGuard(TorchFunctionMode):
    """Catches Tensor methods that move data to Python, which never reach the dispatcher."""

    def __init__(self, violations):
        super().__init__()
        self.violations = violations

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_EXPORT_METHODS:
            self.violations.add("host_fallback", f"Tensor.{name} called in forward")
            raise ViolationRaised(f"Tensor.{name} is not allowed in ModelNew.forward")
        return func(*args, **(kwargs or {}))


def _identity_table():
    """The objects the harness relies on, by dotted name: timers, synchronisation, comparison,
    serialisation, every torch / torch.nn.functional / Tensor attribute and nn.Module's calling."""
    import time as time_module
    import torch.nn.functional as F
    table = {}
    for prefix, owner in (("torch", torch), ("torch.nn.functional", F), ("time", time_module),
                          ("torch.Tensor", torch.Tensor), ("torch._C.TensorBase", torch._C.TensorBase),
                          ("torch.nn.Module", torch.nn.Module), ("torch.testing", torch.testing),
                          ("torch.ops.aten", None)):
        if owner is None:
            continue
        for name, value in list(vars(owner).items()):
            if name.startswith("__") and name not in ("__call__", "__eq__", "__torch_function__",
                                                        "__torch_dispatch__", "__getattribute__"):
                continue
            if isinstance(value, type(sys)):  # submodules load lazily
                continue
            table[f"{prefix}.{name}"] = value
    for name in ("synchronize", "Event", "current_stream", "Stream", "default_stream", "_sleep"):
        table[f"torch.cuda.{name}"] = getattr(torch.cuda, name)
    for name in ("record", "elapsed_time", "synchronize", "query"):
        table[f"torch.cuda.Event.{name}"] = getattr(torch.cuda.Event, name)
    import builtins
    for name in ("open", "__import__", "print", "isinstance", "type", "id", "len"):
        table[f"builtins.{name}"] = getattr(builtins, name)
    return table


class IdentitySnapshot:
    def __init__(self):
        self.table = _identity_table()
        self.watched = {}  # prefix -> (module, {name: function}) beyond the fixed table

    def watch(self, prefix, module):
        """Also watch the module's functions (the harness's own, which a candidate could replace)."""
        self.watched[prefix] = (module, {k: v for k, v in vars(module).items() if callable(v)})

    def changed(self):
        now = _identity_table()
        found = [k for k, v in self.table.items() if k in now and now[k] is not v]
        for prefix, (module, functions) in self.watched.items():
            found += [f"{prefix}.{k}" for k, v in functions.items() if vars(module).get(k) is not v]
        return sorted(found)


class AuditGuard:
    """A CPython audit hook (cannot be removed once added) that records file writes outside the
    allowed directories, reads of the reference, process starts, sockets and dlopen."""

    WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def __init__(self, violations, allowed_write_dirs, reference_path):
        self.violations = violations
        self.allowed = [os.path.realpath(d) for d in allowed_write_dirs]
        self.reference = os.path.realpath(reference_path) if reference_path else None
        self.armed = False
        self.harness_io = 0
        sys.addaudithook(self._hook)

    def _hook(self, event, args):
        if not self.armed or self.harness_io:
            return
        if event == "open":
            path, mode, flags = args
            if not isinstance(path, (str, bytes)) or isinstance(path, int):
                return
            path = os.fsdecode(path)
            real = os.path.realpath(path)
            if self.reference and real == self.reference:
                self.violations.add("loads_reference", f"opened {path}")
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                      (isinstance(flags, int) and flags & self.WRITE_FLAGS)
            if writing and not any(real == d or real.startswith(d + os.sep) for d in self.allowed):
                self.violations.add("write_outside_sandbox", f"opened {path} for writing")
        elif event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork",
                       "os.forkpty", "os.spawn", "pty.spawn"):
            self.violations.add("spawns_process", f"{event} {str(args)[:120]}")
        elif event in ("socket.connect", "socket.bind"):
            self.violations.add("spawns_process", f"{event} {str(args)[:120]}")
        elif event == "ctypes.dlopen":
            self.violations.add("library_fallback", f"ctypes.dlopen {str(args)[:120]}")


def os_thread_ids():
    try:
        return set(int(t) for t in os.listdir("/proc/self/task"))
    except OSError:
        return set()


def thread_cpu_ticks(tid):
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return 0


def new_forbidden_modules(before):
    found = []
    for name in set(sys.modules) - before:
        for prefix, violation in FORBIDDEN_MODULE_PREFIXES.items():
            if name == prefix or name.startswith(prefix + "."):
                found.append((violation, name))
    return found


class HookSnapshot:
    """The places a candidate could leave code that runs inside the harness's own calls in its
    process, between drawing an input set and starting the clock (get_inputs, clone, fill_, the
    timer) rather than inside the forward it is judged by: there it could compute each timed set's
    result before the clock starts. Torch function and dispatch modes left on the stack, trace and
    profile functions, sys.monitoring tools, gc callbacks, signal handlers, Python threads still
    alive, and every ATen operator's dispatch table (a kernel registered over aten::clone from
    Python or from the extension's C++ changes it)."""

    def __init__(self):
        self.gc_callbacks = list(gc.callbacks)
        self.threads = set(threading.enumerate())
        self.signals = self._signals()
        self.tables = self._tables()

    @staticmethod
    def _signals():
        handlers = {}
        for number in signal.valid_signals():
            try:
                handlers[number] = signal.getsignal(number)
            except (OSError, ValueError):
                continue
        return handlers

    @staticmethod
    def _monitoring_tools():
        monitoring = getattr(sys, "monitoring", None)  # Python 3.12 on
        if monitoring is None:
            return []
        return [monitoring.get_tool(i) for i in range(6) if monitoring.get_tool(i) is not None]

    @staticmethod
    def _tables():
        return {name: torch._C._dispatch_dump_table(name)
                for name in torch._C._dispatch_get_all_op_names() if name.startswith("aten::")}

    def found(self, tables=True):
        """What is there now that was not at the snapshot; `tables=False` skips the dispatch
        tables (a tenth of a second) and looks at the rest only."""
        found = []
        if torch._C._len_torch_function_stack() > 0:
            found.append("a torch function mode left on the stack")
        if torch._C._len_torch_dispatch_stack() > 0:
            found.append("a torch dispatch mode left on the stack")
        if sys.gettrace() is not None or threading.gettrace() is not None:
            found.append("a trace function")
        if sys.getprofile() is not None or threading.getprofile() is not None:
            found.append("a profile function")
        if [c for c in gc.callbacks if c not in self.gc_callbacks]:
            found.append("a gc callback")
        if self._monitoring_tools():
            found.append(f"a sys.monitoring tool ({self._monitoring_tools()[0]})")
        alive = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()]
        if alive:
            found.append(f"a Python thread ({alive[0].name})")
        changed = [n for n, h in self._signals().items() if self.signals.get(n, h) is not h]
        if changed:
            found.append(f"a handler of signal {signal.Signals(changed[0]).name}")
        if tables:
            now = self._tables()
            changed = sorted(n for n, t in now.items() if self.tables.get(n) != t)
            if changed:
                found.append(f"a kernel registered over {', '.join(changed[:3])}")
        return found


def warm_up_guards():
    """Entering the modes the first time imports TorchDynamo and rewraps a few torch functions;
    do it before any snapshot so only the candidate's own changes show."""
    scratch = Violations()
    with ForwardFunctionGuard(scratch), ForwardDispatchGuard(scratch, [0]):
        torch.empty(1)


def dynamo_frames():
    """How many frames TorchDynamo has seen: it grows when anything is torch.compile'd and run."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return sum(counters["frames"].values()) + sum(counters["stats"].values())
