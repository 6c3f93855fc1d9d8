"""The isolated child process one candidate runs in.

Started by the worker with two private pipes (commands in, replies out); the candidate's own
standard output is sent to standard error so it cannot write into the reply channel by printing.
It never sees the reference's outputs: it returns its own outputs (shared by CUDA IPC on a GPU,
an exchange file on the CPU; exchange.put_outputs) and what the guards caught, and the worker
decides. Commands: load, draw, verify, time, exit.
"""
import argparse
import fcntl
import gc
import importlib
import importlib.util
import operator
import os
import struct
import sys
import termios
import threading
import time
import traceback

import msgpack
import torch

from harness import exchange, framing, guard, task_inputs, timing

_ipc_collect = torch.cuda.ipc_collect  # bound before any candidate code runs
# What a forward may return its outputs in: plain tuples and lists and torch's own named tuples
# (torch.return_types), whose iteration is the tuple's and runs no candidate code.
_OUTPUT_SEQUENCES = frozenset([tuple, list] + [t for t in vars(torch.return_types).values()
                                               if isinstance(t, type) and issubclass(t, tuple)])
_F_GETPIPE_SZ = 1032


def as_output_list(out):
    """A forward's outputs as a list. Only the exact sequence types are unpacked: a subclass's
    iteration is the candidate's code, so it stays one output, which the type checks refuse."""
    return list(out) if type(out) in _OUTPUT_SEQUENCES else [out]


def storage_span(t):
    s = t.untyped_storage()
    return (s.data_ptr(), s.data_ptr() + s.nbytes())


def overlaps(a, b):
    return a[0] < b[1] and b[0] < a[1] and a[0] != a[1]


def same_values(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):  # one pass; only NaN (never equal to itself) needs the slow path
        return True
    if not a.dtype.is_floating_point:
        return False
    return torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))


