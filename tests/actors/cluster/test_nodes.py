"""Rollouts whose GPU slots and compiler workers all come from node processes over TCP, with real
faults: a node SIGKILLed mid-job, one SIGSTOPped mid-job and then resumed, one whose link is cut
inside a network namespace and then restored, a node with the wrong token, and nodes that join
while the rollout runs. In every case the rollout completes with every episode rewarded, the log
holds exactly one final reward per episode and the membership events, and replay is identical.

Everything is real: `cuda-agent rollout --listen` (the coordinator), `cuda-agent node --join`
processes, the demo policy's episodes through the sandboxed tools, builds and the CPU harness.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

BINARY = os.environ.get("CUDA_AGENT_BINARY", "build/tools/cuda-agent")
SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TASKS = "smoke_01*,smoke_02*"


@pytest.fixture
def scratch():
    path = tempfile.mkdtemp(prefix="cluster-nodes-")
    os.chmod(path, 0o755)  # sandboxed commands may run as another user
    yield path
    shutil.rmtree(path, ignore_errors=True)


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
    def __init__(self, scratch, token, prefix=(), listen="127.0.0.1:0", episodes=2, extra=()):
        self.scratch, self.log = scratch, os.path.join(scratch, "log")
        self.err_path = os.path.join(scratch, "coordinator.err")
        self.proc = subprocess.Popen(
            list(prefix) + [BINARY] + settings(scratch) + list(extra) + [
                "rollout", "--corpus", "smoke", "--policy", "demo", "--tasks", TASKS, "--episodes", str(episodes),
                "--log", self.log, "--run-id", "nodes", "--listen", listen, "--token-file", token,
                "--local-slots", "0"],
            stdout=subprocess.PIPE, stderr=open(self.err_path, "w"), text=True, cwd=scratch)
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
    return subprocess.Popen(
        list(prefix) + [BINARY] + settings(scratch) + list(extra) + [
            "node", "--join", coordinator.address(), "--token-file", token, "--device", "cpu",
            "--slots", str(slots), "--compilers", str(compilers), "--name", name],
        stdout=err, stderr=err, cwd=scratch)  # cluster.work_dir is relative to it


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


def check_run(scratch, coordinator, episodes=2):
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


def test_a_killed_node_s_job_runs_on_a_node_that_joins_later_and_a_wrong_token_gets_nothing(scratch):
    token = token_file(scratch, "token", "the-cluster-token-0123456789")
    wrong = token_file(scratch, "wrong", "not-the-cluster-token-0123456789")
    coordinator = Coordinator(scratch, token)
    # A node that cannot prove the token is refused, says so, and exits with status 2.
    intruder = start_node(scratch, coordinator, wrong, "intruder")
    assert intruder.wait(timeout=60) == 2
    assert "refused" in open(os.path.join(scratch, "intruder.err")).read()
    # `status` without the token is refused too.
    assert "token" in coordinator.status(wrong)
    first = start_node(scratch, coordinator, token, "node-a")
    wait_until(lambda: node_busy(coordinator, token, "node-a"), 300, "node-a to hold a GPU job")
    first.send_signal(signal.SIGKILL)
    first.wait()
    # The rollout waits for slots; a node joining now runs what node-a held.
    second = start_node(scratch, coordinator, token, "node-b")
    records, err = check_run(scratch, coordinator)
    assert second.wait(timeout=60) == 0, "a node exits cleanly when the rollout ends"
    events = membership(records)
    assert [r for t, n, r in events if n == "intruder"] == [
        "refused: the tokens differ (the coordinator's proof did not match the node's --token-file)"], events
    assert any(t == "node_leave" and n == "node-a" and reason.startswith("lost") for t, n, reason in events), events
    assert [n for t, n, _ in events if t == "node_join"] == ["node-a", "node-b"], events
    requeued = [r for r in records if r["type"] == "job_requeued"]
    assert requeued and all(r["payload"]["node_id"] == "node-a" for r in requeued), requeued
    assert not any(r["type"] == "node_join" and r["payload"]["node_id"] == "intruder" for r in records)


def test_a_stopped_node_is_given_up_and_rejoins_when_it_resumes(scratch):
    token = token_file(scratch, "token", "the-cluster-token-0123456789")
    coordinator = Coordinator(scratch, token)
    stopped = start_node(scratch, coordinator, token, "node-a")
    wait_until(lambda: node_busy(coordinator, token, "node-a"), 300, "node-a to hold a GPU job")
    stopped.send_signal(signal.SIGSTOP)
    spare = start_node(scratch, coordinator, token, "node-b")
    # Missed heartbeats: the coordinator gives node-a up and its job goes to node-b.
    wait_until(lambda: "node-a" not in coordinator.status(token), 30, "node-a to be given up")
    stopped.send_signal(signal.SIGCONT)
    records, _ = check_run(scratch, coordinator)
    for node in (stopped, spare):
        assert node.wait(timeout=60) == 0
    events = membership(records)
    assert any(t == "node_leave" and n == "node-a" and reason.startswith("lost") for t, n, reason in events), events
    assert any(r["type"] == "job_requeued" and r["payload"]["node_id"] == "node-a" for r in records)
    # Back after SIGCONT: node-a joins again (its join after the loss is in the log) unless the
    # rollout ended first; either way no answer of its counted twice (one final reward each).
    joins = [n for t, n, _ in events if t == "node_join"]
    assert joins.count("node-b") == 1 and 1 <= joins.count("node-a") <= 2, joins


def self_signed(scratch, name):
    """A certificate that is its own authority: (certificate, key)."""
    cert, key = os.path.join(scratch, f"{name}.pem"), os.path.join(scratch, f"{name}.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", f"/CN={name}"], check=True, capture_output=True)
    return cert, key


def tls_settings(cert, key, ca):
    return ["--set", f"cluster.tls_certificate={cert}", "--set", f"cluster.tls_key={key}", "--set", f"cluster.tls_ca={ca}"]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl command to make certificates with")
def test_over_tls_a_node_joins_and_a_peer_without_the_authority_s_certificate_gets_nothing(scratch):
    token = token_file(scratch, "token", "the-cluster-token-0123456789")
    cert, key = self_signed(scratch, "cluster")
    tls = tls_settings(cert, key, cert)
    probe = subprocess.run([BINARY] + tls + ["status", "--coordinator", "127.0.0.1:1", "--token-file", token, "--once"],
                           capture_output=True, text=True, timeout=30)
    if "built without TLS" in probe.stderr:
        pytest.skip("this cuda-agent was built without libssl-dev")
    coordinator = Coordinator(scratch, token, episodes=1, extra=tls)
    assert "(TLS)" in open(coordinator.err_path).read()
    assert "nodes 0" in coordinator.status(token, extra=tls)
    # Plain TCP, or TLS with a certificate the authority did not sign: no connection at all.
    assert "disconnect_during_handshake" in coordinator.status(token)
    stranger_cert, stranger_key = self_signed(scratch, "stranger")
    assert "disconnect_during_handshake" in coordinator.status(token, extra=tls_settings(stranger_cert, stranger_key,
                                                                                         stranger_cert))
    node = start_node(scratch, coordinator, token, "node-tls", extra=tls)
    records, _ = check_run(scratch, coordinator, episodes=1)
    assert node.wait(timeout=60) == 0
    assert [n for t, n, _ in membership(records) if t == "node_join"] == ["node-tls"]


def can_make_network_namespaces():
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--net", "--mount", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs tmpfs /run && ip netns add probe && ip netns del probe"],
                           capture_output=True)
    return probe.returncode == 0


NETNS_SETUP = """
set -e
mount -t tmpfs tmpfs /run
ip link set lo up
ip netns add cut
ip link add veth-c type veth peer name veth-n
ip link set veth-n netns cut
ip addr add 10.231.0.1/24 dev veth-c
ip link set veth-c up
ip netns exec cut ip addr add 10.231.0.2/24 dev veth-n
ip netns exec cut ip link set veth-n up
ip netns exec cut ip link set lo up
exec "$@"
"""


@pytest.mark.skipif(not can_make_network_namespaces(), reason="no right to make network namespaces here")
def test_a_node_cut_off_by_a_partition_is_given_up_and_rejoins_when_the_link_returns(scratch):
    """The test runs in a network namespace of its own (unshare), with a veth pair to a second
    namespace `cut` holding node-a: traffic goes only between the two namespaces' addresses."""
    script = os.path.join(scratch, "partition.py")
    with open(script, "w") as f:
        f.write(PARTITION_DRIVER)
    env = dict(os.environ, CLUSTER_SCRATCH=scratch, CUDA_AGENT_BINARY=os.path.abspath(BINARY),
               PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(["unshare", "--net", "--mount", "--propagation", "private", "bash", "-c", NETNS_SETUP,
                           "netns", sys.executable, script],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "partition: ok" in done.stdout, done.stdout


PARTITION_DRIVER = r'''
import os, signal, subprocess, sys, time
import test_nodes as t
scratch = os.environ["CLUSTER_SCRATCH"]
token = t.token_file(scratch, "token", "the-cluster-token-0123456789")
coordinator = t.Coordinator(scratch, token, listen="10.231.0.1:0")
cut_off = t.start_node(scratch, coordinator, token, "node-a", prefix=["ip", "netns", "exec", "cut"])
t.wait_until(lambda: t.node_busy(coordinator, token, "node-a"), 300, "node-a to hold a GPU job")
subprocess.run(["ip", "link", "set", "veth-c", "down"], check=True)
spare = t.start_node(scratch, coordinator, token, "node-b")
t.wait_until(lambda: "node-a" not in coordinator.status(token), 30, "node-a to be given up")
subprocess.run(["ip", "link", "set", "veth-c", "up"], check=True)
records, _ = t.check_run(scratch, coordinator)
events = t.membership(records)
assert any(k == "node_leave" and n == "node-a" and r.startswith("lost") for k, n, r in events), events
assert any(r["type"] == "job_requeued" and r["payload"]["node_id"] == "node-a" for r in records)
for node in (cut_off, spare):
    try:
        node.wait(timeout=90)
    except subprocess.TimeoutExpired:
        node.kill()
print("partition: ok", events)
'''
