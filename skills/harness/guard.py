"""Anti-hacking checks that run inside the candidate's child process.

The child imports the candidate; these guards watch it. Each trick caught is recorded under a fixed
violation name (VIOLATIONS) with a one-line detail. The verdict on correctness is never taken here:
the trusted worker compares the outputs, so a candidate that defeats a guard still has to produce
the right numbers by itself. Native code in the candidate's process can switch these guards off on
its own thread; what it imports to do so, or to compute with ATen, the worker judges from outside
by the symbols of its shared objects, with this module's operator policy (native_code.py).
"""
import ctypes
import gc
import json
import os
import signal
import sys
import tempfile
import threading
import time

import torch
from torch._C._profiler import ProfilerConfig, ProfilerState, _ExperimentalConfig, _RecordFunctionFast
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# Every name the harness can put in `violations`, with what it means.
VIOLATIONS = {
    "torch_compute_in_forward": "a PyTorch operator computed inside ModelNew.forward",
    "torch_compute_in_binding": "a PyTorch (ATen) operator computed inside the extension's bindings, or imported "
                                "by its native code (native_code.py: at::_ops calls, ATen's kernels past the dispatcher)",
    "binding_disables_observer": "the candidate's native code imports a switch of the harness's observers or a way "
                                 "around them (RecordFunction, dispatch keys, redispatch, dlsym; native_code.py)",
    "unchecked_native_code": "native code the harness could not check: a malformed shared object, or code mapped "
                             "from the candidate's scratch, a deleted file or a memfd",
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
    "observer_tampered": "the candidate turned off, stopped or went around the harness's operator observer "
                         "(RecordFunction) in forward",
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
# CompositeImplicitAutograd operators that bindings call to lay out or convert their inputs. The
# observers judge them by what they run (a clone under contiguous is denied there); the check of
# the extension's symbols (native_code.py), which cannot see what they run, allows them by name.
LAYOUT_OPS = {"contiguous", "reshape", "reshape_as", "view_as", "expand_as", "flatten", "to", "type_as"}


def op_allowed(name):
    """The one policy of both observers: `name` (an ATen operator, no namespace or overload) may run
    in ModelNew.forward and the bindings. In-place views (transpose_, squeeze_) count as views."""
    base = name.rstrip("_") if name.endswith("_") and name != "zero_" else name
    return name in ALLOWED_OPS or base in VIEW_OPS


# ATen operators every overload of which is CompositeImplicitAutograd (reshape, contiguous, to,
# linear's callers...): they run as other operators, which RecordFunction records under them and
# the OperatorObserver judges; the dispatch mode never sees them at all. Filled by warm_up_guards.
_DECOMPOSED_OPS = set()


def _decomposed_ops():
    overloads = {}
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith("aten::"):
            implicit = torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")
            overloads.setdefault(name[6:].split(".")[0], []).append(implicit)
    return {op for op, implicit in overloads.items() if all(implicit)}

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


_os_write = os.write  # bound before any candidate code


class Violations:
    """What the guards caught in this request. In the candidate's process each new name is also
    written at once into a pipe only the worker reads (channel, a file descriptor): code that
    reaches this object and empties `found` cannot take back what was sent."""

    def __init__(self):
        self.found = {}  # name -> first detail
        self.channel = None

    def add(self, name, detail):
        assert name in VIOLATIONS, name
        # Sent when new to `found`: a candidate that fills `found` ahead only names itself.
        new = name not in self.found
        self.found.setdefault(name, detail)
        if self.channel is not None and new:
            line = f"{name}\t{str(detail)[:300]}".replace("\n", " ") + "\n"
            try:
                _os_write(self.channel, line.encode("utf-8", "replace"))
            except OSError:  # full (found emptied again and again: the first lines are in) or
                pass             # closed (the main loop checks the fd)

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
        if not op_allowed(name):
            where = "torch_compute_in_binding" if self.extension_depth[0] > 0 else "torch_compute_in_forward"
            self.violations.add(where, f"aten::{name} called")
            raise ViolationRaised(f"aten::{name} is not allowed in ModelNew.forward")
        out = func(*args, **kwargs)
        if name in ALLOCATION_OPS and isinstance(out, torch.Tensor):
            poison_(out)
            self.allocated.append(out)
        return out


# Bound before any candidate code: the observer's own switches.
_enable_profiler_legacy = torch.autograd._enable_profiler_legacy
_disable_profiler_legacy = torch.autograd._disable_profiler_legacy
_TRACE_SWITCHES = ("_add_execution_trace_observer", "_enable_execution_trace_observer",
                   "_disable_execution_trace_observer", "_remove_execution_trace_observer")
_add_trace, _enable_trace, _disable_trace, _remove_trace = (getattr(torch._C._profiler, n) for n in _TRACE_SWITCHES)
_mkstemp = tempfile.mkstemp
_PROFILER_CONFIG = ProfilerConfig(ProfilerState.CPU, False, False, False, False, False, _ExperimentalConfig())
_observer = [None]  # the OperatorObserver watching a forward now, for the switches below


class OperatorObserver:
    """The second observer of verify's forward, with ForwardDispatchGuard's policy (op_allowed).

    The dispatch mode sees an operator only when the dispatcher reaches the Python key, so
    torch.* under `_disable_current_modes()` or `_ExcludeDispatchKeyGuard(Python)`, and at:: calls
    of a binding under c10's ExcludeDispatchKeyGuard, never reach it. RecordFunction runs in the
    dispatcher's entry for every operator call, before any key is chosen and whatever the mode
    stack holds: the legacy CPU profiler (thread-local RecordFunction callbacks; no Kineto, no
    CUPTI, also on CUDA) records each call's push and pop in order, and after the forward each
    ATen operator is judged by name. Operators under a denied one are its implementation; those
    under an allowed one must be allowed too, but for fill_ (zero_'s kernel and the mode's
    poison); a decomposed operator is judged by what it runs. Events inside the extension's
    calls (the EXTENSION range, call_observed) are the binding's.

    RecordFunction's profiler callbacks are thread-local, and so is the dispatch mode: torch.*
    on a thread started in forward (Python's or the binding's own) reaches neither. The execution
    trace observer registers a global RecordFunction callback: its trace (a JSON file in the
    child's scratch) gives every other thread's operators, with their parents, judged alike.

    The observer's own ranges must come back whole: FORWARD around the forward, END after it,
    EXTENSION once per extension call, and no range may end that did not begin in the session.
    Else the profiler was stopped (or restarted) or RecordFunction left off or its callbacks
    cleared in forward (observer_tampered). The Python switches that turn RecordFunction off and
    on again, leaving the ranges whole (`_enable_record_function`, `_clear_callbacks`), are
    replaced before any candidate code by ones that refuse, and flag a call in forward. So are
    the dispatcher's entries below RecordFunction that Python can replace, their originals
    dropped: a redispatch from Python becomes an observed call narrowed to its keys, a kernel
    called directly is refused (_observed_redispatch; install_observer_switches)."""

    FORWARD, END, EXTENSION = "harness::forward", "harness::forward_end", "harness::extension"

    def __init__(self, violations):
        self.violations = violations
        self.forward = None
        fd, self.trace_path = _mkstemp(prefix="harness-trace-", suffix=".json")  # in the child's scratch
        os.close(fd)

    def start(self):
        try:
            if not _add_trace(self.trace_path):
                raise RuntimeError("the execution trace observer is registered already")
            try:
                _enable_trace()
                _enable_profiler_legacy(_PROFILER_CONFIG)
            except RuntimeError:
                _disable_trace()
                _remove_trace()
                raise
        except RuntimeError as e:  # a profiler or trace the candidate left running
            os.unlink(self.trace_path)
            self.tampered(f"the operator observer could not start ({str(e)[:120]})")
        _observer[0] = self
        self.forward = _RecordFunctionFast(self.FORWARD)
        self.forward.__enter__()

    def stop(self, extension_calls):
        """Ends the observation and judges it; raises ViolationRaised for what it found."""
        _observer[0] = None
        self.forward.__exit__(None, None, None)
        with _RecordFunctionFast(self.END):
            pass
        before = dict(self.violations.found)
        try:
            records = _disable_profiler_legacy()
        except RuntimeError as e:  # stopped in forward
            records = None
            self.violations.add("observer_tampered", f"the profiler was stopped in forward ({str(e)[:120]})")
        _disable_trace()
        _remove_trace()  # writes the trace out
        try:
            with open(self.trace_path) as f:
                trace = json.load(f)["nodes"]
        except (OSError, ValueError, KeyError) as e:
            trace = None
            self.violations.add("observer_tampered", f"the execution trace is unreadable ({type(e).__name__})")
        finally:
            os.unlink(self.trace_path)
        if records is not None:
            main_thread = self.judge(records, extension_calls)
            if trace is not None:
                self.judge_other_threads(trace, main_thread)
        found = [name for name in self.violations.found if name not in before]
        if found:
            raise ViolationRaised(f"{found[0]}: {self.violations.found[found[0]]}")

    def tampered(self, detail):
        self.violations.add("observer_tampered", detail)
        raise ViolationRaised(detail)

    def _judge_op(self, name, allowed, where, seen="seen by RecordFunction"):
        """(under an allowed op, denied) for an event named `name` under an allowed op or not."""
        if not name.startswith("aten::"):
            return allowed, False
        op = name[6:]
        if op_allowed(op):
            return True, False
        if op in _DECOMPOSED_OPS or (op == "fill_" and allowed):
            return allowed, False
        self.violations.add(where, f"aten::{op} called ({seen})")
        return allowed, True

    def judge(self, records, extension_calls):
        """Judges the profiler's records; returns RecordFunction's id of the forward's thread."""
        counts = {self.FORWARD: 0, self.END: 0, self.EXTENSION: 0}
        main_thread, unmatched = None, 0
        for thread in records:
            stack = []  # per open event: (handle, (in the binding, under an allowed op, under a denied op))
            for event in thread:
                if event.kind() == "pop":
                    # A range that ends without having begun in this session: the profiler was
                    # stopped and started again in forward, the events before it lost.
                    if event.handle() not in [handle for handle, _ in stack]:
                        unmatched += 1
                    while stack and stack.pop()[0] != event.handle():
                        pass
                    continue
                if event.kind() != "push":
                    continue
                name = event.name()
                binding, allowed, denied = stack[-1][1] if stack else (False, False, False)
                if name in counts:
                    counts[name] += 1
                    main_thread = event.thread_id() if name == self.FORWARD else main_thread
                    binding = binding or name == self.EXTENSION
                elif not denied:  # under a denied op: its own implementation
                    where = "torch_compute_in_binding" if binding else "torch_compute_in_forward"
                    allowed, denied = self._judge_op(name, allowed, where)
                stack.append((event.handle(), (binding, allowed, denied)))
        if counts[self.FORWARD] != 1 or counts[self.END] != 1 or unmatched:
            self.violations.add("observer_tampered", "RecordFunction did not see the harness's own ranges around "
                                                     "the forward (turned off, its callbacks cleared, the profiler restarted)")
        elif counts[self.EXTENSION] < extension_calls:
            self.violations.add("observer_tampered", f"RecordFunction saw {counts[self.EXTENSION]} of the "
                                                     f"{extension_calls} extension calls")
        return main_thread

    def judge_other_threads(self, nodes, main_thread):
        """The trace's operators on threads other than the forward's (RecordFunction's thread ids in
        both), each judged under its parents as judge() does; the forward's thread is judge()'s."""
        by_id = {node.get("id"): node for node in nodes}
        verdicts = {}  # id -> (under an allowed op, under a denied op)
        for node in nodes:
            tid = next((a.get("value") for a in node.get("attrs", ()) if a.get("name") == "tid"), None)
            if tid in (main_thread, 0):  # 0: the trace's process node
                continue
            chain = []  # up to the first ancestor already judged (the trace lists children first)
            while node is not None and node.get("id") not in verdicts and node not in chain:
                chain.append(node)
                node = by_id.get(node.get("ctrl_deps"))
            allowed, denied = verdicts.get(node.get("id"), (False, False)) if node is not None else (False, False)
            for node in reversed(chain):
                if not denied:
                    allowed, denied = self._judge_op(node.get("name", ""), allowed, "torch_compute_in_forward",
                                                     "on another thread, seen by the execution trace")
                verdicts[node.get("id")] = (allowed, denied)


def call_observed(fn, args, kwargs):
    """fn(*args, **kwargs), the extension's function, inside the EXTENSION range while an observer
    watches (verify's forward only: the timed runs pay one check)."""
    if _observer[0] is None:
        return fn(*args, **kwargs)
    with _RecordFunctionFast(OperatorObserver.EXTENSION):
        return fn(*args, **kwargs)


def _refused(name):
    """What stands in for a switch of RecordFunction or of the trace: a call in forward is the
    violation, elsewhere an error. The originals of `_enable_record_function`, `_clear_callbacks`
    and `_SafeKernelFunction.call_boxed` are dropped, never kept (the harness never calls them),
    so no candidate code can reach them from Python."""
    def refused(*args, **kwargs):
        observer = _observer[0]
        if observer is not None:
            observer.tampered(f"{name} called in forward")
        raise RuntimeError(f"harness: {name} is not available to candidates")
    refused.__name__ = name
    return refused


# The dispatcher runs RecordFunction in its call entry only (callBoxed, call). Three of its Python
# bindings in torch 2.11 (torch._C's dispatch, kernel and operation functions and classes, looked
# through) enter below it and so reach a kernel no observer sees: _DispatchOperatorHandle's
# redispatch_boxed (OpOverload.redispatch), _SafeKernelFunction's call_boxed
# (torch.library.get_kernel) and the per-overload op_dk that torch._C._get_operation_overload makes
# (OpOverload._op_dk). Python in the candidate's process reaches any object that is alive (module
# globals, closures, gc.get_objects), so an entry cannot be observed by wrapping it while an
# original is kept anywhere: the first two, methods of a class, are replaced on the class and their
# originals dropped (the class held the only reference: neither gc nor a fresh import of torch._C
# finds them after; redispatch_via_gc, test_torch_s_own_redispatch_runs_on_the_observed_stand_in),
# the stand-in for redispatch_boxed rebuilt on the observed entry. op_dk stays open (a known hole,
# calls_kernel_for_dispatch_key): its factory is a function of torch._C, whose original outlives any
# replacement in the copy of torch._C's namespace that its import keeps, and OpOverloads are made
# with it on demand.
_C = torch._C


def _tensors(args, kwargs):
    """The tensors the dispatcher takes its keys from: arguments, and the items of Tensor[] ones."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, torch.Tensor))


def _passed_over(handle, keyset, top, carried):
    """The keys a redispatch to `keyset` (highest key `top`) passes over where a call would stop:
    above `top`, carried by the call, and not a fallthrough for the operator (the dispatcher skips
    those by itself). Only these are excluded, so that the kernel's own calls keep the keys they
    would have had (a factory call in a custom op's kernel needs BackendSelect)."""
    schema = handle.schema()
    name = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
    table = "\n" + _C._dispatch_dump_table(name)  # "Key: [fallthrough ]registered at ..." a line
    rest = (carried & (_C._dispatch_keyset_full() - _C._dispatch_keyset_full_after(top))) - keyset
    skipped = _C.DispatchKeySet(_C.DispatchKey.Undefined)  # empty
    for _ in range(64):  # one key a turn, highest first; a set holds fewer
        key = rest.highestPriorityTypeId()
        if key == _C.DispatchKey.Undefined:
            break
        if f"\n{_C._dispatch_key_name(key)}: fallthrough" not in table:
            skipped = skipped | _C.DispatchKeySet(key)
        rest = rest - _C.DispatchKeySet(key)
    # A per-backend key (AutogradCPU) brings its backend's bit, which the call needs: only the
    # functionality is excluded.
    return skipped - keyset


def _observed_redispatch(self, keyset, *args, **kwargs):
    """_DispatchOperatorHandle.redispatch_boxed without the original: the operator is called
    through the dispatcher's observed entry (RecordFunction records it under its own name, as any
    call), with this thread's key sets narrowed for the call so that it reaches the kernel a
    redispatch to `keyset` reaches: the keys it passes over are excluded (_passed_over), and its
    highest key is included where nothing carries it (a backend for an operator without tensor
    arguments). Torch's callers (a custom op's autograd and BackendSelect kernels) reach the
    kernels they reached with the original. Unlike a redispatch's, the narrowing also holds for
    the operators that kernel calls in turn."""
    carried = _C._dispatch_tls_local_include_set()
    for tensor in _tensors(args, kwargs):
        carried = carried | _C._dispatch_keys(tensor)
    carried = carried - _C._dispatch_tls_local_exclude_set()
    top = keyset.highestPriorityTypeId()
    if top == _C.DispatchKey.Undefined:  # an empty keyset: no kernel, as the original would say
        return _C._dispatch_call_boxed(self, *args, **kwargs)
    with _C._ExcludeDispatchKeyGuard(_passed_over(self, keyset, top, carried)):
        if carried.has(top):
            return _C._dispatch_call_boxed(self, *args, **kwargs)
        with _C._IncludeDispatchKeyGuard(top):
            return _C._dispatch_call_boxed(self, *args, **kwargs)


_SWITCHES = {name: _refused(name) for name in ("_enable_record_function", "_clear_callbacks")}
# Where the switches are installed (the identity table watches these): (owner, name, replacement).
_OBSERVER_SWITCHES = [(torch._C._autograd, name, fn) for name, fn in _SWITCHES.items()]
_OBSERVER_SWITCHES += [(torch.autograd, name, fn) for name, fn in _SWITCHES.items() if hasattr(torch.autograd, name)]
# The dispatcher entries below RecordFunction that Python can replace; their originals are dropped.
# A kernel called directly has no observed equivalent (the kernel it holds may no longer be the
# one the dispatcher finds): refused, the one cost a mutable custom op's ADInplaceOrView kernel.
_OBSERVER_SWITCHES.append((_C._DispatchOperatorHandle, "redispatch_boxed", _observed_redispatch))
if hasattr(_C, "_SafeKernelFunction"):  # torch.library.get_kernel's, in recent torch
    _OBSERVER_SWITCHES.append((_C._SafeKernelFunction, "call_boxed", _refused("_SafeKernelFunction.call_boxed")))
# The execution trace's switches: the harness keeps its own, bound above; torch.profiler's
# ExecutionTraceObserver holds them too.
_TRACE_REFUSED = {name: _refused(name) for name in _TRACE_SWITCHES}
import torch.profiler.profiler  # noqa: E402  (torch imports it itself; named here for the owner)
_OBSERVER_SWITCHES += [(owner, name, fn) for owner in (torch._C._profiler, torch.profiler.profiler)
                       for name, fn in _TRACE_REFUSED.items()]


def install_observer_switches():
    for owner, name, replacement in _OBSERVER_SWITCHES:
        setattr(owner, name, replacement)


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
    for owner, name, _ in _OBSERVER_SWITCHES:  # the operator observer's switches
        table[f"{getattr(owner, '__name__', owner)}.{name}"] = getattr(owner, name)
    for name in ("synchronize", "Event", "current_stream", "Stream", "default_stream", "_sleep"):
        table[f"torch.cuda.{name}"] = getattr(torch.cuda, name)
    for name in ("record", "elapsed_time", "synchronize", "query"):
        table[f"torch.cuda.Event.{name}"] = getattr(torch.cuda.Event, name)
    # The grad-mode context managers the timer and the guarded call enter: their classes are in the
    # torch table, but a replaced __enter__ would run between the inputs and the clock's start.
    for cls in (torch.no_grad, torch.enable_grad, torch.inference_mode, torch.set_grad_enabled):
        for owner in cls.__mro__[:-1]:
            for name in ("__new__", "__init__", "__enter__", "__exit__", "__call__", "clone"):
                if name in vars(owner):
                    table[f"torch.{cls.__name__}.{owner.__name__}.{name}"] = vars(owner)[name]
    import builtins
    for name in ("open", "__import__", "print", "isinstance", "type", "id", "len"):
        table[f"builtins.{name}"] = getattr(builtins, name)
    return table


# Module-level state of the harness that changes as it runs, by design: left out of the snapshot.
_RUNTIME_STATE = {"harness.exchange._roots"}
# Modules the harness calls into whose functions a candidate could replace (framing, the exchange,
# the input draw's seeding, the operator observer's trace).
_LIBRARY_MODULES = ("builtins", "msgpack", "struct", "os", "gc", "sys", "threading", "signal", "random",
                    "json", "json.decoder", "json.scanner", "tempfile")  # the operator observer's trace
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
        # (prefix, module, whole, imports): whole=False watches callables only; imports=True also
        # watches the modules it holds as globals (a task's `torch` swapped for a look-alike).
        self.modules = []
        self.objects = []  # (prefix, object, attribute names or None for all, container items)
        for name, module in sorted(sys.modules.items()):
            if name == "harness" or name.startswith("harness.") or \
                    (name == "__main__" and getattr(module, "__spec__", None) is not None and
                     module.__spec__.name.startswith("harness.")):
                prefix = module.__spec__.name if name == "__main__" else name
                self.modules.append((prefix, module, True, True))
        for name in _LIBRARY_MODULES:  # their submodules may load lazily: not watched
            if name in sys.modules:
                self.modules.append((name, sys.modules[name], False, False))
        self.recorded = self.record()

    def watch(self, prefix, module):
        """Also watch a module's functions and classes (the reference task's get_inputs: a hook
        there would see every input set first); its other globals may change as it runs."""
        self.modules.append((prefix, module, False, True))
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
        for prefix, module, whole, imports in self.modules[modules]:
            entries.append((prefix + ".__class__", type(module)))
            for name, value in list(vars(module).items()):
                label = f"{prefix}.{name}"
                if label in _RUNTIME_STATE or name == "__builtins__":
                    continue
                if isinstance(value, type(sys)):
                    if imports:
                        entries.append((label, value))
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


# Bound at import, before any candidate code: sigaction(2) itself, queried with no new action.
_libc = ctypes.CDLL(None, use_errno=True)
_sigaction = _libc.sigaction
_sigaction.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_sigaction.restype = ctypes.c_int
_SIGACTION_BYTES = 256  # glibc's struct sigaction is 152 bytes on x86-64 and aarch64; the handler comes first


def signal_actions():
    """Each signal's handler address as sigaction(2) reports it, and the signals the kernel says
    this process catches (/proc/self/status SigCgt). Python's signal module reports only handlers
    that Python installed: a handler installed from native code, which runs the candidate's code
    wherever the signal lands (inside the harness's read of an output, say), shows here alone."""
    actions = {}
    buffer = ctypes.create_string_buffer(_SIGACTION_BYTES)
    for number in range(1, signal.SIGRTMAX + 1):
        if _sigaction(number, None, buffer) == 0:
            actions[number] = ctypes.c_void_p.from_buffer(buffer).value or 0
    caught = -1
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"SigCgt:"):
                    caught = int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return actions, caught


def armed_timers():
    """The timers armed in this process (the harness arms none): the interval timers (setitimer)
    and POSIX timers (timer_create, /proc/self/timers). Either delivers a signal later, to a
    handler that runs wherever it lands."""
    armed = [name for name in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")
             if signal.getitimer(getattr(signal, name)) != (0.0, 0.0)]
    try:
        with open("/proc/self/timers", "rb") as f:
            armed += [f"POSIX timer {line.split()[1].decode()}" for line in f if line.startswith(b"ID:")]
    except (OSError, IndexError):
        pass
    return armed


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
        self.signal_actions = signal_actions()
        self.timers = set(armed_timers())  # none, unless something of torch's or the driver's armed one
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
        actions, caught = signal_actions()
        before, caught_before = self.signal_actions
        changed = sorted(n for n, a in actions.items() if before.get(n, a) != a)
        if changed or caught != caught_before:
            number = changed[0] if changed else (caught ^ caught_before).bit_length()
            found.append(f"a signal handler installed outside Python ({_signal_name(number)})")
        timers = [t for t in armed_timers() if t not in self.timers]
        if timers:
            found.append(f"a timer armed ({timers[0]})")
        if tables:
            now = self._tables()
            changed = sorted(n for n, t in now.items() if self.tables.get(n) != t)
            if changed:
                found.append(f"a kernel registered over {', '.join(changed[:3])}")
        return found


def _signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def warm_up_guards():
    """Entering the modes the first time imports TorchDynamo and rewraps a few torch functions;
    do it before any snapshot so only the candidate's own changes show."""
    if not _DECOMPOSED_OPS:
        _DECOMPOSED_OPS.update(_decomposed_ops())
    install_observer_switches()
    scratch = Violations()
    observer = OperatorObserver(scratch)
    observer.start()
    try:
        with ForwardFunctionGuard(scratch), ForwardDispatchGuard(scratch, [0]):
            torch.empty(1)
    finally:
        observer.stop(0)


def dynamo_frames():
    """How many frames TorchDynamo has seen: it grows when anything is torch.compile'd and run."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return sum(counters["frames"].values()) + sum(counters["stats"].values())
