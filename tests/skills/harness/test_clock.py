"""The worker's clock around the child's timed runs (timing.ChildClock, candidate_process.WorkerClock),
without a sandbox or a candidate: a forked child that times a 20 ms call and reports 0.001 ms."""
import os
import select
import socket
import time

from harness import candidate_process, timing

CALL_S = 0.02


def serve(clock, reply_r, handshakes):
    """Serves the child's handshakes as the worker's request loop does; the tampering found, if any."""
    deadline = time.monotonic() + 30
    for _ in range(handshakes):
        select.select([clock.sock], [], [], deadline - time.monotonic())
        tampered = clock.serve(reply_r, deadline)
        if tampered:
            return tampered
    return None


def fork_child(run):
    """A child holding the other end of a clock socket, running run(fd); the worker's end."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        mine.close()
        try:
            run(theirs.fileno())
        finally:
            os._exit(0)
    theirs.close()
    return pid, candidate_process.WorkerClock(mine)


def test_the_workers_time_counts_where_the_child_lies():
    def run(fd):
        clock, timer = timing.ChildClock(fd), timing.Timer("cpu")
        for _ in range(timing.CALIBRATION_RUNS):
            timer.time_once(timing.nothing, [], clock)
        timer.time_once(time.sleep, [CALL_S], clock)  # the call its own (rewritten) clock says took 0.001 ms

    reply_r, reply_w = os.pipe()
    pid, clock = fork_child(run)
    try:
        assert serve(clock, reply_r, timing.CALIBRATION_RUNS) is None
        clock.null_ns = min(clock.elapsed_ns)
        assert clock.null_ns < 0.5 * CALL_S * 1e9, clock.elapsed_ns
        clock.elapsed_ns = []
        assert serve(clock, reply_r, 1) is None
    finally:
        os.waitpid(pid, 0)
        os.close(reply_r)
        os.close(reply_w)
    [bound] = clock.ms()
    assert CALL_S * 1e3 <= bound < CALL_S * 1e3 + 50, bound  # 50 ms: a loaded host's wake-ups
    assert timing.counted([0.001], [bound]) == [bound]
    # an honest child's own sample is kept where it is the larger
    assert timing.counted([bound + 1], [bound]) == [bound + 1]


def test_a_span_the_host_stretched_counts_at_most_the_median():
    # The child's own samples lie (0.001 ms); the worker's spans are the truth, one of them
    # stretched by a preemption before the child saw GO. The median is the spans' median.
    counted = timing.counted([0.001] * 5, [0.30, 0.31, 0.32, 0.33, 5.0])
    assert counted == [0.30, 0.31, 0.32, 0.32, 0.32]
    assert sorted(counted)[2] == 0.32


def test_a_done_sent_ahead_is_tampering():
    def run(fd):
        os.write(fd, timing.READY)
        os.write(fd, timing.DONE)  # before GO, as a thread of the candidate's could
        time.sleep(1)

    reply_r, reply_w = os.pipe()
    pid, clock = fork_child(run)
    try:
        time.sleep(0.2)
        assert "READY alone was due" in serve(clock, reply_r, 1)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(reply_r)
        os.close(reply_w)
    assert clock.elapsed_ns == []


def test_a_message_out_of_order_is_tampering():
    def run(fd):
        os.write(fd, timing.DONE)
        time.sleep(1)

    reply_r, reply_w = os.pipe()
    pid, clock = fork_child(run)
    try:
        assert "READY alone was due" in serve(clock, reply_r, 1)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(reply_r)
        os.close(reply_w)
