"""What the node tests share: a coordinator (`rollout --listen`) and node processes on the smoke
set with the demo policy, and the checks every faulty run must pass (it completes with every
episode rewarded, one final reward per episode in the log, an identical replay)."""
import json
import os
import re
import subprocess
import time

BINARY = os.environ.get("CUDA_AGENT_BINARY", "build/tools/cuda-agent")
SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TASKS = "smoke_01*,smoke_02*"

# Every process a test started, so that a failing test leaves none running (stop_all).
started = []


def stop_all():
    while started:
        proc = started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def settings(scratch):
    return ["--set", f"rollout.runs_dir={scratch}/runs", "--set", f"policy.demo_dir={SOURCE}/corpus/demos",
            "--set", f"policy.tools_dir={SOURCE}/skills/tools", "--set", "harness.timed_runs=5",
            "--set", "harness.warmup_runs=2", "--set", "cluster.heartbeat_ms=200",
            "--set", "cluster.connection_timeout_ms=1500", "--set", "cluster.work_dir=cluster",
            "--set", f"build.cache_dir={scratch}/build-cache", "--set", f"harness.baseline_cache_dir={scratch}/baselines",
            "--set", f"log.dir={scratch}/default-log"]


def token_file(scratch, name, text):
    path = os.path.join(scratch, name)
    with open(path, "w") as f:
        f.write(text + "\n")
    os.chmod(path, 0o600)
    return path


class Coordinator:
    def __init__(self, scratch, token, prefix=(), listen="127.0.0.1:0", episodes=1, extra=()):
        self.scratch, self.log = scratch, os.path.join(scratch, "log")
        self.err_path = os.path.join(scratch, "coordinator.err")
        self.proc = subprocess.Popen(
            list(prefix) + [BINARY] + settings(scratch) + list(extra) + [
                "rollout", "--corpus", "smoke", "--policy", "demo", "--tasks", TASKS, "--episodes", str(episodes),
                "--log", self.log, "--run-id", "nodes", "--listen", listen, "--token-file", token,
                "--local-slots", "0"],
            stdout=subprocess.PIPE, stderr=open(self.err_path, "w"), text=True, cwd=scratch)
        started.append(self.proc)
        deadline = time.time() + 60
        while time.time() < deadline:
            m = re.search(r"listening on (\S+):(\d+)", open(self.err_path).read())
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                return
            assert self.proc.poll() is None, open(self.err_path).read()
            time.sleep(0.1)
        raise AssertionError("the coordinator never listened: " + open(self.err_path).read())

    def address(self):
        return f"{self.host}:{self.port}"

    def status(self, token, extra=()):
        out = subprocess.run([BINARY] + settings(self.scratch) + list(extra) + ["status", "--coordinator", self.address(),
                                                                "--token-file", token, "--once"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout + out.stderr

    def finish(self, timeout=600):
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, open(self.err_path).read()


def start_node(scratch, coordinator, token, name, slots=1, compilers=1, prefix=(), extra=()):
    err = open(os.path.join(scratch, f"{name}.err"), "a")
    proc = subprocess.Popen(
        list(prefix) + [BINARY] + settings(scratch) + list(extra) + [
            "node", "--join", coordinator.address(), "--token-file", token, "--device", "cpu",
            "--slots", str(slots), "--compilers", str(compilers), "--name", name],
        stdout=err, stderr=err, cwd=scratch)  # cluster.work_dir is relative to it
    started.append(proc)
    return proc


def node_busy(coordinator, token, name):
    """True while `name` holds a GPU job (its row in `status` shows 1/1 busy slots)."""
    for line in coordinator.status(token).splitlines():
        if line.startswith(name + " "):
            return re.search(r"\s1/1\s", line) is not None
    return False


def wait_until(predicate, seconds, what):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"waited {seconds} s for {what}")


def export_log(scratch, log):
    out = os.path.join(scratch, "log.jsonl")
    subprocess.run([BINARY, "log", "export", log, "--out", out], check=True, capture_output=True, timeout=120)
    return [json.loads(line) for line in open(out)]


def check_run(scratch, coordinator, episodes=1):
    code, out, err = coordinator.finish()
    assert code == 0, out + err[-3000:]
    rows = [line for line in out.splitlines() if line.startswith("nodes-")]
    assert len(rows) == episodes, out
    for row in rows:
        assert re.search(r"agent_done +reward +[123] ", row), row
    records = export_log(scratch, coordinator.log)
    finals = {}
    for r in records:
        if r["type"] == "reward_record" and r["sender"] == "episode" and r["receiver"] == "rollout":
            finals[r["episode"]] = finals.get(r["episode"], 0) + 1
    assert len(finals) == episodes and set(finals.values()) == {1}, finals
    replay = subprocess.run([BINARY] + settings(scratch) + ["replay", coordinator.log], capture_output=True,
                            text=True, timeout=600)
    assert replay.returncode == 0 and f"{episodes} of {episodes} episodes replayed identically" in replay.stdout, \
        replay.stdout + replay.stderr
    return records, err


def membership(records):
    return [(r["type"], r["payload"]["node_id"], r["payload"].get("reason", ""))
            for r in records if r["type"] in ("node_join", "node_leave")]
