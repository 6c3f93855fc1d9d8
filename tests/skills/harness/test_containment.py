"""Containment of a candidate's child (skills/harness/candidate_process.py): candidates that really
detach or really write outside their scratch, then a look for the survivor and the change. Each
runs in a worker of its own whose standard streams are pipes: a process left behind would hold
them open.

    python tests/skills/harness/test_containment.py [N [DEVICE]]   times N child starts (on DEVICE, default
                                                            cpu) with and without the sandbox
"""
import json
import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid

import pytest

from conftest import SKILLS
from harness import candidate_process, exchange, framing

ROUNDS = 5  # leaving a process behind was a race once: no round may


def marked(mark):
    """The pids, anywhere on the host, of processes whose command line holds mark."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if mark.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


class Watch(threading.Thread):
    """Looks for mark on the host while a job runs, to show the candidate did detach."""

    def __init__(self, mark):
        super().__init__(daemon=True)
        self.mark, self.seen, self.done = mark, False, threading.Event()

    def run(self):
        while not self.done.wait(0.005):
            self.seen = self.seen or bool(marked(self.mark))

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.join()


class PipedWorker:
    """harness.worker with stdin, stdout and stderr all pipes; stderr is read as it comes."""

    def __init__(self, **env):
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=dict(os.environ, PYTHONPATH=SKILLS, **env))
        self.log = []
        self.reader = threading.Thread(target=lambda: self.log.extend(iter(self.proc.stderr.readline, b"")),
                                       daemon=True)
        self.reader.start()

    def request(self, msg, timeout=120):
        framing.write_frame(self.proc.stdin.fileno(), msg)
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, f"no reply to {msg['op']} in {timeout} s"
        return framing.read_frame(self.proc.stdout.fileno())

    def shut_down(self, timeout=10):
        """Seconds from the shutdown request until both of the worker's output pipes are at end
        of file; fails if either stays open past timeout."""
        start = time.monotonic()
        assert self.request({"op": "shutdown"})["ok"]
        self.proc.stdin.close()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready and os.read(self.proc.stdout.fileno(), 1) == b"", "the worker's stdout stayed open"
        self.reader.join(max(0.0, timeout - (time.monotonic() - start)))
        assert not self.reader.is_alive(), "the worker's stderr stayed open"
        self.proc.wait(timeout)
        return time.monotonic() - start

    def kill(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def mark():
    """A token the detaching candidates put in their left-behind processes' argv[0]."""
    token = f"cuda-agent-detached-{uuid.uuid4().hex}"
    yield token
    for pid in marked(token):  # only where containment failed; the test has said so already
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("name", ["detach_at_import", "detach_in_forward"])
def test_nothing_a_candidate_detaches_outlives_its_job(solutions, mark, name):
    _, job = solutions(name)
    _, honest = solutions("honest_elementwise")
    worker = PipedWorker(CUDA_AGENT_TEST_MARK=mark)
    try:
        for _ in range(ROUNDS):
            with Watch(mark) as watch:
                record = worker.request(job)["record"]
            assert watch.seen, "the candidate left no process behind to look for"
            assert marked(mark) == [], "a process the candidate started outlived its job"
            assert record["reward"] == -1 and "spawns_process" in record["violations"], record["error"]
        if name == "detach_in_forward":  # libc's fork: only the worker's look into the namespace sees it
            assert "still running after verify" in record["error"], record["error"]
        after = worker.request(dict(honest, op="verify"))["record"]
        assert after["correct"], after["error"]
        assert worker.shut_down() < 5
    finally:
        worker.kill()
    assert marked(mark) == []


def test_a_worker_killed_mid_job_takes_the_candidate_s_processes_along(solutions, mark):
    # As at a job's deadline, when the worker itself is killed and replaced.
    _, job = solutions("detach_at_import")
    worker = PipedWorker(CUDA_AGENT_TEST_MARK=mark)
    try:
        framing.write_frame(worker.proc.stdin.fileno(), job)
        deadline = time.monotonic() + 60
        while not marked(mark):
            assert time.monotonic() < deadline, "the candidate left no process behind to look for"
            time.sleep(0.01)
    finally:
        worker.kill()
    worker.reader.join(5)
    assert not worker.reader.is_alive(), "the dead worker's stderr stayed open"
    assert marked(mark) == []


def test_a_candidate_cannot_change_what_lies_outside_its_scratch(solutions):
    _, job = solutions("rewrite_outside")
    task = job["task_path"]
    planted = os.path.join(SKILLS, "harness", "planted.py")
    # another job's exchange directory, laid out as a worker lays one out
    other = os.path.join("/dev/shm", f"cuda-agent-exchange-{os.getpid()}", "job-other")
    os.makedirs(other)
    inputs = os.path.join(other, "init-1-1.pt")
    with open(inputs, "wb") as f:
        f.write(b"another job's tensors")
    contents = {path: open(path, "rb").read() for path in (task, inputs)}
    worker = PipedWorker(CUDA_AGENT_TEST_VICTIMS=os.pathsep.join([inputs, os.path.join(other, "planted.pt")]))
    try:
        record = worker.request(job)["record"]
        worker.shut_down()
        attempts = dict(re.findall(r"^rewrite_outside: (.*): (\w+)$", b"".join(worker.log).decode(), re.M))
        assert {path: open(path, "rb").read() for path in (task, inputs)} == contents
        assert os.listdir(other) == ["init-1-1.pt"] and not os.path.exists(planted)
    finally:
        worker.kill()
        shutil.rmtree(os.path.dirname(other))
        if os.path.exists(planted):
            os.remove(planted)
    # Refused by the file system itself, not only named: read-only where the child sees the file,
    # absent where it does not (another job's exchange directory); written only in its own.
    assert attempts[task] == attempts[planted] == "EROFS", attempts
    assert attempts[inputs] == attempts[os.path.join(other, "planted.pt")] == "ENOENT", attempts
    own = f"/cuda-agent-exchange-{worker.proc.pid}/"
    assert all(outcome != "written" or own in path for path, outcome in attempts.items()), attempts
    assert record["reward"] == -1 and "write_outside_sandbox" in record["violations"], record["error"]


