"""The trusted side of one evaluation: the reference, the comparison, the baselines, the reward.

Runs inside the worker. The candidate runs in a child (candidate_runner.py) started here for each
job, with its own interpreter, resource limits and a deadline; a child that crashes, hangs or
exhausts memory ends its job with r = -1 and a reason and leaves the worker intact.
"""
import ctypes
import hashlib
import importlib.util
import json
import math
import os
import platform
import resource
import select
import signal
import subprocess
import sys
import time

import torch

from harness import exchange, framing, reward, task_inputs, timing

HARNESS_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # skills/

DEFAULTS = {
    "atol": 1e-2, "rtol": 1e-2, "input_sets": 5, "seed": 0, "warmup_runs": 3, "timed_runs": 20,
    "timeout_s": 120.0, "memory_limit_mb": 16384, "baseline_cache_dir": "", "baseline_max_age_s": 86400.0,
    "compile_mode": "default", "device": "cpu", "cpu_threads": 0,
}


_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def die_with(parent_pid):
    """In a child before exec: be killed when the worker dies. The child runs in a session of its
    own, so a kill of the worker's process group does not reach it, and an orphan spinning in a
    candidate's infinite loop would otherwise live on (holding the worker's stdout open)."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the worker died before the line above
        os._exit(1)


class CandidateFailure(Exception):
    """The candidate's child crashed, hung, or failed a command; the message says which."""


def signal_name(sig):
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


