"""The trusted side of one evaluation: the reference, the comparison, the baselines, the reward.

Runs inside the worker. The candidate runs in a child (candidate_process.py, candidate_runner.py)
started here for each job, with its own interpreter, resource limits and a deadline; a child that crashes, hangs or
exhausts memory ends its job with r = -1 and a reason and leaves the worker intact.
"""
import contextlib
import hashlib
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time

import torch

from harness import native_code, reward, task_inputs, timing, wire
from harness.candidate_process import CandidateFailure, CandidateProcess

# A measurement whose spread (coefficient of variation, eager, compile or candidate) is above
# max_cv (judging_parameters) is taken again on new input sets, at most MEASUREMENTS times in all, and once
# more where the last of them rejected a cached baseline (its torch.compile is then measured afresh); if it
# stays above, the record says timing.reliable = false and the candidate earns no speed milestone (r = 1).
MEASUREMENTS = 3
# A cached torch.compile baseline is used only while this job's own eager median lies within
# this fraction of the eager median cached beside it; otherwise both baselines are measured
# again in this job ("remeasured") and the cache is rewritten. Eager is always measured fresh:
# its outputs are the references the timed runs are compared with.
BASELINE_TOLERANCE = 0.15


class TaskError(Exception):
    """The task itself is broken: it does not import, lacks Model, get_inputs or
    get_init_inputs, or its reference does not run. Raised only before the candidate's code is
    loaded, so nothing a candidate does can raise it; the C++ side makes it an infrastructure
    failure (the episode is not scored), never the candidate's r = -1."""

def timed_seed():
    """A timed input set's seed, which the candidate learns only with its timed run's request."""
    return int.from_bytes(os.urandom(4), "little") % (1 << 30) + 1


def timing_quality(baseline="", age_s=math.nan, measurements=0, reliable=False, profile=None):
    """messages.hpp timing_quality."""
    cv = {k: (profile[k]["cv"] if profile else math.nan) for k in ("eager", "compiled", "candidate")}
    return {"baseline": baseline, "baseline_age_s": age_s, "cv_eager": cv["eager"],
            "cv_compile": cv["compiled"], "cv_new": cv["candidate"], "measurements": measurements,
            "reliable": reliable}


class Task:
    def __init__(self, path):
        self.path = os.path.realpath(path)
        with open(self.path, "rb") as f:
            source = f.read()
        self.digest = hashlib.sha256(source).hexdigest()
        spec = importlib.util.spec_from_file_location(f"_task_{self.digest[:16]}", self.path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(module, name):
                raise ValueError(f"{path} defines no {name} (the task format needs Model, get_inputs, get_init_inputs)")
        self.module = module
        self.compiled = {}  # device -> (model, compiled) for timing


def device_descriptor(device):
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model} x{os.cpu_count()} threads={torch.get_num_threads()}"


def rms(t):
    """Root mean square of t's values, NaN counted as 0 (compare names NaN on its own)."""
    return torch.linalg.vector_norm(t.nan_to_num(0, posinf=0, neginf=0)).item() / math.sqrt(max(1, t.numel()))


def compare(out, ref, atol, rtol):
    """None when out matches ref, else why not."""
    if len(out) != len(ref):
        return f"{len(out)} outputs, expected {len(ref)}"
    for k, (o, r) in enumerate(zip(out, ref)):
        if not isinstance(o, torch.Tensor):
            return f"output {k} is not a tensor"
        o = o.to(r.device)
        if o.shape != r.shape:
            return f"output {k} has shape {tuple(o.shape)}, expected {tuple(r.shape)}"
        if o.dtype != r.dtype:
            return f"output {k} has dtype {o.dtype}, expected {r.dtype}"
        if r.dtype.is_floating_point:
            # allclose with equal_nan fails on NaN against a number; the cause is named after.
            if not torch.allclose(o, r, atol=atol, rtol=rtol, equal_nan=True):
                if not torch.equal(torch.isnan(o), torch.isnan(r)):
                    return f"output {k} has NaN where the reference has none (or the reverse)"
                diff = (o.double() - r.double()).abs().nan_to_num(0).max().item()
                return f"output {k} differs from the reference (max abs diff {diff:.4g}, atol={atol}, rtol={rtol})"
            # allclose's atol is absolute: where every reference value lies below it (a softmax over
            # 16384 columns) zeros pass it. So the error taken whole must also be small beside the
            # reference: its root mean square within rtol of the reference's, plus atol / 1000.
            rms_error, rms_ref = rms(o.double() - r.double()), rms(r.double())
            if rms_error > rtol * rms_ref + atol * 1e-3:
                return (f"output {k} differs from the reference as a whole (rms error {rms_error:.4g} against "
                        f"the reference's rms {rms_ref:.4g}, rtol={rtol})")
        elif not torch.equal(o, r):
            return f"output {k} differs from the reference"
    return None