def test_the_sandbox_shows_the_host_read_only_but_for_the_scratch(tmp_path):
    host_file = tmp_path / "host.txt"
    host_file.write_text("host")
    decoy = os.path.join("/dev/shm", f"cuda-agent-test-{uuid.uuid4().hex}")
    open(decoy, "w").close()
    ex, shm = exchange.make_directory(), exchange.make_shm_directory()
    script = f"""
import errno, json, os
def attempt(path):
    try:
        with open(path, "a") as f:
            f.write("x")
        return "written"
    except OSError as e:
        return errno.errorcode[e.errno]
caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
print(json.dumps({{"pid": os.getpid(), "caps": caps, "procs": sorted(p for p in os.listdir("/proc") if p.isdigit()),
                   "host": attempt({str(host_file)!r}), "root": attempt("/planted"),
                   "exchange": attempt({os.path.join(ex, "out.pt")!r}), "shm": attempt("/dev/shm/torch_2_1_0"),
                   "shm_sees": os.listdir("/dev/shm"), "decoy": os.path.exists({decoy!r})}}))
"""
    try:
        done = subprocess.run(candidate_process.sandbox_command(ex, shm, [sys.executable, "-c", script]),
                              capture_output=True, text=True, timeout=60)
    finally:
        os.remove(decoy)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["pid"] == 2 and seen["procs"] == ["1", "2"] and int(seen["caps"], 16) == 0, seen
    assert seen["host"] == "EROFS" and seen["root"] == "EROFS" and host_file.read_text() == "host", seen
    assert seen["exchange"] == "written" and os.path.exists(os.path.join(ex, "out.pt")), seen
    # its /dev/shm is its own directory: what it makes there is in shm, the host's is not seen
    assert seen["shm"] == "written" and os.path.exists(os.path.join(shm, "torch_2_1_0")), seen
    assert "torch_2_1_0" in seen["shm_sees"] and not seen["decoy"], seen
    shutil.rmtree(ex)
    shutil.rmtree(shm)


def test_a_host_without_the_sandbox_fails_the_job_with_one_line(monkeypatch):
    monkeypatch.setattr(candidate_process, "_bwrap", None)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match=r"^harness: bubblewrap \(bwrap\) is not on PATH"):
        candidate_process.CandidateProcess("cpu", 0)
    monkeypatch.undo()
    monkeypatch.setattr(candidate_process, "_bwrap", None)
    monkeypatch.setattr(candidate_process, "_NAMESPACES", candidate_process._NAMESPACES + ["--no-such-option"])
    with pytest.raises(RuntimeError, match=r"^harness: bubblewrap cannot start the candidate's sandbox here \(bwrap: "):
        candidate_process.CandidateProcess("cpu", 0)


def bench(n, device):
    """Seconds from start to the ready frame, and of close(), for n children with the sandbox and
    n without (the same runner started directly), interleaved."""
    times = {"sandboxed": [], "direct": []}
    for _ in range(n):
        start = time.monotonic()
        child = candidate_process.CandidateProcess(device, 16384)
        child.await_ready(time.monotonic() + 120)
        ready = time.monotonic()
        child.close()
        times["sandboxed"].append((ready - start, time.monotonic() - ready))

        start = time.monotonic()
        cmd_r, cmd_w = os.pipe()
        reply_r, reply_w = os.pipe()
        proc = subprocess.Popen([sys.executable, "-P", "-m", "harness.candidate_runner", "--cmd-fd", str(cmd_r),
                                 "--reply-fd", str(reply_w), "--device", device], pass_fds=(cmd_r, reply_w),
                                stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(), start_new_session=True,
                                env=dict(os.environ, PYTHONPATH=SKILLS, PYTHONDONTWRITEBYTECODE="1",
                                         OMP_WAIT_POLICY="PASSIVE"))
        os.close(cmd_r)
        os.close(reply_w)
        framing.read_frame(reply_r, wide=True)
        ready = time.monotonic()
        framing.write_frame(cmd_w, {"op": "exit"}, wide=True)
        proc.wait()
        times["direct"].append((ready - start, time.monotonic() - ready))
        os.close(cmd_w)
        os.close(reply_r)
    for kind, pairs in times.items():
        for what, xs in (("start", [p[0] for p in pairs]), ("close", [p[1] for p in pairs])):
            print(f"{kind:9} {what}: median {statistics.median(xs):.3f} s, min {min(xs):.3f}, max {max(xs):.3f} (n={n})")


if __name__ == "__main__":
    bench(int(sys.argv[1]) if len(sys.argv) > 1 else 10, sys.argv[2] if len(sys.argv) > 2 else "cpu")
