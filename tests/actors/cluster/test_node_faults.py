"""Nodes that stop or are cut off mid-job, and come back: a node SIGSTOPped and resumed, and a node
on the far side of a partition between two network namespaces that is then healed. The coordinator
gives each up after its missed heartbeats, its job runs on another node, and it joins again; the
rollout completes with one final reward per episode and an identical replay.
"""
import os
import shutil
import signal
import subprocess
import sys

import pytest

from cluster_run import (BINARY, Coordinator, check_run, membership, node_busy, start_node, token_file,
                         wait_until)


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
    wait_until(lambda: "node-a" in coordinator.status(token), 60, "node-a to join again after SIGCONT")
    records, _ = check_run(scratch, coordinator)
    for node in (stopped, spare):
        assert node.wait(timeout=60) == 0
    events = membership(records)
    assert any(t == "node_leave" and n == "node-a" and reason.startswith("lost") for t, n, reason in events), events
    assert any(r["type"] == "job_requeued" and r["payload"]["node_id"] == "node-a" for r in records)
    # Back after SIGCONT, node-a found its connection gone and joined again: it exited 0 above
    # only because the coordinator, which it must have rejoined, told it the run was over.
    joins = [n for t, n, _ in events if t == "node_join"]
    assert joins.count("node-b") == 1 and joins.count("node-a") == 2, joins


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
import atexit, os, subprocess
import cluster_run as t
atexit.register(t.stop_all)
scratch = os.environ["CLUSTER_SCRATCH"]
token = t.token_file(scratch, "token", "the-cluster-token-0123456789")
coordinator = t.Coordinator(scratch, token, listen="10.231.0.1:0")
cut_off = t.start_node(scratch, coordinator, token, "node-a", prefix=["ip", "netns", "exec", "cut"])
t.wait_until(lambda: t.node_busy(coordinator, token, "node-a"), 300, "node-a to hold a GPU job")
subprocess.run(["ip", "link", "set", "veth-c", "down"], check=True)
spare = t.start_node(scratch, coordinator, token, "node-b")
t.wait_until(lambda: "node-a" not in coordinator.status(token), 30, "node-a to be given up")
subprocess.run(["ip", "link", "set", "veth-c", "up"], check=True)
t.wait_until(lambda: "node-a" in coordinator.status(token), 90, "node-a to join again once the link is back")
records, _ = t.check_run(scratch, coordinator)
events = t.membership(records)
assert any(k == "node_leave" and n == "node-a" and r.startswith("lost") for k, n, r in events), events
assert any(r["type"] == "job_requeued" and r["payload"]["node_id"] == "node-a" for r in records)
# Back on the link, node-a joined again; it exits 0 only when the coordinator it rejoined ends the run.
for node in (cut_off, spare):
    assert node.wait(timeout=90) == 0
assert [n for k, n, _ in events if k == "node_join"].count("node-a") == 2, events
print("partition: ok", events)
'''
