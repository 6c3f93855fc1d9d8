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
    "forged_reply": "something other than the harness's loop in the candidate's process answered the worker, "
                    "or wrote into or replaced the harness's reply channel",
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


# Module-level state of the harness that changes as it runs, by design: left out of the snapshot.
_RUNTIME_STATE = {"harness.exchange._roots"}
# Modules the harness calls into whose functions a candidate could replace (framing, the exchange).
_LIBRARY_MODULES = ("builtins", "msgpack", "struct", "os", "gc", "sys", "threading", "signal")
_CONTAINERS = (dict, list, set, frozenset, tuple)


def _flatten(label, value, entries, items=True, closures=True):
    """Appends (label, what must stay the same) for one watched object: the object itself; for a
    function its code, defaults, keyword defaults and (closures=True) the closure's contents; for a
    container (items=True) its items, so that a rule table cannot be edited in place."""
    entries.append((label, value))
    if isinstance(value, (staticmethod, classmethod)):
        _flatten(label + ".__func__", value.__func__, entries, items, closures)
    elif isinstance(value, property):
        for part in ("fget", "fset", "fdel"):
            _flatten(f"{label}.{part}", getattr(value, part), entries, items, closures)
    elif isinstance(value, type(_flatten)):
        entries.append((label + ".__code__", value.__code__))
        entries.append((label + ".__defaults__", value.__defaults__))
        kwdefaults = value.__kwdefaults__
        entries.append((label + ".__kwdefaults__", kwdefaults))
        if kwdefaults:
            entries.append((label + ".__kwdefaults__[]", tuple(kwdefaults.items())))
        if closures and value.__closure__:
            entries.append((label + ".__closure__[]", tuple(c.cell_contents if _cell_full(c) else c
                                                            for c in value.__closure__)))
    elif items and isinstance(value, _CONTAINERS):
        entries.append((label + "[]", tuple(value.items()) if isinstance(value, dict) else tuple(value)))


def _cell_full(cell):
    try:
        cell.cell_contents
        return True
    except ValueError:  # a closure variable not yet bound
        return False


def _same(a, b):
    """Identity, item by item for the items of containers."""
    if type(a) is tuple and type(b) is tuple and len(a) == len(b):
        return all(x is y or (type(x) is tuple and type(y) is tuple and _same(x, y)) for x, y in zip(a, b))
    return a is b


