"""Rollouts whose GPU slots and compiler workers all come from node processes over TCP: a node
SIGKILLed mid-job whose job runs on a node that joins later, a node with the wrong token, and the
same over TLS with peers whose certificates the authority did not sign.

Everything is real: `cuda-agent rollout --listen` (the coordinator), `cuda-agent node --join`
processes, the demo policy's episodes through the sandboxed tools, builds and the CPU harness.
"""
import os
import shutil
import signal
import subprocess

import pytest

from cluster_run import (BINARY, Coordinator, check_run, membership, node_busy, settings, start_node,
                         token_file, wait_until)


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
    coordinator = Coordinator(scratch, token, extra=tls)
    assert "(TLS)" in open(coordinator.err_path).read()
    assert "nodes 0" in coordinator.status(token, extra=tls)
    # Plain TCP, or TLS with a certificate the authority did not sign: no connection at all.
    plain = coordinator.status(token)
    assert "disconnect_during_handshake" in plain and "nodes" not in plain, plain
    # Both sides reject the stranger's handshake; whichever side gives up first decides whether the
    # client names a dropped handshake or a failed connection, so either is a refusal here.
    stranger_cert, stranger_key = self_signed(scratch, "stranger")
    stranger = coordinator.status(token, extra=tls_settings(stranger_cert, stranger_key, stranger_cert))
    assert "nodes" not in stranger, stranger
    assert "disconnect_during_handshake" in stranger or "cannot_connect_to_node" in stranger, stranger
    node = start_node(scratch, coordinator, token, "node-tls", extra=tls)
    records, _ = check_run(scratch, coordinator)
    assert node.wait(timeout=60) == 0
    assert [n for t, n, _ in membership(records) if t == "node_join"] == ["node-tls"]


def test_a_node_of_several_gpus_is_one_process_per_gpu_that_stop_together(scratch):
    """`node --gpus 0,1` forks one node per GPU (simulated slots here: this host has no GPU), named
    <name>-gpu<N>, each offering one GPU slot of its own GPU; SIGTERM to the parent stops both,
    which leave the coordinator, and the parent exits 0."""
    token = token_file(scratch, "token", "the-cluster-token-0123456789")
    coordinator = Coordinator(scratch, token)
    err = open(os.path.join(scratch, "multi.err"), "w")
    parent = subprocess.Popen([BINARY] + settings(scratch) + ["node", "--join", coordinator.address(), "--token-file", token,
                               "--gpus", "0,1", "--simulate-job-ms", "10", "--name", "multi"],
                              stdout=err, stderr=err, cwd=scratch)

    def rows():
        return {line.split()[0]: line for line in coordinator.status(token).splitlines()
                if line.startswith("multi-")}
    try:
        wait_until(lambda: set(rows()) == {"multi-gpu0", "multi-gpu1"}, 60, "both GPUs' nodes to join")
        for name, row in rows().items():
            # One GPU slot each (idle: simulated nodes offer no compiler, so nothing gets built).
            assert " 0/1 " in row and row.endswith(f"(GPU {name[-1]})"), row
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=60) == 0, open(os.path.join(scratch, "multi.err")).read()
        wait_until(lambda: not rows(), 30, "both nodes to leave")
    finally:
        if parent.poll() is None:
            parent.kill()
    out = open(os.path.join(scratch, "multi.err")).read()
    assert "node multi-gpu0: stopped; left the coordinator" in out and "node multi-gpu1: stopped" in out, out
    coordinator.proc.kill()


@pytest.mark.parametrize("gpus, message", [("0,x", "'x' is not a GPU index"), ("1,1", "GPU 1 is listed twice"),
                                           ("0,", "'' is not a GPU index")])
def test_a_bad_gpu_list_is_refused_in_one_line(scratch, gpus, message):
    token = token_file(scratch, "token", "the-cluster-token-0123456789")
    done = subprocess.run([BINARY, "node", "--join", "127.0.0.1:9", "--token-file", token, "--gpus", gpus,
                           "--simulate-job-ms", "1"], capture_output=True, text=True, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and message in lines[0], done.stderr