class PhaseLog:
    """Where a job's time went, phase by phase (the reply's phases_ms; `cuda-agent bench harness`):
    reference (the reference's outputs, while the child starts), start (waiting for the child),
    load, inputs, verify, compare, spare (the next job's child finishing its start), warm_up
    (the first torch.compile of a task among them), timed_runs (the interleaved runs with
    their draws and comparisons) and close (the child's exit). With CUDA_AGENT_HARNESS_PHASES=1
    also one stderr line per phase as it ends, so that a job killed at its deadline still shows
    where its time went."""

    def __init__(self, job_id):
        self.job_id = job_id or "-"
        self.last = time.monotonic()
        self.enabled = os.environ.get("CUDA_AGENT_HARNESS_PHASES") == "1"
        self.ms = {}

    def mark(self, phase):
        now = time.monotonic()
        self.ms[phase] = self.ms.get(phase, 0.0) + 1000 * (now - self.last)
        self.last = now
        if self.enabled:
            sys.stderr.write(f"harness: job {self.job_id}: {phase} {self.ms[phase]:.0f} ms\n")
            sys.stderr.flush()


def bitwise_equal(a, b):
    return len(a) == len(b) and all(
        x.shape == y.shape and torch.equal(torch.nan_to_num(x), torch.nan_to_num(y)) for x, y in zip(a, b))


# On CUDA the worker's span of each run (less its launch pad) counts as on the CPU
# (timing.counted). On an H100 (docs/benchmarks.md, 2026-12-07) honest spans sat 0 to 24 us below
# the child's own samples of 1.4-2 ms, so the bound takes nothing from honest runs there.
# CUDA_AGENT_WORKER_CLOCK_CUDA=0 keeps the span only logged, for a host where it misbehaves.
WORKER_CLOCK_ON_CUDA = os.environ.get("CUDA_AGENT_WORKER_CLOCK_CUDA", "1") != "0"