class CandidateProcess:
    """One candidate's child: private command/reply pipes, its own process group, limits. It
    starts in its private exchange directory and moves to the solution's at load, so that it can
    be started ahead of the job it will serve; its first frame says it is ready (torch, CUDA and
    the guards up, no candidate code run yet)."""

    def __init__(self, device, memory_limit_mb, python=sys.executable):
        self.device, self.memory_limit_mb = device, memory_limit_mb
        self.ready = False
        cmd_r, self.cmd_w = os.pipe()
        self.reply_r, reply_w = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = HARNESS_ROOT
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["OMP_WAIT_POLICY"] = "PASSIVE"  # idle pool threads sleep, so lingering work shows
        limit = int(memory_limit_mb) << 20 if device == "cpu" and memory_limit_mb else 0

        self.exchange = exchange.Exchange(exchange.make_directory())
        worker_pid = os.getpid()

        def limits():
            die_with(worker_pid)
            if limit:  # CUDA reserves huge address ranges, so the address-space cap is CPU-only
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        # -P: the working directory is not put on sys.path; load adds the solution's explicitly.
        self.proc = subprocess.Popen(
            [python, "-P", "-m", "harness.candidate_runner", "--cmd-fd", str(cmd_r), "--reply-fd", str(reply_w),
             "--device", device],
            pass_fds=(cmd_r, reply_w), stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(),
            cwd=self.exchange.directory, env=env, start_new_session=True, preexec_fn=limits)
        os.close(cmd_r)
        os.close(reply_w)

    def fits(self, device, memory_limit_mb):
        return (self.device, self.memory_limit_mb) == (device, memory_limit_mb) and self.proc.poll() is None

    def await_ready(self, deadline):
        """Consumes the child's first frame, sent once it has started."""
        if self.ready:
            return
        ready, _, _ = select.select([self.reply_r], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            self.kill()
            raise CandidateFailure("timed out: the candidate's process did not start within its time limit")
        try:
            framing.read_frame(self.reply_r, wide=True)
        except framing.ChannelClosed:
            raise CandidateFailure(self._death("while starting"))
        self.ready = True

    def request(self, msg, deadline):
        self.await_ready(deadline)
        try:
            framing.write_frame(self.cmd_w, msg, wide=True)
        except OSError:
            raise CandidateFailure(self._death("before the request"))
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([self.reply_r], [], [], max(0.0, remaining))
        if not ready:
            self.kill()
            raise CandidateFailure(f"timed out: the candidate did not finish {msg['op']} within its time limit")
        try:
            reply = framing.read_frame(self.reply_r, wide=True)
        except (framing.ChannelClosed, ValueError, Exception) as e:
            if isinstance(e, framing.ChannelClosed):
                raise CandidateFailure(self._death(f"during {msg['op']}"))
            self.kill()
            raise CandidateFailure(f"the candidate corrupted the reply channel ({type(e).__name__})")
        return reply

    def _death(self, when):
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            return f"the candidate closed its channel {when}"
        if code < 0:
            return f"crashed: the candidate was killed by signal {signal_name(-code)} {when}"
        return f"crashed: the candidate exited with status {code} {when}"

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def put(self, obj, tag):
        return self.exchange.put(obj, tag)

    def take(self, name):
        """What the child put under name; a bad or missing file is the candidate's failure."""
        try:
            return self.exchange.take(name, ipc_owner=self.proc.pid)
        except Exception as e:
            raise CandidateFailure(f"the candidate's reply named no readable tensors ({type(e).__name__}: {e})")

    def close(self):
        if self.proc.poll() is None:
            try:
                framing.write_frame(self.cmd_w, {"op": "exit"}, wide=True)
                self.proc.wait(timeout=5)
            except Exception:
                pass
        self.kill()  # the whole group: whatever the candidate started goes too
        for fd in (self.cmd_w, self.reply_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.exchange.remove()


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
        elif not torch.equal(o, r):
            return f"output {k} differs from the reference"
    return None


class PhaseLog:
    """With CUDA_AGENT_HARNESS_PHASES=1, one stderr line per phase of a job, written as each phase
    ends, so that a job killed at its deadline still shows where its time went."""

    def __init__(self, job_id):
        self.job_id = job_id or "-"
        self.last = time.monotonic()
        self.enabled = os.environ.get("CUDA_AGENT_HARNESS_PHASES") == "1"

    def mark(self, phase):
        if not self.enabled:
            return
        now = time.monotonic()
        sys.stderr.write(f"harness: job {self.job_id}: {phase} {1000 * (now - self.last):.0f} ms\n")
        sys.stderr.flush()
        self.last = now


def bitwise_equal(a, b):
    return len(a) == len(b) and all(
        x.shape == y.shape and torch.equal(torch.nan_to_num(x), torch.nan_to_num(y)) for x, y in zip(a, b))


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
        digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
        key = (os.path.realpath(path), digest)
        if key not in self.tasks:
            self.tasks[key] = Task(path)
        return self.tasks[key]

    def timer(self, device):
        if device not in self.timers:
            self.timers[device] = timing.Timer(device)
        return self.timers[device]

    # --- the reference -------------------------------------------------------------------------
    def reference(self, task, device, seed, input_sets):
        """The model, its weights and, per input set, the seed, the fingerprint of the inputs and
        the reference outputs (on the device: compared there). Only the first set's inputs are
        kept, for timing; the child draws its own from the seeds (task_inputs)."""
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
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            refs.append([o.detach().clone() for o in outs])
        return model, init_inputs, state_dict, seeds, prints, first, refs

    # --- one job -------------------------------------------------------------------------------
    def run(self, req, want_profile=True):
        o = dict(DEFAULTS)
        o.update({k: v for k, v in req.items() if v is not None})
        started = time.monotonic()
        record = {"episode_id": o.get("episode_id", ""), "job_id": o.get("job_id", ""),
                  "compiled": True, "correct": False, "violations": [], "reward": -1,
                  "t_eager_ms": math.nan, "t_compile_ms": math.nan, "t_new_ms": math.nan,
                  "speedup_eager": math.nan, "speedup_compile": math.nan, "error": ""}
        profile = {"job_id": record["job_id"], "eager": timing.stats([]), "compiled": timing.stats([]),
                   "candidate": timing.stats([]), "error": ""}
        device = o["device"]
        if device == "cpu" and int(o["cpu_threads"]) > 0:
            torch.set_num_threads(int(o["cpu_threads"]))  # the same count here and in the child
        task = self.task(o["task_path"])
        seed = int(o["seed"]) or int.from_bytes(os.urandom(4), "little") % (1 << 30) + 1
        phases = PhaseLog(record["job_id"])
        # The child comes first: its interpreter, torch and CUDA come up while the reference runs
        # (or came up during the previous job).
        child = self.child_for(device, o["memory_limit_mb"])
        try:
            model, init_inputs, state_dict, seeds, prints, first_inputs, refs = self.reference(
                task, device, seed, int(o["input_sets"]))
        except BaseException:
            child.close()
            raise
        phases.mark("reference")

        module_path = o["module_path"]
        module_dir = module_path if os.path.isdir(module_path) else os.path.dirname(module_path)
        violations = {}
        try:
            deadline = time.monotonic() + float(o["timeout_s"])
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
            phases.mark("draw")
            reply = child.request({"op": "verify"}, deadline)
            violations.update(reply.get("violations") or {})
            if not reply["ok"]:
                raise CandidateFailure(f"forward failed: {reply['error']}")
            outputs = [child.take(name) for name in reply["outputs"]]
            phases.mark("verify")
            error = self.judge(outputs, refs, reply["poisoned"], violations, o, device)
            del outputs  # on CUDA they map the child's memory: let go of it while the child lives
            phases.mark("judge")
            if error is None and not violations and want_profile:
                self.quiet_spare()
                phases.mark("spare")
                self.profile(task, model, first_inputs, seeds[0], refs[0], child, o, profile, violations, device)
                phases.mark("profile")
            record["correct"] = error is None and not violations
            record["error"] = error or ""
        except CandidateFailure as e:
            record["error"] = str(e)
        finally:
            child.close()
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
        record["reward"] = reward.milestone_reward(record["correct"], record["t_new_ms"],
                                                   record["t_eager_ms"], record["t_compile_ms"])
        verify = {"job_id": record["job_id"], "correct": record["correct"], "violations": record["violations"],
                  "error": record["error"], "duration_ms": (time.monotonic() - started) * 1e3}
        return record, verify, profile

    def judge(self, outputs, refs, poisoned, violations, o, device):
        atol, rtol = float(o["atol"]), float(o["rtol"])
        first_error = None
        n = len(refs)
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

    def profile(self, task, model, inputs, seed0, ref0, child, o, profile, violations, device):
        warmup, runs = int(o["warmup_runs"]), max(1, int(o["timed_runs"]))
        timer = self.timer(device)
        path = self.baseline_path(task, o, device)
        cached = None
        if path and os.path.exists(path) and time.time() - os.path.getmtime(path) < float(o["baseline_max_age_s"]):
            with open(path) as f:
                cached = json.load(f)
        budget = float(o["timeout_s"])
        eager, compiled, candidate = [], [], []
        if cached is None:
            if device not in task.compiled:
                mode = None if o["compile_mode"] == "default" else o["compile_mode"]
                task.compiled[device] = torch.compile(model, mode=mode)
            compiled_fn = task.compiled[device]
            for _ in range(warmup):
                timer.time_once(model, inputs)
                timer.time_once(compiled_fn, inputs)
            # The child draws the first set once and keeps it for the single runs that follow.
            reply = child.request({"op": "time", "seed": seed0, "warmup": warmup, "runs": 0},
                                  time.monotonic() + budget)
            self._check_time_reply(reply, violations)
            for i in range(runs):  # interleaved: eager, compiled, candidate, eager, ...
                eager.append(timer.time_once(model, inputs)[0])
                compiled.append(timer.time_once(compiled_fn, inputs)[0])
                reply = child.request({"op": "time", "warmup": 0, "runs": 1,
                                       "return_output": i == runs - 1}, time.monotonic() + budget)
                candidate.extend(self._check_time_reply(reply, violations))
            if path:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = path + f".{os.getpid()}.tmp"
                with open(tmp, "w") as f:
                    json.dump({"eager": eager, "compiled": compiled, "device": device_descriptor(device),
                               "torch": torch.__version__, "task": task.digest}, f)
                os.replace(tmp, path)
        else:
            eager, compiled = cached["eager"], cached["compiled"]
            reply = child.request({"op": "time", "seed": seed0, "warmup": warmup, "runs": runs,
                                   "return_output": True}, time.monotonic() + budget)
            candidate = self._check_time_reply(reply, violations)
        if "output" in reply:
            err = compare(child.take(reply["output"]), ref0, float(o["atol"]), float(o["rtol"]))
            if err:
                profile["error"] = f"the output of a timed run was wrong: {err}"
        profile["eager"] = timing.stats(eager)
        profile["compiled"] = timing.stats(compiled)
        profile["candidate"] = timing.stats(candidate)

    @staticmethod
    def _check_time_reply(reply, violations):
        violations.update(reply.get("violations") or {})
        if not reply["ok"]:
            raise CandidateFailure(f"a timed run failed: {reply['error']}")
        return [float(x) for x in reply["samples_ms"]]