class IdentitySnapshot:
    """What the harness relies on in the candidate's process, recorded before any candidate code
    runs and compared by identity after: torch's, time's and the builtins' functions (the fixed
    table), every harness module's globals (classes down to their methods, functions down to
    code, defaults and closure, rule tables down to their items), the libraries framing writes
    replies with, and the objects the runner times and judges with (watch_object). A candidate
    that replaced the clock a timer bound at import, edited an allow-list or rewrote a check's
    code shows up here."""

    def __init__(self):
        self.modules = []  # (prefix, module, whole): whole=False watches callables only
        self.objects = []  # (prefix, object, attribute names or None for all, container items)
        for name, module in sorted(sys.modules.items()):
            if name == "harness" or name.startswith("harness.") or \
                    (name == "__main__" and getattr(module, "__spec__", None) is not None and
                     module.__spec__.name.startswith("harness.")):
                prefix = module.__spec__.name if name == "__main__" else name
                self.modules.append((prefix, module, True))
        for name in _LIBRARY_MODULES:
            if name in sys.modules:
                self.modules.append((name, sys.modules[name], False))
        self.recorded = self.record()

    def watch(self, prefix, module):
        """Also watch a module's functions and classes (the reference task's get_inputs: a hook
        there would see every input set first); its other globals may change as it runs."""
        self.modules.append((prefix, module, False))
        self._record_added()

    def watch_object(self, prefix, obj, names=None, items=False):
        """Also watch an object's attributes (names, or all) by identity, and its class; items=True
        watches its containers' items too."""
        self.objects.append((prefix, obj, tuple(names) if names is not None else None, items))
        self._record_added()

    def record(self):
        """What is watched now, as an immutable value: a copy held elsewhere (the child's main
        loop keeps one) stays what it was whatever happens to this object."""
        return len(self.modules), len(self.objects), self.entries()

    def _record_added(self):
        """Adds what was just watched to the record, leaving the rest as it was recorded: a
        change made since then still shows."""
        modules, objects, entries = self.recorded
        added = self.entries(slice(modules, None), slice(objects, None), table=False)
        self.recorded = (len(self.modules), len(self.objects), entries + added)

    def entries(self, modules=slice(None), objects=slice(None), table=True):
        entries = list(_identity_table().items()) if table else []
        for prefix, module, whole in self.modules[modules]:
            entries.append((prefix + ".__class__", type(module)))
            for name, value in list(vars(module).items()):
                label = f"{prefix}.{name}"
                if label in _RUNTIME_STATE or name == "__builtins__" or isinstance(value, type(sys)):
                    continue
                if not whole:
                    if callable(value) and not isinstance(value, type):
                        _flatten(label, value, entries, items=False, closures=False)
                    elif isinstance(value, type) and value.__module__ == module.__name__:
                        self._flatten_class(label, value, entries, closures=False)
                    continue
                if isinstance(value, type) and value.__module__ == module.__name__:
                    self._flatten_class(label, value, entries, closures=True)
                else:
                    _flatten(label, value, entries)
        for prefix, obj, names, items in self.objects[objects]:
            entries.append((prefix + ".__class__", type(obj)))
            attributes = vars(obj)
            entries.append((prefix + ".__dict__", tuple(sorted(attributes)) if names is None else None))
            for name in (sorted(attributes) if names is None else names):
                _flatten(f"{prefix}.{name}", attributes.get(name), entries, items=items)
        return tuple(entries)

    @staticmethod
    def _flatten_class(label, cls, entries, closures):
        entries.append((label, cls))
        entries.append((label + ".__bases__", cls.__bases__))
        for name, value in list(vars(cls).items()):
            if name in ("__dict__", "__weakref__", "__doc__"):
                continue
            _flatten(f"{label}.{name}", value, entries, items=False, closures=closures)

    def changed(self, recorded=None):
        """The labels whose objects are not the recorded ones, of what was watched at the record
        (recorded: a copy held elsewhere, else this object's own latest)."""
        modules, objects, entries = self.recorded if recorded is None else recorded
        before = dict(entries)
        now = dict(self.entries(slice(modules), slice(objects)))
        found = [k for k in before if k not in now or not _same(before[k], now[k])]
        found += [k for k in now if k not in before]
        return sorted(found)

    def checker_parts(self):
        """(owner, attribute, object) for everything changed() runs on: its functions' code and
        defaults, the guard globals and builtins they name, the snapshot's own attributes. The
        child's main loop compares these by identity, from names only its frame holds, before it
        trusts changed() (a candidate that replaced the checker would otherwise clear itself)."""
        functions = [_flatten, _cell_full, _same, _identity_table, IdentitySnapshot._flatten_class]
        functions += [vars(IdentitySnapshot)[n] for n in ("changed", "entries", "record")]
        parts, names = [], set()
        for fn in functions:
            for attribute in ("__code__", "__defaults__", "__kwdefaults__", "__globals__"):
                parts.append((fn, attribute, getattr(fn, attribute)))
            todo = [fn.__code__]
            while todo:
                code = todo.pop()
                names.update(code.co_names)
                todo += [c for c in code.co_consts if isinstance(c, type(code))]
        missing = MISSING
        import builtins
        this = sys.modules[__name__]
        for name in sorted(names):  # a dict owner is looked up by key, anything else by attribute
            parts.append((vars(this), name, vars(this).get(name, missing)))
        for name in sorted(vars(builtins)):
            parts.append((vars(builtins), name, vars(builtins)[name]))
        parts.append((self, "__class__", IdentitySnapshot))
        for name in ("_flatten_class", "changed", "entries", "record"):
            parts.append((IdentitySnapshot, name, getattr(IdentitySnapshot, name)))
        for name in ("modules", "objects", "_flatten_class", "changed", "entries", "record"):
            parts.append((vars(self), name, vars(self).get(name, missing)))
        return tuple(parts)


MISSING = object()  # the checker_parts mark of a name that must stay unbound


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
    alive (threading's and raw _thread ones), and every ATen operator's dispatch table (a kernel
    registered over aten::clone from Python or from the extension's C++ changes it)."""

    def __init__(self):
        self.gc_callbacks = list(gc.callbacks)
        self.threads = set(threading.enumerate())
        self.thread_states = set(sys._current_frames())  # raw _thread threads too
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
        raw = set(sys._current_frames()) - self.thread_states - {threading.get_ident()}
        if raw:  # started by _thread, or a native thread that holds the interpreter now
            found.append(f"a Python thread outside threading (ident {min(raw)})")
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
