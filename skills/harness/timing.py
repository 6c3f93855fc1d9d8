"""One timing method for eager, torch.compile and the candidate (DESIGN.md, Timing).

Each run gets freshly cloned inputs; on CUDA the L2 cache is flushed by writing a buffer larger
than it, the device is synchronised before the start mark and again before the end mark, so work
left on any stream is counted. Between the first synchronisation and the start mark the GPU spins
for about a millisecond (LAUNCH_PAD_CYCLES): the host queues the call meanwhile, so the start mark
is stamped with the call's first kernel already waiting behind it. Without the pad the GPU sat idle
while Python and the dispatcher launched that kernel, and every run counted that host time
(docs/benchmarks.md, timing study). On CPU the wall clock brackets the call. The timers are
bound here, at import, before any candidate code runs.

The candidate's process cannot be trusted with its own clock: native code there can rewrite libc's
clock_gettime, the vDSO or the CUDA event calls. So each of its timed runs is also timed by the
worker (ChildClock here, candidate_process.WorkerClock there): with its inputs ready the child
sends READY and waits for GO, which the worker sends after reading its own clock; once the call
(and on CUDA its synchronisation) is over the child sends DONE, which the kernel stamps as it is
sent (SO_TIMESTAMPNS), so neither the candidate nor the worker's own wake-up can move it. That
span, less the null one (the same bracket around no call, taken before any candidate code ran)
and, on CUDA, the launch pad, is a time the candidate cannot shrink; the sample that counts is the
larger of it and the child's own (counted).
"""
import contextlib
import fcntl
import math
import os
import select
import statistics
import tempfile
import time
from time import perf_counter_ns as _perf_counter_ns

import torch

from harness import framing

L2_FLUSH_BYTES = 256 << 20  # H200 L2 is 60 MB; four times over leaves nothing behind
LAUNCH_PAD_CYCLES = 2_000_000  # about 1 ms at the H200's 1.98 GHz: longer than a call's launch

_cuda_synchronize = torch.cuda.synchronize
_CudaEvent = torch.cuda.Event
_cuda_sleep = torch.cuda._sleep
_os_read, _os_write, _os_fstat, _os_exit, _select = os.read, os.write, os.fstat, os._exit, select.select

# The clock handshake's messages: the child sends READY and DONE, the worker GO.
READY, GO, DONE = b"R", b"G", b"D"
# Null round trips the worker takes at load, before any candidate code; it keeps the fastest (a
# busy moment there, a spare child starting say, only makes the others slower).
CALIBRATION_RUNS = 16
# How long the child spins for GO before it blocks: longer than the worker takes to wake on READY
# on another core; on the worker's own core it only delays the worker, before its clock starts.
GO_SPIN_NS = 200_000


def clone_inputs(inputs):
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


class ChildClock:
    """The child's end of the worker's clock: one AF_UNIX SOCK_SEQPACKET socket, given by the
    worker at start (candidate_process.WorkerClock is the other end). Waiting for GO it spins a
    while before it blocks: a wake-up from sleep would count in the worker's time. (Yielding in
    that spin handed the core to another task for its whole slice, about 2 ms, at times as GO
    came.) DONE needs no answer: the kernel stamps it as it is sent.
    GO out of order or the socket replaced means something else has the channel: the child exits
    at once, as its main loop does for the reply channel, and the worker names it (forged_reply)."""

    def __init__(self, fd):
        self.fd = fd
        self.file = self._file()
        os.set_blocking(fd, False)

    def _file(self):
        stat = _os_fstat(self.fd)
        return stat.st_dev, stat.st_ino

    def start(self):
        if self._file() != self.file:
            _os_exit(framing.EXIT_CHANNEL_TAMPERED)
        _os_write(self.fd, READY)
        until = _perf_counter_ns() + GO_SPIN_NS
        while True:
            try:
                got = _os_read(self.fd, 16)
                break
            except BlockingIOError:
                if _perf_counter_ns() > until:
                    _select([self.fd], [], [])
        if got != GO:
            _os_exit(framing.EXIT_CHANNEL_TAMPERED)

    def stop(self):
        _os_write(self.fd, DONE)
        if self._file() != self.file:  # after the write: the time ends at DONE's kernel stamp
            _os_exit(framing.EXIT_CHANNEL_TAMPERED)


def nothing():
    """The null call the clock is calibrated with."""


def counted(child_ms, worker_ms):
    """The candidate's samples that count: each the child's own, but never below the worker's
    span of that run, a span taken at most at the median of the measurement's spans. A child that
    rewrote its clock gains nothing that way, and cannot lower that median; a span stretched by the
    host (the child preempted before it saw GO) is no part of an honest candidate's time."""
    cap = statistics.median(worker_ms) if worker_ms else 0.0
    return [max(c, min(w, cap)) for c, w in zip(child_ms, worker_ms)]


