"""Persistent worker processes that run one function over many tasks, for `corpus validate` and
`corpus synth`.

Each worker is a fresh Python process (running `_serve` below) that imports torch
once and then runs tasks one at a time: a request is one JSON line naming a function
("module:function", taking and returning a plain dict) and its payload; the answer is one JSON
line. The parent keeps every worker busy and watches it:

- a task that runs past `task_timeout` has its worker's whole process group killed, is recorded
  as `timeout`, and a fresh worker takes the worker's place;
- a worker that dies (a segfault, os._exit, the OOM killer) fails only its task, as `crash`;
- a task whose function raises is `error` (the functions used here turn their own failures
  into results, so this is a bug or an escape such as SystemExit);
- after a task that left CUDA in an error state (a device-side assert poisons the context for
  every later task), the worker answers and exits, and is replaced.

On cuda there is one worker per visible GPU by default, each pinned with CUDA_VISIBLE_DEVICES
(more workers than GPUs share them round-robin); on cpu the cores are split between workers.
Results come back in input order; `on_result` sees them as they finish.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

PACKAGE_PARENT = str(Path(__file__).resolve().parents[1])


class PoolError(RuntimeError):
    """The pool cannot run at all (no GPU, workers that die while starting)."""


@dataclasses.dataclass
class Outcome:
    """What became of one task. `failure` is None (the function returned `value`), "timeout",
    "crash" or "error"; `message` says what happened in one line."""
    index: int
    value: Optional[dict] = None
    failure: Optional[str] = None
    message: str = ""
    seconds: float = 0.0


def visible_gpus() -> List[str]:
    """The GPU ids a worker may be pinned to: the parent's CUDA_VISIBLE_DEVICES entries if it
    has them (pinning to an index would escape the parent's own restriction), else 0..n-1."""
    import torch  # only on cuda: the parent has no other need for torch
    count = torch.cuda.device_count()
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if listed:
        return listed[:count]
    return [str(i) for i in range(count)]


def default_workers(device: str, gpus: Sequence[str] = ()) -> int:
    """One per visible GPU on cuda (one for cuda:N), two on cpu."""
    if device.startswith("cuda:"):
        return 1
    if device.startswith("cuda"):
        return max(1, len(gpus))
    return 2


def environments_for(device: str, workers: int = 0, tasks: Optional[int] = None
                     ) -> List[Dict[str, str]]:
    """The workers' environments for a run of `tasks` tasks on `device`: `workers` of them
    (0: default_workers), never more than there are tasks."""
    gpus = visible_gpus() if device.startswith("cuda") else []
    count = workers if workers > 0 else default_workers(device, gpus)
    if tasks is not None:
        count = max(1, min(count, tasks))
    return worker_environments(device, count, gpus)


def worker_environments(device: str, workers: int, gpus: Sequence[str] = (),
                        cores: Optional[int] = None) -> List[Dict[str, str]]:
    """The environment additions of each worker: its GPU on cuda (a GPU index past the last
    would hide every GPU from the worker, so they are shared round-robin) and its share of the
    CPU cores, so that workers do not each start a thread per core."""
    if device.startswith("cuda") and not gpus:
        raise PoolError(f"--device {device}: torch sees no CUDA GPU here; use --device cpu")
    if device.startswith("cuda:"):
        index = int(device.split(":", 1)[1])
        if index >= len(gpus):
            raise PoolError(f"--device {device}: only {len(gpus)} GPU(s) are visible; "
                            f"use --device cuda:0 to cuda:{len(gpus) - 1}")
        gpus = [gpus[index]]
    cores = cores or os.cpu_count() or 1
    threads = str(max(1, cores // max(1, workers)))
    envs = []
    for i in range(workers):
        env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
               "CUDA_AGENT_WORKER_THREADS": threads}
        if device.startswith("cuda"):
            env["CUDA_VISIBLE_DEVICES"] = gpus[i % len(gpus)]
        envs.append(env)
    return envs


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return name + (" (out of memory?)" if -returncode == signal.SIGKILL else "")
    return f"exit status {returncode}"


class _Worker:
    def __init__(self, env: Dict[str, str]):
        self.env = env
        full_env = dict(os.environ)
        full_env.update(env)
        path = full_env.get("PYTHONPATH", "")
        full_env["PYTHONPATH"] = PACKAGE_PARENT + (os.pathsep + path if path else "")
        # Its own session: a timeout kills the task's children (compile workers) too, and a
        # terminal's Ctrl-C reaches only the parent, which then stops the workers.
        # This package first on the path, ahead of the working directory, which may hold
        # another copy of it.
        boot = (f"import sys; sys.path.insert(0, {PACKAGE_PARENT!r}); "
                "from cuda_agent_corpus.workers import _serve; _serve()")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", boot], env=full_env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.buffer = b""
        self.ready = False
        self.started = time.monotonic()
        self.task: Optional[int] = None       # index of the task it runs
        self.task_started = 0.0

    def send(self, request: dict) -> bool:
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def read_lines(self) -> Optional[List[dict]]:
        """Complete answers read so far; None at end of file (the worker is gone)."""
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return []
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def kill(self) -> int:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return self.wait()

    def wait(self) -> int:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        return self.proc.wait()


class WorkerPool:
    """`workers` processes with the given environments (worker_environments); see the module
    docstring. Use as a context manager, or call close()."""

    def __init__(self, envs: List[Dict[str, str]], task_timeout: Optional[float] = None,
                 start_timeout: float = 300.0, max_start_failures: int = 3):
        if not envs:
            raise PoolError("a worker pool needs at least one worker")
        self.envs = envs
        self.task_timeout = task_timeout if task_timeout and task_timeout > 0 else None
        self.start_timeout = start_timeout
        self.max_start_failures = max_start_failures
        self.workers: List[_Worker] = [_Worker(env) for env in envs]
        self.replaced = 0   # workers started in place of one that timed out, died or retired

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        for w in self.workers:
            w.kill()
        self.workers = []

    def run(self, function: str, payloads: Sequence[dict],
            on_result: Optional[Callable[[Outcome], None]] = None,
            on_status: Optional[Callable[[int, int, int], None]] = None,
            status_interval: float = 0.5) -> List[Outcome]:
        """Runs `function` ("module:function") on each payload; Outcomes in input order.
        on_status(done, running, queued) is called when they change and every
        `status_interval` seconds."""
        queue = deque(range(len(payloads)))
        outcomes: List[Optional[Outcome]] = [None] * len(payloads)
        done = 0
        start_failures = 0
        last_status, last_done = 0.0, -1
        selector = selectors.DefaultSelector()
        for w in self.workers:
            selector.register(w.fd, selectors.EVENT_READ, w)

        def replace(w: _Worker) -> _Worker:
            selector.unregister(w.fd)
            fresh = _Worker(w.env)
            self.workers[self.workers.index(w)] = fresh
            selector.register(fresh.fd, selectors.EVENT_READ, fresh)
            self.replaced += 1
            return fresh

        def finish(w: _Worker, outcome: Outcome) -> None:
            nonlocal done
            outcome.seconds = round(time.monotonic() - w.task_started, 3)
            outcomes[outcome.index] = outcome
            w.task = None
            done += 1
            if on_result:
                on_result(outcome)

        def dispatch(w: _Worker) -> None:
            while queue and w.ready and w.task is None:
                index = queue.popleft()
                if w.send({"fn": function, "payload": payloads[index]}):
                    w.task, w.task_started = index, time.monotonic()
                    return
                queue.appendleft(index)  # the worker died before it took it: not its fault
                w = replace(w)

        try:
            while done < len(payloads):
                for w in list(self.workers):
                    dispatch(w)
                running = sum(1 for w in self.workers if w.task is not None)
                now = time.monotonic()
                if on_status and (done != last_done or now - last_status >= status_interval):
                    on_status(done, running, len(queue))
                    last_status, last_done = now, done
                wait = status_interval
                for w in self.workers:
                    if w.task is not None and self.task_timeout:
                        wait = min(wait, w.task_started + self.task_timeout - now)
                    elif not w.ready:
                        wait = min(wait, w.started + self.start_timeout - now)
                for key, _ in selector.select(max(0.0, wait)):
                    w = key.data
                    answers = w.read_lines()
                    if answers is None:  # the worker is gone
                        reason = _signal_name(w.wait())
                        if w.task is not None:
                            finish(w, Outcome(w.task, failure="crash",
                                              message=f"the worker process died ({reason})"))
                        elif not w.ready:
                            start_failures += 1
                            if start_failures >= self.max_start_failures:
                                raise PoolError(f"worker processes die while starting ({reason}); "
                                                "their error is printed above; check that "
                                                f"{sys.executable} imports torch")
                        replace(w)
                        continue
                    for answer in answers:
                        if "ready" in answer:
                            if not answer["ready"]:
                                raise PoolError(f"a worker cannot start: {answer.get('error')}")
                            w.ready, start_failures = True, 0
                        elif w.task is not None:
                            if answer.get("ok"):
                                finish(w, Outcome(w.task, value=answer.get("value")))
                            else:
                                finish(w, Outcome(w.task, failure="error",
                                                  message=answer.get("error", "")))
                            if answer.get("retire"):  # CUDA left in an error state
                                w.kill()
                                replace(w)
                                break
                now = time.monotonic()
                for w in list(self.workers):
                    if w.task is not None and self.task_timeout and \
                            now - w.task_started > self.task_timeout:
                        w.kill()
                        finish(w, Outcome(w.task, failure="timeout",
                                          message=f"still running after {self.task_timeout:g} s "
                                                  "(--task-timeout); its worker was killed"))
                        replace(w)
                    elif not w.ready and now - w.started > self.start_timeout:
                        raise PoolError(f"a worker did not start within {self.start_timeout:g} s "
                                        "(importing torch); the machine may be overloaded")
            if on_status:
                on_status(done, 0, 0)
        finally:
            selector.close()
        return outcomes  # type: ignore[return-value]


# --- the worker process ------------------------------------------------------------------------

def _cuda_broken() -> bool:
    """True when CUDA is in an error state that every later task would inherit."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return False
    try:
        torch.cuda.synchronize()
        return False
    except Exception:
        return True


def _serve() -> None:
    # The protocol gets private copies of stdin and stdout; a task's prints go to stderr and
    # its reads of stdin see nothing, so neither can corrupt an answer.
    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)

    def answer(doc: dict) -> None:
        answers.write((json.dumps(doc, default=str) + "\n").encode())
        answers.flush()

    try:
        import torch
        threads = int(os.environ.get("CUDA_AGENT_WORKER_THREADS", "0"))
        if threads > 0:
            torch.set_num_threads(threads)
    except Exception as e:
        answer({"ready": False, "error": f"importing torch fails: {type(e).__name__}: {e}"})
        return
    answer({"ready": True, "pid": os.getpid()})
    functions: Dict[str, Callable[[dict], dict]] = {}
    for line in requests:
        request = json.loads(line)
        name = request["fn"]
        try:
            if name not in functions:
                module, _, attr = name.partition(":")
                functions[name] = getattr(importlib.import_module(module), attr)
            doc = {"ok": True, "value": functions[name](request["payload"])}
        except BaseException as e:  # SystemExit from a task too: it must not end the worker
            doc = {"ok": False, "error": f"{type(e).__name__}: {e}".replace("\n", " ")[:400]}
        if _cuda_broken():
            doc["retire"] = True
        answer(doc)
        if doc.get("retire"):
            return


if __name__ == "__main__":
    _serve()