class Runner:
    def __init__(self, identity, clock_fd=-1):
        self.identity = identity  # taken by main() before any candidate code ran
        self.clock_fd = clock_fd  # the worker's clock (timing.ChildClock); -1: none
        self.clock = None
        self.violations = guard.Violations()
        self.model = None
        self.device = None
        self.extension_calls = 0
        self.extension_depth = [0]
        self.extension_storages = []
        self.audit = None
        self.output_storages = []
        self.kept_outputs = []
        self.timer = None
        self.poisoned = []
        self.exchange = None
        self.timing_inputs = None
        self.task = None
        self.sets = None
        self.loading = None  # what prepare read for load
        self.threads_before_load = frozenset()

    # --- load -------------------------------------------------------------------------------
    def prepare(self, req):
        """The first half of load, before any candidate code: the device, the timer, the guards
        and what the identity snapshot watches of this runner (main() records it after this)."""
        self.device = torch.device(req["device"])
        if self.device.type == "cpu" and int(req.get("cpu_threads", 0)) > 0:
            torch.set_num_threads(int(req["cpu_threads"]))
        if self.device.type == "cuda":
            torch.cuda.init()
            if self.device.index is None:  # tensors report cuda:N, and torch.device("cuda") != cuda:0
                self.device = torch.device("cuda", torch.cuda.current_device())
            torch.empty(1, device=self.device)
        torch.ones(1 << 16).sum()  # start torch's intra-op pool before counting threads
        self.timer = timing.Timer(self.device)
        if self.clock_fd >= 0:
            # The worker's null round trips, the same bracket around no call: taken now, before
            # any candidate code, so that the candidate cannot make them slow (it would take its
            # own runs' time off the worker's bound of them).
            self.clock = timing.ChildClock(self.clock_fd)
            for _ in range(timing.CALIBRATION_RUNS):
                self.timer.time_once(timing.nothing, [], self.clock, pad_cycles=0)
        solution_dir = os.path.realpath(req["solution_dir"])
        os.chdir(solution_dir)  # started in its exchange directory, ahead of the job
        self.exchange = exchange.Exchange(req["exchange_dir"])
        self.loading = {"solution_dir": solution_dir,
                        "module_dir": os.path.realpath(req["module_dir"]),
                        "task_path": os.path.realpath(req["task_path"]),
                        "init_inputs": self.exchange.take(req["init_inputs"]),
                        "state_dict": self.exchange.take(req["state_dict"])}

        guard.warm_up_guards()
        self.hooks = guard.HookSnapshot()
        self.dynamo_frames = guard.dynamo_frames()
        self.audit = guard.AuditGuard(self.violations, req.get("allowed_write_dirs", []) + [solution_dir],
                                      self.loading["task_path"])
        # The threads before any candidate code: on the CPU, where torch's pool is started above and
        # nothing of the harness's starts one later, any other thread is the candidate's.
        self.threads_before_load = frozenset(guard.os_thread_ids())
        watched = ("identity", "violations", "timer", "clock", "audit", "hooks", "exchange", "device",
                   "extension_depth", "dynamo_frames", "threads_before_load")
        self.identity.watch_object("runner", self, watched)
        for name, items in (("timer", False), ("violations", False), ("hooks", True)):
            self.identity.watch_object(f"runner.{name}", getattr(self, name), items=items)
        self.identity.watch_object("runner.exchange", self.exchange, ("directory", "shm_directory", "links"))
        if self.clock is not None:
            self.identity.watch_object("runner.clock", self.clock)
        self.identity.watch_object("runner.audit", self.audit, ("violations", "allowed", "reference"), items=True)
        return {}

    def load(self, req):
        """The second half: imports the candidate's extension and model_new.py, builds ModelNew."""
        if self.loading is None:
            raise RuntimeError("load before prepare")
        loading, self.loading = self.loading, None
        solution_dir, module_dir, task_path = loading["solution_dir"], loading["module_dir"], loading["task_path"]
        init_inputs, state_dict = loading["init_inputs"], loading["state_dict"]
        modules_before = set(sys.modules)
        sys.path.insert(0, solution_dir)
        sys.path.insert(0, module_dir)
        self.audit.armed = True

        extension = importlib.import_module("cuda_extension")
        ext_file = os.path.realpath(getattr(extension, "__file__", "") or "")
        if os.path.dirname(ext_file) != module_dir:
            raise RuntimeError(f"cuda_extension resolved to {ext_file}, not the built module in {module_dir}")
        self._wrap_extension(extension)

        spec = importlib.util.spec_from_file_location("model_new", os.path.join(solution_dir, "model_new.py"))
        model_new = importlib.util.module_from_spec(spec)
        sys.modules["model_new"] = model_new
        spec.loader.exec_module(model_new)
        ModelNew = getattr(model_new, "ModelNew", None)
        if ModelNew is None:
            raise RuntimeError("model_new.py defines no class ModelNew")
        with torch.no_grad():
            self.model = ModelNew(*init_inputs)
        self.model.load_state_dict(state_dict, strict=True)
        self.model = self.model.to(self.device).eval()
        self.audit.armed = False

        self._check_reference_use(task_path, ModelNew)
        if self.device.type == "cpu":
            # A thread the candidate leaves behind at load (native ones too, which threading never
            # lists) runs beside the harness from then on: it could rewrite an output after the
            # clock, compute ahead of a request or load the host while the worker times the
            # baselines. The CUDA driver starts helper threads lazily, so only on the CPU.
            started = guard.os_thread_ids() - self.threads_before_load
            if started:
                self.violations.add("background_thread", f"{len(started)} OS thread(s) started while loading")
        for violation, name in guard.new_forbidden_modules(modules_before):
            self.violations.add(violation, f"imported {name}")
        self._check_identity("after import")
        self._check_hooks("after import")
        return {}

    def _wrap_extension(self, extension):
        runner = self

        def wrap(name, fn):
            def call(*args, **kwargs):
                for a in list(args) + list(kwargs.values()):
                    if isinstance(a, torch.Tensor):
                        runner.extension_storages.append(storage_span(a))
                runner.extension_depth[0] += 1
                try:
                    result = guard.call_observed(fn, args, kwargs)  # in verify, the binding's range
                finally:
                    runner.extension_depth[0] -= 1
                runner.extension_calls += 1
                for r in as_output_list(result):
                    if isinstance(r, torch.Tensor):
                        runner.extension_storages.append(storage_span(r))
                return result
            call.__name__ = name
            return call

        for name in dir(extension):
            fn = getattr(extension, name)
            if name.startswith("_") or isinstance(fn, type) or not callable(fn):
                continue
            setattr(extension, name, wrap(name, fn))

    def _check_reference_use(self, task_path, ModelNew):
        for name, module in list(sys.modules.items()):
            f = getattr(module, "__file__", None)
            if f and os.path.realpath(f) == task_path:
                self.violations.add("loads_reference", f"imported the task file as module {name!r}")
        self.audit.harness_io += 1
        try:
            spec = importlib.util.spec_from_file_location("_harness_reference_task", task_path)
            reference = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(reference)
        finally:
            self.audit.harness_io -= 1
        self.task = reference  # its get_inputs draws the input sets here (task_inputs)
        self.identity.watch("task", reference)  # a hook in get_inputs would see every set first
        Model = reference.Model
        named = {c.__name__ for c in ModelNew.__mro__}
        if "Model" in named and ModelNew.__name__ != "Model" and any(
                c is not torch.nn.Module and c.__name__ == "Model" for c in ModelNew.__mro__):
            self.violations.add("model_new_is_reference", "ModelNew subclasses Model")
        if ModelNew.__name__ == "Model":
            self.violations.add("model_new_is_reference", "ModelNew is Model")
        ref_code = Model.forward.__code__.co_code
        for cls in ModelNew.__mro__:
            fwd = vars(cls).get("forward")
            if fwd is not None and getattr(fwd, "__code__", None) is not None and \
                    fwd.__code__.co_code == ref_code and fwd.__code__.co_names == Model.forward.__code__.co_names:
                self.violations.add("model_new_is_reference", "ModelNew.forward is Model.forward's code")
        for name, sub in self.model.named_modules():
            if type(sub).__name__ == "Model" or type(sub) is Model:
                self.violations.add("model_new_is_reference", f"submodule {name or '<root>'} is a Model")

    def _check_hooks(self, when, tables=True):
        """A hook left behind fails the job at once: what comes after it can no longer be trusted."""
        found = self.hooks.found(tables)
        if found:
            self.violations.add("process_hook", f"{found[0]} ({when})")
            raise guard.ViolationRaised(f"{found[0]} ({when})")

    def _check_identity(self, when):
        changed = self.identity.changed()
        if changed:
            self.violations.add("monkeypatch", f"{', '.join(changed[:5])} replaced ({when})")

    # --- one guarded call ----------------------------------------------------------------------
    def guarded_call(self, inputs, settle=True):
        snapshots = [x.clone() if isinstance(x, torch.Tensor) else None for x in inputs]
        input_spans = [storage_span(x) for x in inputs if isinstance(x, torch.Tensor)]
        py_threads = set(threading.enumerate())
        os_threads = guard.os_thread_ids()
        modules_before = set(sys.modules)
        if self.device.type == "cuda":  # stale NaN in every cached block the candidate may reuse
            junk = torch.empty(timing.L2_FLUSH_BYTES // 4, dtype=torch.float32, device=self.device)
            junk.fill_(float("nan"))
            del junk
            if settle:  # nothing of ours still running when the candidate starts
                torch.cuda.synchronize()
        self.extension_calls = 0
        self.extension_storages = []
        dispatch = guard.ForwardDispatchGuard(self.violations, self.extension_depth)
        # Two observers, one policy: the dispatch mode stops the forward at its first PyTorch
        # compute op; RecordFunction (the operator observer) also sees the ops the mode cannot and
        # is judged when the forward returns. Verify only: a timed call pays one check per extension
        # call (guard.call_observed).
        observer = guard.OperatorObserver(self.violations)
        self.audit.armed = True
        observer.start()
        try:
            with torch.no_grad(), guard.ForwardFunctionGuard(self.violations), dispatch:
                out = self.model(*inputs)
        finally:
            self.audit.armed = False
            observer.stop(self.extension_calls)
        outs = as_output_list(out)
        for o in outs:
            if type(o) is not torch.Tensor:
                self.violations.add("lazy_or_subclassed_output", f"output of type {type(o).__name__}")
                raise guard.ViolationRaised("output is not a torch.Tensor")
        # What a caller ordered after forward on the current stream sees, then what is there later.
        # Copies on the device, ordered on the current stream like any consumer's: no gigabytes
        # through the host for a large task.
        seen = [o.clone() for o in outs]
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        else:
            time.sleep(0.02)
        later = [o.clone() for o in outs]  # kept whole: verify compares every element again at its end
        for a, b in zip(seen, later):
            if not same_values(a, b):
                name = "side_stream" if self.device.type == "cuda" else "background_thread"
                self.violations.add(name, "the output changed after forward returned")
        alive = [t for t in threading.enumerate() if t not in py_threads and t.is_alive()]
        if alive:
            self.violations.add("background_thread", f"thread {alive[0].name} still running after forward")
        if self.device.type == "cpu":  # the CUDA driver starts helper threads lazily
            # torch's pool was started before load (prepare): a thread the first call leaves
            # behind is the candidate's as much as a later call's.
            lingering = guard.os_thread_ids() - os_threads
            if lingering:
                self.violations.add("background_thread", f"{len(lingering)} OS thread(s) started in forward still alive")
        for x, snap in zip(inputs, snapshots):
            if snap is not None and not same_values(x.detach(), snap):
                self.violations.add("input_mutation", "an input's values changed in forward")
        poisoned_spans = [storage_span(t) for t in dispatch.allocated]
        flags = []
        for o in outs:
            if o.device != self.device or o.layout != torch.strided or o.is_meta or o.is_nested:
                self.violations.add("lazy_or_subclassed_output", f"output on {o.device} / {o.layout}")
            span = storage_span(o)
            if any(overlaps(span, s) for s in input_spans):
                self.violations.add("output_aliases_input", "the output shares memory with an input")
            if any(overlaps(span, s) for s in self.output_storages):
                self.violations.add("output_buffer_reused", "this output's memory was returned by an earlier call")
            if self.extension_calls and not any(overlaps(span, s) for s in self.extension_storages):
                self.violations.add("output_not_from_kernel", "no extension call returned or received the output")
            flags.append(any(overlaps(span, s) for s in poisoned_spans))
        for o in outs:
            self.output_storages.append(storage_span(o))
        self.kept_outputs.append(outs)  # alive, so a later call cannot be handed the same memory
        if self.extension_calls == 0:
            self.violations.add("kernel_not_called", "forward called no function of cuda_extension")
        for violation, name in guard.new_forbidden_modules(modules_before):
            self.violations.add(violation, f"imported {name}")
        if guard.dynamo_frames() != self.dynamo_frames:
            self.violations.add("torch_compile_fallback", "TorchDynamo compiled a frame during forward")
        self._check_identity("after forward")
        return outs, flags, later

    # --- verify --------------------------------------------------------------------------------
    def draw(self, req):
        """The job's input sets, drawn here from its seeds; their fingerprints go back to be
        compared with the reference's before anything runs on them."""
        self._check_hooks("before drawing inputs", tables=False)
        self.sets = [self._draw(seed) for seed in req["seeds"]]
        return {"fingerprints": [task_inputs.fingerprint(values) for values in self.sets]}

    def verify(self, req):
        sets, self.sets = self.sets, None
        if sets is None:
            raise RuntimeError("verify before draw")
        poisoned, settled = [], []
        buffers = None
        for i, values in enumerate(sets):
            if i < max(1, len(sets) - 2):
                buffers = timing.clone_inputs(values)
            else:  # the same buffers, new values: a result cached by address shows up stale
                with torch.no_grad():
                    if self.device.type == "cuda" and i == len(sets) - 1:
                        torch.cuda._sleep(50_000_000)  # the new values land late, in stream order
                    for b, v in zip(buffers, values):
                        if isinstance(b, torch.Tensor):
                            b.copy_(v)
            late = self.device.type == "cuda" and i == len(sets) - 1 and i > 0
            outs, flags, copies = self.guarded_call(buffers, settle=not late)
            poisoned.append(flags)
            settled.append(copies)
        self._check_hooks("after verify")
        # Each output as it was once its call had settled: one filled in later (a callback that
        # fires as guarded_call's guard goes away, a thread) would be read back right.
        verified = self.kept_outputs[-len(sets):]
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        for i, (outs, copies) in enumerate(zip(verified, settled)):
            if any(not same_values(o, c) for o, c in zip(outs, copies)):
                self.violations.add("background_thread", f"input set {i}: the output changed after its call's checks")
                raise guard.ViolationRaised("an output changed after its call's checks")
        # Outputs are read back only now: one overwritten by a later call is caught as wrong.
        outputs = [self.exchange.put_outputs(outs) for outs in verified]
        return {"outputs": outputs, "poisoned": poisoned}

    def release(self):
        """Drops the tensors this process holds, shared ones included, before it exits: torch
        warns at exit about CUDA memory still shared out, even where the worker let go long ago."""
        self.kept_outputs, self.timing_inputs, self.sets = [], None, None
        if self.device is not None and self.device.type == "cuda":
            gc.collect()
            _ipc_collect()

    def _draw(self, seed):
        if self.task is None:
            raise RuntimeError("inputs asked for before the candidate was loaded")
        with torch.no_grad():
            return task_inputs.draw(self.task, int(seed), self.device)

    # --- time ----------------------------------------------------------------------------------
    def time(self, req):
        """Warm-up and timed runs on the set drawn from req's seed, kept for the requests that
        follow without one. The worker gives every timed run a seed of its own and compares
        each one's output (evaluator.timed_runs)."""
        # Modes and trace hooks are cheap to look for before each set; the dispatch tables after
        # the runs (a kernel registered by a timed forward is caught on that request's reply).
        self._check_hooks("before a timed run", tables=False)
        # The collector stays off from here until the runs end, so no code hung on garbage in
        # cycles (a finalizer, a weakref callback) runs between the draw and the clock, where it
        # could compute each run's result ahead of it. The old set goes before the new one is
        # drawn: what hangs on its release runs then, before the new set exists.
        gc.disable()
        try:
            if "seed" in req:  # kept for the requests that follow without one
                self.timing_inputs = None
                self.timing_inputs = self._draw(req["seed"])
            if self.timing_inputs is None:
                raise RuntimeError("a time request before any inputs")
            return self._time_runs(req, self.timing_inputs)
        finally:
            gc.enable()

    def _time_runs(self, req, inputs):
        samples, timed = [], []  # timed: each run's outputs and their copies at its clock's end
        for _ in range(int(req.get("warmup", 0))):
            self.timer.time_once(self.model, inputs)
        threads_before = set(threading.enumerate())
        for _ in range(int(req["runs"])):
            self.extension_calls = 0
            self.extension_storages = []
            # The worker's clock too; the output is captured before the timer lets anything go.
            ms, _, captured = self.timer.time_once(self.model, inputs, self.clock, at_clock=self._at_clock)
            samples.append(ms)
            # What the clock's end saw, compared below with what is there later: a forward that
            # returned before its work was done (a host thread, a launch after the clock) and
            # finished it after the clock shows up as an output that changed.
            timed.append(captured)
        if [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]:
            self.violations.add("background_thread", "a thread outlived a timed run")
        self._check_identity("after timing")
        self._check_hooks("after timing")
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        for outs, at_clock in timed:
            if any(not same_values(o, c) for o, c in zip(outs, at_clock)):
                name = "side_stream" if self.device.type == "cuda" else "background_thread"
                self.violations.add(name, "a timed run's output changed after its clock stopped")
                raise guard.ViolationRaised("a timed run's output changed after its clock stopped")
        # A tuple made before this frame's outputs die: a callback hung on one cannot edit it.
        reply = {"samples_ms": tuple(samples)}
        if req.get("return_output") and timed:
            reply["output"] = self.exchange.put_outputs(timed[-1][0])
        return reply

    def _at_clock(self, out, args):
        """A timed run's outputs and their copies, taken as soon as the clock has stopped. Until
        here the candidate could have left code to run after its clock: a handler of a signal that
        a read of the output or a timer raises, a thread of its own, an output object whose methods
        compute. So first the hooks (native signal handlers and timers included), the threads, and
        each output's type, exactly, before any method of it is called, and where its memory came
        from (verify's cheap storage checks: no operator is observed here, so an output computed
        with torch must at least not be the timer's input clone or memory no kernel touched); then
        the copies, while Timer.time_once still holds everything forward received."""
        if self.device.type == "cpu":  # the CUDA driver starts helper threads lazily
            # First, and cheap: a thread that finishes the work after DONE may end any moment.
            started = guard.os_thread_ids() - self.threads_before_load
            if started:
                self.violations.add("background_thread", f"{len(started)} OS thread(s) of the candidate alive "
                                                         "when a timed run's clock stopped")
                raise guard.ViolationRaised("an OS thread of the candidate outlived a timed run's clock")
        self._check_hooks("when a timed run's clock stopped", tables=False)
        outs = as_output_list(out)
        for o in outs:
            if type(o) is not torch.Tensor:
                self.violations.add("lazy_or_subclassed_output", f"a timed run's output of type {type(o).__name__}")
                raise guard.ViolationRaised("a timed run's output is not a torch.Tensor")
            if o.device != self.device or o.layout != torch.strided or o.is_meta or o.is_nested:
                self.violations.add("lazy_or_subclassed_output", f"a timed run's output on {o.device} / {o.layout}")
                raise guard.ViolationRaised("a timed run's output is not a dense tensor on the task's device")
        if self.extension_calls == 0:  # verify's guards do not run here: the kernel must, at least
            self.violations.add("kernel_not_called", "a timed run called no function of cuda_extension")
            raise guard.ViolationRaised("a timed run called no function of cuda_extension")
        input_spans = [storage_span(a) for a in args if type(a) is torch.Tensor]
        for o in outs:
            span = storage_span(o)
            if any(overlaps(span, s) for s in input_spans):
                self.violations.add("output_aliases_input", "a timed run's output shares memory with its input")
                raise guard.ViolationRaised("a timed run's output shares memory with its input")
            if not any(overlaps(span, s) for s in self.extension_storages):
                self.violations.add("output_not_from_kernel", "no extension call of a timed run returned or "
                                                              "received its output")
                raise guard.ViolationRaised("a timed run's output came from no extension call")
        return outs, [o.clone() for o in outs]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cmd-fd", type=int, required=True)
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--violations-fd", type=int, default=-1)
    parser.add_argument("--clock-fd", type=int, default=-1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    cmd_fd, reply_fd, violations_fd = args.cmd_fd, args.reply_fd, args.violations_fd
    os.dup2(2, 1)  # the candidate's prints go to the log, never into the reply channel
    sys.stdout = sys.stderr
    # Started ahead of its job: bring up CUDA and the guards now, then say so.
    if args.device.startswith("cuda"):
        try:
            torch.empty(1, device=args.device)
        except Exception:
            pass  # load tries again and reports the failure
    guard.warm_up_guards()
    # Everything the loop below trusts is bound here, before any candidate code runs: names in
    # this frame are out of the candidate's reach. The channel is read and written with C functions
    # only. Every call that can run Python code goes through operator.call, so that it runs in a
    # deeper C frame than this one: the worker accepts a reply only once the main thread is blocked
    # in this frame's read again, at the stack pointer of its first (candidate_process.LoopWatch),
    # and no candidate code can block there. The harness's state is checked by identity after
    # every request (guard.IdentitySnapshot): the checker's own parts first, then the snapshot.
    call, format_exc, violation_raised, stderr = operator.call, traceback.format_exc, guard.ViolationRaised, sys.stderr
    os_read, os_write, os_fstat, os_exit = os.read, os.write, os.fstat, os._exit
    ioctl, fionread, fcntl_ = fcntl.ioctl, termios.FIONREAD, fcntl.fcntl
    frame_length = struct.Struct(">Q")
    pack_length, unpack_length, unpack_count = frame_length.pack, frame_length.unpack, struct.Struct("i").unpack
    pack, unpackb, ext_type = msgpack.Packer(use_bin_type=True).pack, msgpack.unpackb, msgpack.ExtType
    getattr_, type_, dict_type, dict_get, dict_ = getattr, type, dict, dict.get, dict
    base_exception, str_, sorted_, len_, min_, memoryview_ = BaseException, str, sorted, len, min, memoryview
    cuda_ready, cuda_synchronize = torch.cuda.is_initialized, torch.cuda.synchronize
    tampered_status, max_frame = framing.EXIT_CHANNEL_TAMPERED, framing.MAX_WIDE_FRAME
    stat = os_fstat(cmd_fd)
    cmd_file = (stat.st_dev, stat.st_ino)
    stat = os_fstat(reply_fd)
    reply_file = (stat.st_dev, stat.st_ino)
    if violations_fd >= 0:
        fcntl_(violations_fd, fcntl.F_SETFL, fcntl_(violations_fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        stat = os_fstat(violations_fd)
    violations_file = (stat.st_dev, stat.st_ino) if violations_fd >= 0 else None
    read_header = (cmd_fd, 8)
    reply_room = fcntl_(reply_fd, _F_GETPIPE_SZ) - 8  # the worker reads a reply only once it is whole
    # glibc's read() takes another code path, at another stack pointer, once a process has had a
    # second thread, and never goes back: one thread now, so that the read LoopWatch records
    # before any candidate code is the one every later request is read with. (A child that was
    # single-threaded at its ready frame had every load of an honest candidate taken for forged.)
    starter = threading.Thread(target=int)
    starter.start()
    starter.join()
    identity = guard.IdentitySnapshot()
    runner = Runner(identity, args.clock_fd)
    violations = runner.violations
    if violations_fd >= 0:
        violations.channel = violations_fd
    changed, missing = guard.IdentitySnapshot.changed, guard.MISSING
    baseline = identity.record()
    handlers = {"load": runner.load, "draw": runner.draw, "verify": runner.verify, "time": runner.time}
    # A tuple, so that code reaching this frame cannot edit it; the handlers are in it too, so
    # that one wrapped in the dict (to rewrite what a request returns) is found.
    checker = tuple(identity.checker_parts()) + tuple((handlers, name, fn) for name, fn in handlers.items())
    reply, op = {"ready": True}, "start"
    while True:
        # The reply, written only into the channel the worker gave, and only while nothing else was
        # written into it: else no reply at all, and the worker finds this exit status.
        try:
            payload = pack(reply)
        except base_exception:
            payload = pack({"ok": False, "error": f"the reply to {op} could not be packed",
                            "violations": {"monkeypatch": f"the reply to {op} held what msgpack cannot carry"}})
        if len_(payload) > reply_room:
            payload = pack({"ok": False, "error": f"the reply to {op} is over {reply_room} bytes", "violations": {}})
        data = memoryview_(pack_length(len_(payload)) + payload)
        stat = os_fstat(reply_fd)
        if (stat.st_dev, stat.st_ino) != reply_file or unpack_count(ioctl(reply_fd, fionread, b"\0\0\0\0"))[0]:
            os_exit(tampered_status)
        if violations_file is not None:  # the violations' pipe closed or replaced: nothing sent is sure
            try:
                stat = os_fstat(violations_fd)
            except base_exception:
                os_exit(tampered_status)
            if (stat.st_dev, stat.st_ino) != violations_file:
                os_exit(tampered_status)
        while data:
            data = data[os_write(reply_fd, data):]
        stat = os_fstat(reply_fd)
        if (stat.st_dev, stat.st_ino) != reply_file:
            os_exit(tampered_status)
        # The next request: its header's read is the one LoopWatch waits at.
        stat = os_fstat(cmd_fd)
        if (stat.st_dev, stat.st_ino) != cmd_file:
            os_exit(tampered_status)
        header = os_read(*read_header)  # CALL_FUNCTION_EX: never specialized, the same C path every time
        while header and len_(header) < 8:
            more = os_read(cmd_fd, 8 - len_(header))
            header = header + more if more else b""
        length = unpack_length(header)[0] if header else 0
        if length > max_frame:
            return 2  # not the worker's: it never writes such a frame
        body = b""
        while header and len_(body) < length:
            more = os_read(cmd_fd, min_(length - len_(body), 1 << 20))
            if not more:
                header = b""
            body += more
        req = unpackb(body, raw=False, strict_map_key=False, object_hook=None, list_hook=None,
                      object_pairs_hook=None, ext_hook=ext_type) if header else {"op": "exit"}
        op = req.get("op") if type_(req) is dict_type else None
        if op == "exit":  # or the channel closed
            call(runner.release)
            return 0
        reply = {"ok": True, "error": None}
        try:
            if op == "load":  # the snapshot takes in the runner's timer and guards before the import
                call(runner.prepare, req)
                baseline = call(identity.record)
            reply.update(call(handlers[op], req))
        except violation_raised as e:
            reply.update(ok=False, error=f"violation: {e}")
        except base_exception as e:  # the candidate's failure, reported, never fatal to the harness
            try:
                stderr.write(call(format_exc, 4))
                reply.update(ok=False, error=f"{type_(e).__name__}: {str_(e)[:400]}")
            except base_exception:
                reply.update(ok=False, error="an exception that could not be printed")
        found = dict_(violations.found)
        try:
            # Nothing this process queued on the GPU runs on into the worker's own timing.
            if call(cuda_ready):
                call(cuda_synchronize)
        except base_exception as e:
            reply.update(ok=False, error=reply["error"] or f"{type_(e).__name__}: {str_(e)[:400]}")
        try:
            tampered = [key for owner, key, expected in checker
                        if (dict_get(owner, key, missing) if type_(owner) is dict_type
                            else getattr_(owner, key, missing)) is not expected]
            if not tampered:
                tampered = call(changed, identity, baseline)
        except base_exception as e:
            tampered = [f"the identity check ({type_(e).__name__})"]
        if tampered:
            found.setdefault("monkeypatch", f"{', '.join(sorted_(tampered)[:5])} replaced (after {op})")
        reply["violations"] = found


if __name__ == "__main__":
    sys.exit(main())