class Timer:
    def __init__(self, device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.flush_buffer = None
        if self.cuda:
            self.flush_buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=self.device)

    def time_once(self, fn, inputs, clock=None, pad_cycles=LAUNCH_PAD_CYCLES, at_clock=None):
        """Milliseconds of one call of fn on a fresh clone of inputs, and its output. A clock
        (ChildClock) brackets the call with the worker's: opened after the inputs are ready (and
        on CUDA the flush done), closed after the end mark. at_clock, if given, is called with the
        output and the inputs' clone as soon as the time is read: what it returns comes back third. Nothing the call received is let go before then, so nothing
        hung on its release (a weakref callback, a finalizer) runs between the clock and it."""
        args = clone_inputs(inputs)
        with torch.no_grad():
            if self.cuda:
                self.flush_buffer.fill_(1)
                start, end = _CudaEvent(enable_timing=True), _CudaEvent(enable_timing=True)
                _cuda_synchronize()
            if clock is not None:
                clock.start()
            try:
                if self.cuda:
                    _cuda_sleep(pad_cycles)
                    start.record()
                    out = fn(*args)
                    _cuda_synchronize()  # device-wide: work on side streams is counted
                    end.record()
                    end.synchronize()
                else:
                    t0 = _perf_counter_ns()
                    out = fn(*args)
                    t1 = _perf_counter_ns()
            finally:
                if clock is not None:
                    clock.stop()
            ms = start.elapsed_time(end) if self.cuda else (t1 - t0) / 1e6
            if at_clock is None:
                return ms, out
            return ms, out, at_clock(out, args)

    def pad_ms(self):
        """How long the launch pad spins now, in milliseconds: on CUDA the worker's bracket of a
        child's run holds one, which the worker's bound of that run leaves out."""
        if not self.cuda:
            return 0.0
        start, end = _CudaEvent(enable_timing=True), _CudaEvent(enable_timing=True)
        _cuda_synchronize()
        start.record()
        _cuda_sleep(LAUNCH_PAD_CYCLES)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)


# One CPU job's timed runs at a time on this host, whichever worker or rollout it belongs to.
CPU_TIMING_LOCK = os.path.join(tempfile.gettempdir(), "cuda-agent-cpu-timing.lock")


def threads_of(pid):
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def process_tree(pid):
    """pid and every process descended from it (the candidate's child runs under a sandbox's
    own processes)."""
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        for tid in threads_of(p):
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except OSError:
                pass
    return tree


def tree_threads(pid):
    """(process, thread) ids of every thread in pid's process tree."""
    return [(p, tid) for p in process_tree(pid) for tid in threads_of(p)]


def pin(pid, cpus):
    """Moves every thread of pid's process tree onto cpus; threads started later inherit them."""
    for _, tid in tree_threads(pid):
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass  # a thread that has just ended


@contextlib.contextmanager
def held_cores(cpus, child_pid):
    """On CPU: the timed runs of one job hold the cores `cpus` (harness.timing_cpus), which the
    process that started the worker keeps everything else of its own off (compilers, episode
    tools, other jobs; actors/harness/cpu_reservation.cpp). The worker and the candidate's child
    move onto them for the timed runs only, under a host-wide lock, and the worker moves back
    after. No cores given: nothing is held."""
    if not cpus:
        yield
        return
    cpus = set(cpus)
    with open(CPU_TIMING_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = os.sched_getaffinity(0)
        pin(os.getpid(), cpus)
        pin(child_pid, cpus)
        try:
            yield
        finally:
            pin(os.getpid(), before)


def busy_threads(pid):
    """Threads of pid's process tree that are running or runnable now (state R in /proc)."""
    busy = 0
    for p, tid in tree_threads(pid):
        try:
            with open(f"/proc/{p}/task/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        busy += state == "R"
    return busy


def wait_quiet(pid, timeout_s=0.2):
    """Waits until no thread of pid's process tree runs (between its requests the child's main thread
    sleeps in a read), so that nothing it left spinning (an OpenMP pool's spin-wait, say) shares
    the cores with the next timed run. Returns how many threads still ran at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        busy = busy_threads(pid)
        if busy == 0 or time.monotonic() >= deadline:
            return busy
        time.sleep(0.001)


def stats(samples_ms):
    """messages.hpp timing_stats: median, mean, min, max, p10, p90, cv, runs."""
    nan = float("nan")
    if not samples_ms:
        return {"median_ms": nan, "mean_ms": nan, "min_ms": nan, "max_ms": nan,
                "p10_ms": nan, "p90_ms": nan, "cv": nan, "runs": 0}
    xs = sorted(samples_ms)
    mean = statistics.fmean(xs)
    sd = statistics.pstdev(xs) if len(xs) > 1 else 0.0

    def pct(p):
        k = (len(xs) - 1) * p
        lo, hi = math.floor(k), math.ceil(k)
        return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

    return {"median_ms": statistics.median(xs), "mean_ms": mean, "min_ms": xs[0], "max_ms": xs[-1],
            "p10_ms": pct(0.1), "p90_ms": pct(0.9), "cv": sd / mean if mean > 0 else nan,
            "runs": len(xs)}