class Evaluator:
    def __init__(self):
        self.tasks = {}
        self.timers = {}
        self.spare = None  # the next job's child, started during this one
        self.jobs = 0

    def child_for(self, device, memory_limit_mb):
        """This job's child, started ahead during the previous job where it could be, and a spare
        started now for the next one: a child's interpreter, torch, CUDA and guards take seconds
        (8-11 s on the H200 host). Each child still serves exactly one job. A worker's first job
        starts no spare: one that serves a single job (`cuda-agent check`) would waste it."""
        child, self.spare = self.spare, None
        if child is None or not child.fits(device, memory_limit_mb):
            if child is not None:
                child.close()
            child = CandidateProcess(device, memory_limit_mb)
        self.jobs += 1
        if self.jobs > 1:
            self.spare = CandidateProcess(device, memory_limit_mb)
        return child

    def quiet_spare(self, timeout_s=60.0):
        """Waits until the spare has started, so that it does not compete with the timed runs."""
        if self.spare is None:
            return
        try:
            self.spare.await_ready(time.monotonic() + timeout_s)
        except CandidateFailure:
            self.spare.close()
            self.spare = None

    def close(self):
        if self.spare is not None:
            self.spare.close()
            self.spare = None

    def task(self, path):
        """The loaded task at path; TaskError where it cannot be read or imported or lacks a name."""
        try:
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            key = (os.path.realpath(path), digest)
            if key not in self.tasks:
                self.tasks[key] = Task(path)
            return self.tasks[key]
        except Exception as e:
            raise TaskError(f"task {path}: {type(e).__name__}: {e}") from e

    def check_task(self, req):
        """The `task` op: the task loads; with `reference` also its Model is built and its
        forward runs on one input set on the device. TaskError where not."""
        task = self.task(req["task_path"])
        if req.get("reference"):
            device = req.get("device") or "cpu"
            if device.startswith("cuda") and not torch.cuda.is_available():
                raise TaskError(f"task {task.path}: device {device} requested but torch sees no GPU")
            self.reference_of(task, device, int(req.get("seed") or 1), 1)

    def timer(self, device):
        if device not in self.timers:
            self.timers[device] = timing.Timer(device)
        return self.timers[device]

    # --- the reference -------------------------------------------------------------------------
    def reference(self, task, device, seed, input_sets):
        """The model, its weights and, per input set, the seed, the fingerprint of the inputs and
        the reference outputs (on the device: compared there). Only the first set's inputs are
        kept, for the warm-up runs; the child draws its own from the seeds (task_inputs)."""
        m = task.module
        torch.manual_seed(seed)
        init_inputs = m.get_init_inputs()
        model = m.Model(*init_inputs).to(device).eval()
        state_dict = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        seeds, prints, refs, first = [], [], [], None
        for i in range(input_sets):
            seeds.append(task_inputs.set_seed(seed, i))
            generated = task_inputs.draw(m, seeds[-1], device)
            prints.append(task_inputs.fingerprint(generated))
            if i == 0:
                first = generated
            with torch.no_grad():
                out = model(*generated)
            refs.append([o.detach().clone() for o in as_outputs(out)])
        return model, init_inputs, state_dict, seeds, prints, first, refs

    def reference_of(self, task, device, seed, input_sets):
        """reference(), its failures a TaskError: the parent computes it before the candidate's
        code is loaded anywhere, so a failure here is the task's (or the installation's)."""
        try:
            return self.reference(task, device, seed, input_sets)
        except Exception as e:
            raise TaskError(f"task {task.path}: its reference failed: {type(e).__name__}: {e}") from e

    # --- one job -------------------------------------------------------------------------------
    def run(self, req, want_profile=True):
        o = wire.job_options(req)
        started = time.monotonic()
        record = {"episode_id": o.get("episode_id", ""), "job_id": o.get("job_id", ""),
                  "compiled": True, "correct": False, "violations": [], "reward": -1,
                  "t_eager_ms": math.nan, "t_compile_ms": math.nan, "t_new_ms": math.nan,
                  "speedup_eager": math.nan, "speedup_compile": math.nan, "error": "",
                  "timing": timing_quality()}
        profile = {"job_id": record["job_id"], "eager": timing.stats([]), "compiled": timing.stats([]),
                   "candidate": timing.stats([]), "error": ""}
        device = o["device"]
        if device == "cpu" and not int(o["cpu_threads"]) and o["timing_cpus"]:
            o["cpu_threads"] = len(o["timing_cpus"])  # as many threads as the timed runs hold cores
        if device == "cpu" and int(o["cpu_threads"]) > 0:
            torch.set_num_threads(int(o["cpu_threads"]))  # the same count here and in the child
        task = self.task(o["task_path"])  # before anything of the candidate's runs: TaskError
        seed = int(o["seed"]) or int.from_bytes(os.urandom(4), "little") % (1 << 30) + 1
        phases = PhaseLog(record["job_id"])
        # The child comes first: its interpreter, torch and CUDA come up while the reference runs
        # (or came up during the previous job).
        child = self.child_for(device, o["memory_limit_mb"])
        try:
            model, init_inputs, state_dict, seeds, prints, first_inputs, refs = self.reference_of(
                task, device, seed, int(o["input_sets"]))
        except BaseException:
            child.close()
            raise
        phases.mark("reference")

        module_path = o["module_path"]
        module_dir = module_path if os.path.isdir(module_path) else os.path.dirname(module_path)
        violations = {}
        try:
            # The extension's native code, judged by its symbols before anything of it runs: ATen
            # compute it imports, and the switches that would hide it from the child's observers.
            refused = native_code.check_module_dir(module_dir)
            if refused:
                violations.update(refused)
                raise CandidateFailure("the extension's native code was refused before it was loaded: " +
                                       "; ".join(f"{k}: {v}" for k, v in sorted(refused.items())))
            deadline = time.monotonic() + float(o["candidate_timeout_s"])
            child.await_ready(deadline)
            phases.mark("start")
            reply = child.request({"op": "load", "device": device, "cpu_threads": int(o["cpu_threads"]), "solution_dir": o["solution_dir"],
                                   "module_dir": module_dir, "task_path": task.path,
                                   "exchange_dir": child.exchange.directory,
                                   "init_inputs": child.put(list(init_inputs), "init"),
                                   "state_dict": child.put(state_dict, "state"),
                                   "allowed_write_dirs": []}, deadline)
            violations.update(reply.get("violations") or {})
            if not reply["ok"]:
                raise CandidateFailure(f"loading the candidate failed: {reply['error']}")
            phases.mark("load")
            reply = child.request({"op": "draw", "seeds": seeds}, deadline)
            violations.update(reply.get("violations") or {})
            if not reply["ok"]:
                raise CandidateFailure(f"drawing the inputs failed: {reply['error']}")
            drawn = reply.get("fingerprints")
            for i, ours in enumerate(prints):
                differs = task_inputs.difference(ours, drawn[i] if isinstance(drawn, list) and i < len(drawn) else None)
                if differs:
                    raise CandidateFailure(
                        f"input set {i} came out different in the candidate's process ({differs}): "
                        "get_inputs() must draw only from torch's or Python's seeded generator, and "
                        "the candidate must not change torch's generator or defaults")
            phases.mark("inputs")
            reply = child.request({"op": "verify"}, deadline)
            violations.update(reply.get("violations") or {})
            if not reply["ok"]:
                raise CandidateFailure(f"forward failed: {reply['error']}")
            outputs = [child.take(name) for name in reply["outputs"]]
            phases.mark("verify")
            error = self.judge(outputs, refs, reply["poisoned"], violations, o, device)
            del outputs  # on CUDA they map the child's memory: let go of it while the child lives
            phases.mark("compare")
            if error is None and not violations and want_profile:
                if device != "cpu" or not o["timing_cpus"]:  # held cores: the spare starts beside them
                    self.quiet_spare()
                    phases.mark("spare")
                record["timing"] = self.profile(task, model, first_inputs, seeds[0], child, o, profile,
                                                violations, device, phases)
            record["correct"] = error is None and not violations
            record["error"] = error or ""
        except CandidateFailure as e:
            record["error"] = str(e)
            if e.violation:
                violations.setdefault(*e.violation)
        finally:
            child.close()
            phases.mark("close")
        if violations:
            record["correct"] = False
            if not record["error"]:
                record["error"] = "; ".join(f"{k}: {v}" for k, v in sorted(violations.items()))
        record["violations"] = sorted(violations)
        if profile["error"] and not record["error"]:
            record["error"] = profile["error"]
            record["correct"] = False
        if record["correct"]:
            t_new = profile["candidate"]["median_ms"]
            t_eager = profile["eager"]["median_ms"]
            t_compile = profile["compiled"]["median_ms"]
            record.update(t_new_ms=t_new, t_eager_ms=t_eager, t_compile_ms=t_compile)
            if t_new > 0:
                record["speedup_eager"] = t_eager / t_new
                record["speedup_compile"] = t_compile / t_new
        # Speed is rewarded only where it was measured steadily (timing.reliable).
        t_new = record["t_new_ms"] if record["timing"]["reliable"] else math.nan
        record["reward"] = reward.milestone_reward(record["correct"], t_new, record["t_eager_ms"],
                                                   record["t_compile_ms"])
        verify = {"job_id": record["job_id"], "correct": record["correct"], "violations": record["violations"],
                  "error": record["error"], "duration_ms": (time.monotonic() - started) * 1e3}
        return record, verify, profile, phases.ms

    def judge(self, outputs, refs, poisoned, violations, o, device):
        atol, rtol = float(o["atol"]), float(o["rtol"])
        first_error = None
        n = len(refs)
        if len(outputs) != n or len(poisoned) != n:  # zip below would judge only the first sets
            return f"{len(outputs)} output sets came back for {n} input sets"
        wrong = []
        for i, (out, ref) in enumerate(zip(outputs, refs)):
            err = compare(out, ref, atol, rtol)
            if err is None:
                continue
            wrong.append(i)
            first_error = first_error or f"input set {i}: {err}"
            nan_poison = any(poisoned[i][k] and torch.isnan(out[k]).any() and not torch.isnan(ref[k]).any()
                             for k in range(min(len(out), len(ref))) if out[k].dtype.is_floating_point)
            if nan_poison:
                violations.setdefault("output_memory_reuse", f"input set {i}: output holds never-written memory")
            if i > 0 and i >= n - 2 and bitwise_equal(out, outputs[i - 1]) and not bitwise_equal(ref, refs[i - 1]):
                violations.setdefault("cached_result", f"input set {i}: the previous call's result came back for new input values")
        if device.startswith("cuda") and wrong == [n - 1] and n > 1:
            violations.setdefault("side_stream", "only the call whose inputs arrived late in stream order was wrong")
        return first_error

    # --- timing --------------------------------------------------------------------------------
    def baseline_path(self, task, o, device):
        cache_dir = o.get("baseline_cache_dir") or ""
        if not cache_dir:
            return None
        key = "|".join([task.digest, device_descriptor(device), torch.__version__, str(o["warmup_runs"]),
                        str(o["timed_runs"]), str(o["compile_mode"])])
        return os.path.join(cache_dir, hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")

    @staticmethod
    def read_baseline(path, max_age_s):
        """The cached baselines and their age, or None where there are none usable."""
        if not path or not os.path.exists(path):
            return None
        age = time.time() - os.path.getmtime(path)
        if age >= max_age_s:
            return None
        try:
            with open(path) as f:
                cached = json.load(f)
            eager, compiled = [float(x) for x in cached["eager"]], [float(x) for x in cached["compiled"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None  # torn or foreign: measured again and rewritten
        if not eager or not compiled:
            return None
        return {"eager": eager, "compiled": compiled, "age_s": age}

    @staticmethod
    def write_baseline(path, eager, compiled, task, device):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + f".{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"eager": eager, "compiled": compiled, "device": device_descriptor(device),
                       "torch": torch.__version__, "task": task.digest}, f)
        os.replace(tmp, path)

    def compiled_model(self, task, model, device, o):
        if device not in task.compiled:
            mode = None if o["compile_mode"] == "default" else o["compile_mode"]
            task.compiled[device] = torch.compile(model, mode=mode)
        return task.compiled[device]

    def profile(self, task, model, warmup_inputs, warmup_seed, child, o, profile, violations, device, phases):
        """Times eager, torch.compile and the candidate, interleaved, each timed run on an input
        set of its own that all three see; returns the record's timing_quality."""
        path = self.baseline_path(task, o, device)
        cached = self.read_baseline(path, float(o["baseline_max_age_s"]))
        cpus = [int(c) for c in o["timing_cpus"] or []] if device == "cpu" else []
        with timing.held_cores(cpus, child.proc.pid):
            return self._profile(task, model, warmup_inputs, warmup_seed, child, o, profile, violations,
                                 device, phases, path, cached)

    def _profile(self, task, model, warmup_inputs, warmup_seed, child, o, profile, violations, device,
                 phases, path, cached):
        warmup, runs = int(o["warmup_runs"]), max(1, int(o["timed_runs"]))
        budget = float(o["candidate_timeout_s"])
        timer = self.timer(device)
        baseline = "cached" if cached else "fresh"
        reply = child.request({"op": "time", "seed": warmup_seed, "warmup": warmup, "runs": 0},
                              time.monotonic() + budget)
        self._check_time_reply(reply, violations)
        for _ in range(warmup):
            timer.time_once(model, warmup_inputs)
        phases.mark("warm_up")
        measurements = 0
        while True:
            compiled_fn = None
            if cached is None:
                compiled_fn = self.compiled_model(task, model, device, o)
                for _ in range(warmup):
                    timer.time_once(compiled_fn, warmup_inputs)
                phases.mark("warm_up")
            # Drawn afresh, not derived from the job's seed: a candidate that found the warm-up's
            # seed in its memory could otherwise compute every timed set's output before the clock.
            seeds = [timed_seed() for _ in range(runs)]
            measurements += 1
            try:
                eager, compiled, candidate = self.timed_runs(task, model, compiled_fn, child, seeds, o,
                                                             violations, device)
            except TimedRunWrong as e:
                phases.mark("timed_runs")
                profile["error"] = str(e)
                return timing_quality(baseline, cached["age_s"] if cached else math.nan, measurements)
            if cached is not None:
                fresh, then = statistics.median(eager), statistics.median(cached["eager"])
                if abs(fresh - then) > BASELINE_TOLERANCE * then:
                    sys.stderr.write(f"harness: cached eager median {then:.4g} ms, {fresh:.4g} ms in this job: "
                                     "both baselines measured again\n")
                    cached, baseline = None, "remeasured"
                    with contextlib.suppress(OSError):  # never read again, even if no steady one replaces it
                        os.remove(path)
                    phases.mark("timed_runs")
                    continue
                compiled = cached["compiled"]
            for key, samples in (("eager", eager), ("compiled", compiled), ("candidate", candidate)):
                profile[key] = timing.stats(samples)
            reliable = all(profile[k]["cv"] <= float(o["max_cv"]) for k in ("eager", "compiled", "candidate"))
            phases.mark("timed_runs")
            if reliable or measurements >= MEASUREMENTS:
                break
        if reliable and path and cached is None:
            self.write_baseline(path, eager, compiled, task, device)
        return timing_quality(baseline, cached["age_s"] if cached else 0.0, measurements, reliable, profile)

    def timed_runs(self, task, model, compiled_fn, child, seeds, o, violations, device):
        """One measurement: per seed, the set drawn outside the timed region, eager timed on it
        (its output is the reference), torch.compile (unless cached) and the candidate's run,
        whose output must match. One set and its outputs are held at a time, whatever the size."""
        timer, budget = self.timer(device), float(o["candidate_timeout_s"])
        atol, rtol = float(o["atol"]), float(o["rtol"])
        eager, compiled, candidate = [], [], []
        worker = []  # the worker's own time of each of the candidate's runs (timing.counted)
        previous = None  # fingerprints of the last run's expected and candidate outputs
        # On CPU each timed call follows an untimed one on a throwaway set, in the same process:
        # the other process's run between them had evicted the caller's code, allocator and
        # output lines from the shared core's caches (eager measured up to 2x its plain time).
        # The throwaway set's values say nothing of the timed set's, drawn only after it.
        # On CUDA the L2 is flushed before every timed run instead.
        throwaway = device == "cpu"
        for i, seed in enumerate(seeds):
            if device == "cpu" and timing.wait_quiet(child.proc.pid):
                violations.setdefault("background_thread", "a thread of the candidate still ran after its timed run")
                raise TimedRunWrong("the candidate's process kept running between its timed runs")
            spare = task_inputs.draw(task.module, timed_seed(), device) if throwaway else None
            if throwaway:
                timer.time_once(model, spare)
            inputs = task_inputs.draw(task.module, seed, device)
            ms, expected = timer.time_once(model, inputs)
            eager.append(ms)
            expected = as_outputs(expected)
            if compiled_fn is not None:
                if throwaway:
                    timer.time_once(compiled_fn, spare)
                compiled.append(timer.time_once(compiled_fn, inputs)[0])
            del inputs, spare
            if throwaway:
                self._check_time_reply(child.request({"op": "time", "seed": timed_seed(), "warmup": 1, "runs": 0},
                                                     time.monotonic() + budget), violations)
            pad_ms = timer.pad_ms()  # on CUDA the worker's span holds a launch pad, spun now
            reply = child.request({"op": "time", "seed": seed, "runs": 1, "return_output": True},
                                  time.monotonic() + budget)
            samples = self._check_time_reply(reply, violations)
            spans = [ms - pad_ms for ms in child.clock_ms()]
            if len(samples) != len(spans):
                raise CandidateFailure(f"the candidate reported {len(samples)} timed runs for {len(spans)} it ran")
            candidate += samples
            worker += spans
            got = child.take(reply["output"])
            error = compare(got, expected, atol, rtol)
            prints = (task_inputs.fingerprint(expected), task_inputs.fingerprint(got))
            del got  # on CUDA it maps the child's memory
            if error:
                if previous and prints[1] == previous[1] and prints[0] != previous[0]:
                    violations.setdefault("cached_result", f"timed run {i}: the previous run's result came back "
                                                           "for new input values")
                raise TimedRunWrong(f"the output of timed run {i} was wrong: {error}")
            previous = prints
        counts = device == "cpu" or WORKER_CLOCK_ON_CUDA
        if device != "cpu":
            sys.stderr.write(f"harness: the worker's spans of the candidate's runs, median {statistics.median(worker):.4g} ms, "
                             f"against its own {statistics.median(candidate):.4g} ms"
                             f"{'' if counts else ' (not counted on CUDA)'}\n")
        return eager, compiled, timing.counted(candidate, worker) if counts else candidate

    @staticmethod
    def _check_time_reply(reply, violations):
        violations.update(reply.get("violations") or {})
        if not reply["ok"]:
            raise CandidateFailure(f"a timed run failed: {reply['error']}")
        return [float(x) for x in reply.get("samples_ms") or []]


class TimedRunWrong(Exception):
    """A timed run's output did not match eager's on the same input set."""


def as_outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]
