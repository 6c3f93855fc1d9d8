"""The child process one candidate runs in, seen from the worker: its sandbox, its pipes, its
limits, its death.

Started by the evaluator for each job (evaluator.py); the other end is candidate_runner.py.

The child runs in bubblewrap, in namespaces of its own (PID, mount, user, IPC, network, UTS,
cgroup) and with no capabilities, so what it sees cannot be remounted or escaped. Its file system
is the host's, read-only (/tmp too: the solution and the build cache may lie there), but for its
scratch: its exchange directory, which holds its TMPDIR, and a private /dev/shm (exchange.py says
how CUDA IPC crosses it). The reference, the harness and other jobs' files cannot be changed at
all; guard.py still names the attempt.

The PID namespace's init is bwrap's. When it dies the kernel kills every process in the
namespace, however it detached (fork, setsid, a double fork, from Python or from C), and reports
the init's own end only once all of them are reaped. kill() kills that init and waits for its
end, so nothing a candidate starts outlives its job or holds the worker's pipes open. The worker's
death takes the namespace with it too (die_with, then bwrap's --die-with-parent).
"""
import contextlib
import ctypes
import fcntl
import glob
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import struct
import sys
import termios
import time

from harness import exchange, framing, guard, native_code, timing

HARNESS_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # skills/

# The protections of every sandbox of ours, one list shared with the C++ sandboxes (its "why" says
# what each is for): every namespace, no capabilities, no further user namespace, its own session.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_protections.json")) as _f:
    _NAMESPACES = json.load(_f)["flags"]
_RUNNER_PID = "2"  # in its namespace: bwrap's init is 1 and starts the command next
_bwrap = None


def sandbox_program():
    """bwrap, tried once per worker. A candidate never runs uncontained: a host where the sandbox
    cannot start fails every job with this one line instead."""
    global _bwrap
    if _bwrap is None:
        path = shutil.which("bwrap")
        if path is None:
            raise RuntimeError("harness: bubblewrap (bwrap) is not on PATH; every candidate runs in its "
                               "sandbox (apt-get install bubblewrap)")
        tried = subprocess.run([path, *_NAMESPACES, "--ro-bind", "/", "/", "true"], capture_output=True, text=True)
        if tried.returncode != 0:
            why = (tried.stderr.strip().splitlines() or [f"status {tried.returncode}"])[0]
            raise RuntimeError(f"harness: bubblewrap cannot start the candidate's sandbox here ({why}); "
                               "it needs user namespaces and bubblewrap 0.8 or later")
        _bwrap = path
    return _bwrap


def sandbox_command(exchange_dir, shm_dir, command, *options):
    """command in the child's sandbox. Its view: everything read-only, its own /dev (the GPU's
    device files bound in, none on a CPU host) and /proc, and writable only its exchange
    directory and private /dev/shm. The exchange directory is bound last: where it is on /dev/shm,
    its mount point lies inside the private one."""
    view = ["--ro-bind", "/", "/", "--dev", "/dev"]
    for node in sorted(glob.glob("/dev/nvidia*")):
        view += ["--dev-bind", node, node]
    view += ["--proc", "/proc", "--bind", shm_dir, "/dev/shm", "--bind", exchange_dir, exchange_dir,
             "--chdir", exchange_dir]
    return [sandbox_program(), *_NAMESPACES, *view, *options, "--", *command]


_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def die_with(parent_pid):
    """In the sandbox's bwrap before exec: be killed when the worker dies (its --die-with-parent
    then takes the namespace along). It runs in a session of its own, so a kill of the worker's
    process group does not reach it."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the worker died before the line above
        os._exit(1)


class CandidateFailure(Exception):
    """The candidate's child crashed, hung, or failed a command; the message says which, and
    violation, where set, is the (name, detail) the candidate earned by it."""

    def __init__(self, message, violation=None):
        super().__init__(message)
        self.violation = violation


# After a reply shows up, how long the child's main loop has to be back in its read. Its write is
# the last thing it does before that read, so an honest child is there within microseconds.
LOOP_GRACE_S = 5.0
_F_SETPIPE_SZ = 1031
REPLY_PIPE_BYTES = 1 << 20  # room for any reply: the worker reads none before the loop wrote it whole
_SO_TIMESTAMPNS = 35  # = SCM_TIMESTAMPNS (asm-generic, x86-64 and aarch64); Python's socket lacks it


def pending_bytes(fd):
    """Bytes waiting in the pipe fd is an end of."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


class LoopWatch:
    """Whether the child's main loop, and nothing else in its process, answered a request, seen
    from outside the child, where the candidate cannot reach (docs/ARCHITECTURE.md, "The reply
    comes from the child's main loop").

    The loop reads every request's 8-byte header with a read() called straight from main()'s
    frame; every handler, and with it all candidate code, runs in a deeper C frame
    (candidate_runner.main calls them through operator.call). Where the main thread blocks in that
    read (the system call, its fd and count, the stack pointer and program counter of
    /proc/PID/syscall) is recorded once, after the ready frame and before any candidate code. A
    reply counts as the loop's only once the main thread is blocked there again, has read the
    whole request since it was sent (its own byte count, /proc/PID/task/PID/io: not a thread of the
    candidate's that took the request), and the command pipe is empty: the loop writes its reply
    just before it reads again. Code of the candidate's that serves the protocol itself, from
    inside forward or from a thread, is never there."""

    def __init__(self, pid, cmd_fd):
        self.pid, self.cmd_fd = pid, cmd_fd
        self.idle = None

    def position(self):
        """(call, fd, count, sp, pc) where the main thread is blocked in a system call, None while
        it runs; OSError once the process is gone or will not be watched."""
        with open(f"/proc/{self.pid}/syscall") as f:
            fields = f.read().split()
        if len(fields) < 9:  # "running", or "-1 sp pc" when stopped outside a system call
            return None
        return fields[0], int(fields[1], 16), int(fields[3], 16), fields[7], fields[8]

    def bytes_read(self):
        """What the main thread has read so far, in bytes (rchar: files, pipes, anything)."""
        with open(f"/proc/{self.pid}/task/{self.pid}/io") as f:
            for line in f:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
        raise OSError(f"/proc/{self.pid}/task/{self.pid}/io has no rchar")

    def record_idle(self, deadline):
        """Where the loop waits for requests, taken right after its ready frame."""
        seen = [None]

        def waiting():
            try:
                at = seen[0] = self.position()
            except OSError as e:
                raise RuntimeError(f"harness: cannot watch the candidate's process ({e}); the harness "
                                   "reads /proc/PID/syscall and /proc/PID/task/PID/io of its child")
            if at is None or at[1:3] != (self.cmd_fd, 8):
                return False
            self.idle = at
            self.bytes_read()  # fails here, before any candidate code, where io is not readable
            return True

        if not _poll(waiting, deadline):
            raise RuntimeError(f"harness: the candidate's process never waited for a request "
                               f"(its main thread: {seen[0]}); cannot watch its main loop")

    def answered(self, read_until, cmd_w, deadline):
        """True once the loop is back in its read with the request consumed, False at the
        deadline, None when the process is gone."""
        def back():
            return (self.position() == self.idle and self.bytes_read() >= read_until
                    and pending_bytes(cmd_w) == 0)

        try:
            return _poll(back, deadline)
        except OSError:
            return None


class WorkerClock:
    """The worker's end of the clock that times the child's runs (timing.py says why; the child's
    end is timing.ChildClock). On READY it reads its own clock and sends GO; DONE comes stamped by
    the kernel as the child sent it (SO_TIMESTAMPNS, CLOCK_REALTIME like time.time_ns), so the
    worker's wake-up is no part of the span. Only that order is accepted: a message that is not
    the one due, one already waiting behind READY (a DONE sent ahead by a thread of the
    candidate's), or a DONE sent before GO, is something else writing into the channel."""

    def __init__(self, sock):
        self.sock = sock
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        self.elapsed_ns = []  # the current request's handshakes, each GO to DONE
        self.open = False  # a GO sent and its DONE not read
        self.null_ns = None  # the fastest handshake around no call, taken at load

    def serve(self, reply_r, deadline):
        """One handshake, READY being readable. None once it is served or cut short (the deadline
        passed, or the reply came first: the caller sees which); "closed" where the child's end
        is; else what was out of order."""
        fd = self.sock.fileno()
        message = self.sock.recv(16)
        if not message:
            return "closed"
        if message != timing.READY or pending_bytes(fd):
            return f"the clock's channel held {message!r} and {pending_bytes(fd)} byte(s) more where READY alone was due"
        timeout = max(0.0, deadline - time.monotonic())
        start = time.time_ns()
        self.sock.send(timing.GO)
        self.open = True
        ready, _, _ = select.select([fd, reply_r], [], [], timeout)
        if fd not in ready:
            return None
        message, ancillary, _, _ = self.sock.recvmsg(16, socket.CMSG_SPACE(16))
        end = time.time_ns()  # where the kernel gave no stamp: later, never earlier
        for level, kind, data in ancillary:
            if (level, kind) == (socket.SOL_SOCKET, _SO_TIMESTAMPNS) and len(data) >= 16:
                seconds, nanoseconds = struct.unpack("qq", data[:16])
                end = seconds * 1_000_000_000 + nanoseconds
        if not message:
            return "closed"
        if message != timing.DONE or end < start:
            return f"the clock's channel held {message!r} where DONE was due" if message != timing.DONE \
                else "DONE was sent before GO"
        self.open = False
        self.elapsed_ns.append(end - start)
        return None

    def ms(self):
        """The current request's handshakes in milliseconds, less the null round trip."""
        return [(ns - (self.null_ns or 0)) / 1e6 for ns in self.elapsed_ns]


def _poll(condition, deadline):
    """Whether condition() came true before deadline, checked at first every 100 µs, backing off
    to every 5 ms: an honest child is back within microseconds, a stuck one costs little CPU."""
    delay = 0.0001
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.005)
    return True


def _forged(detail):
    return ("forged_reply", detail)


def signal_name(sig):
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


class CandidateProcess:
    """One candidate's child: its sandbox, private command/reply pipes, limits. It starts in its
    private exchange directory and moves to the solution's at load, so that it can be started
    ahead of the job it will serve; its first frame says it is ready (torch, CUDA and the guards
    up, no candidate code run yet)."""

    def __init__(self, device, memory_limit_mb, python=sys.executable):
        self.device, self.memory_limit_mb = device, memory_limit_mb
        self.ready = False
        sandbox_program()  # first: where the sandbox cannot start, nothing is made
        self.exchange = exchange.Exchange(exchange.make_directory(), exchange.make_shm_directory())
        scratch = os.path.join(self.exchange.directory, "tmp")
        os.mkdir(scratch)
        env = dict(os.environ)
        env["PYTHONPATH"] = HARNESS_ROOT
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["OMP_WAIT_POLICY"] = "PASSIVE"  # idle pool threads sleep, so lingering work shows
        # temporary files and the caches torch and Triton write go to the scratch
        env.update(TMPDIR=scratch, XDG_CACHE_HOME=os.path.join(scratch, "cache"),
                   TRITON_CACHE_DIR=os.path.join(scratch, "triton"))
        limit = int(memory_limit_mb) << 20 if device == "cpu" and memory_limit_mb else 0
        cmd_r, self.cmd_w = os.pipe()
        self.reply_r, reply_w = os.pipe()
        with contextlib.suppress(OSError):  # over /proc/sys/fs/pipe-max-size: the child checks the size
            fcntl.fcntl(self.reply_r, _F_SETPIPE_SZ, REPLY_PIPE_BYTES)
        self.child_cmd_fd = cmd_r
        self.watch = None  # LoopWatch, once the child is ready
        self.loaded_code = None  # native_code.LoadedCode, once the child is ready
        info_r, info_w = os.pipe()
        # What the child's guards catch, written through as they catch it (guard.Violations).
        self.violations_r, violations_w = os.pipe()
        os.set_blocking(self.violations_r, False)
        # The worker's clock around each timed run (WorkerClock). A socket, not a pipe: the kernel
        # stamps what the child sends on it, and the child cannot reopen it (as it can a pipe's end,
        # through /proc) to write the worker's part.
        clock, child_clock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.clock = WorkerClock(clock)
        self.clock_r = clock.fileno()
        clock_w = child_clock.fileno()
        worker_pid = os.getpid()

        def limits():
            die_with(worker_pid)
            if limit:  # CUDA reserves huge address ranges, so the address-space cap is CPU-only
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        # -P: the working directory is not put on sys.path; load adds the solution's explicitly.
        # The child's stdout is the worker's stderr, so a print cannot reach the reply channel.
        command = [python, "-P", "-m", "harness.candidate_runner", "--cmd-fd", str(cmd_r),
                   "--reply-fd", str(reply_w), "--violations-fd", str(violations_w),
                   "--clock-fd", str(clock_w), "--device", device]
        command = sandbox_command(self.exchange.directory, self.exchange.shm_directory, command,
                                  "--info-fd", str(info_w))
        self.proc = subprocess.Popen(
            command, pass_fds=(cmd_r, reply_w, info_w, violations_w, clock_w), stdin=subprocess.DEVNULL,
            stdout=sys.stderr.fileno(), cwd=self.exchange.directory, env=env, start_new_session=True,
            preexec_fn=limits)
        for fd in (cmd_r, reply_w, info_w, violations_w):
            os.close(fd)
        child_clock.close()
        self.init_pid, self.init = self._namespace_init(info_r)

    def _namespace_init(self, info_r):
        """The pid of the namespace's init and a pidfd of it, from bwrap's --info-fd (written and
        closed as the namespace is made); (None, None) where bwrap failed before."""
        with os.fdopen(info_r, "rb") as f:
            info = f.read()
        try:
            pid = json.loads(info)["child-pid"]
            return pid, os.pidfd_open(pid)
        except (ValueError, KeyError, ProcessLookupError):
            return None, None

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
            raise self._death("while starting")
        self.watch = LoopWatch(self._runner_pid(), self.child_cmd_fd)
        self.watch.record_idle(time.monotonic() + LOOP_GRACE_S)
        # The code mapped before any candidate code is the installation's; what is mapped later is
        # judged after each request (native_code.LoadedCode).
        self.loaded_code = native_code.LoadedCode(self.watch.pid, [self.exchange.directory])
        self.ready = True

    def _runner_pid(self):
        """The runner's pid as this process sees it: the one child of the namespace's init."""
        if self.init_pid is None:
            raise self._death("while starting")
        with open(f"/proc/{self.init_pid}/task/{self.init_pid}/children") as f:
            children = f.read().split()
        if len(children) != 1:
            raise RuntimeError(f"harness: the sandbox's init has {len(children)} children at start, not the runner alone")
        return int(children[0])

    def request(self, msg, deadline):
        """msg's reply, accepted only as the child's main loop's (LoopWatch); whatever else wrote
        into the reply channel, or answered in the loop's place, ends the job (forged_reply)."""
        self.await_ready(deadline)
        op = msg["op"]
        try:
            read_until = self.watch.bytes_read()
            read_until += framing.write_frame(self.cmd_w, msg, wide=True)
        except OSError:
            raise self._death("before the request")
        self.clock.elapsed_ns = []  # this request's handshakes
        if not self._await_reply(op, deadline):
            self.kill()
            raise CandidateFailure(f"timed out: the candidate did not finish {op} within its time limit")
        answered = self.watch.answered(read_until, self.cmd_w, time.monotonic() + LOOP_GRACE_S)
        if answered is None:
            raise self._death(f"during {op}")
        if not answered:
            self.kill()
            detail = f"a reply to {op} came, and the runner's main loop was not back in its read {LOOP_GRACE_S:g} s later"
            raise CandidateFailure(f"the candidate answered in the harness's place: {detail}", _forged(detail))
        try:
            reply = framing.read_frame(self.reply_r, wide=True)
        except (framing.ChannelClosed, ValueError, Exception) as e:
            if isinstance(e, framing.ChannelClosed):
                raise self._death(f"during {op}")
            self.kill()
            raise CandidateFailure(f"the candidate corrupted the reply channel ({type(e).__name__})",
                                   _forged(f"an unreadable reply to {op}"))
        if pending_bytes(self.reply_r) or not isinstance(reply, dict):
            self.kill()
            detail = f"more than the runner's reply to {op} was written into the reply channel"
            raise CandidateFailure(f"the candidate wrote into the harness's reply channel: {detail}", _forged(detail))
        self._check_clock(op, msg, reply)
        # What the child wrote through (its reply's own list can have been emptied in the child;
        # what was sent cannot) and what the worker sees from outside, added to the reply's list:
        # processes it started, and shared objects it mapped whose symbols fail native_code's check.
        found = self._sent_violations()
        started = self._started_processes()
        if started:
            found.append(("spawns_process", f"{len(started)} process(es) it started still running after {op}"))
        found += self.loaded_code.new_violations().items()
        if found:
            violations = reply.get("violations") if isinstance(reply.get("violations"), dict) else {}
            for name, detail in found:
                violations.setdefault(name, detail)
            reply["violations"] = violations
        return reply

    def _await_reply(self, op, deadline):
        """Whether the reply to op (or the child's end) came before the deadline; meanwhile the
        clock's handshakes are served."""
        watched = [self.reply_r, self.clock_r]
        while True:
            ready, _, _ = select.select(watched, [], [], max(0.0, deadline - time.monotonic()))
            if self.reply_r in ready:
                return True
            if not ready or time.monotonic() >= deadline:
                return False
            tampered = self.clock.serve(self.reply_r, deadline)
            if tampered == "closed":
                watched = [self.reply_r]  # the child is gone: its reply pipe says how
            elif tampered:
                self.kill()
                raise CandidateFailure(f"the candidate wrote into the harness's clock: {tampered}", _forged(tampered))

    def _check_clock(self, op, msg, reply):
        """The reply's request had as many handshakes as it has timed calls (load: the null ones,
        before any candidate code; a time request: its runs), each closed, and nothing more is in
        the clock's channel. Where the request failed, fewer are fine."""
        due = timing.CALIBRATION_RUNS if op == "load" else int(msg.get("runs", 0)) if op == "time" else 0
        done = len(self.clock.elapsed_ns)
        if self.clock.open or done > due or (reply.get("ok") and done != due) or pending_bytes(self.clock_r):
            self.kill()
            detail = f"{done} clock handshake(s) for {op}, {due} due, or bytes left in the clock's channel"
            raise CandidateFailure(f"the candidate wrote into the harness's clock: {detail}", _forged(detail))
        if op == "load" and done:
            self.clock.null_ns = min(self.clock.elapsed_ns)

    def clock_ms(self):
        """The worker's own time of each timed call of the last request, in milliseconds: its
        handshake, less the null one (timing.py)."""
        return self.clock.ms()

    def _sent_violations(self):
        """(name, detail) of every violation the child's guards wrote through since the last reply."""
        data = b""
        while True:
            try:
                chunk = os.read(self.violations_r, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        out = []
        for line in data.decode("utf-8", "replace").splitlines():
            name, _, detail = line.partition("\t")
            if name in guard.VIOLATIONS:
                out.append((name, detail))
        return out

    def _started_processes(self):
        """The processes in the child's PID namespace besides bwrap's init and the runner, seen in
        the namespace's own /proc: whatever the candidate started, by any route (guard.py's audit
        hook sees only Python's) and however detached."""
        if self.init_pid is None:  # bwrap failed before it made the namespace
            return []
        try:
            pids = os.listdir(f"/proc/{self.init_pid}/root/proc")
        except OSError:  # the namespace is gone: the reply is the last word
            return []
        return [p for p in pids if p.isdigit() and p not in ("1", _RUNNER_PID)]

    def _death(self, when):
        """The failure of a child that closed its channel: how it ended, and the violation its
        exit status names, if any."""
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            return CandidateFailure(f"the candidate closed its channel {when}")
        if code > 128:  # bwrap exits with 128 + N for a child killed by signal N
            code = -(code - 128)
        if code == framing.EXIT_CHANNEL_TAMPERED:
            detail = f"the runner found its reply channel written into or replaced {when}"
            return CandidateFailure(f"the candidate wrote into the harness's reply channel: {detail}", _forged(detail))
        if code < 0:
            return CandidateFailure(f"crashed: the candidate was killed by signal {signal_name(-code)} {when}")
        return CandidateFailure(f"crashed: the candidate exited with status {code} {when}")

    def kill(self):
        """Kills the namespace's init, and with it everything in the namespace, and returns once
        the kernel reports the init's end: by then every other process there has been reaped."""
        if self.init is None:  # bwrap failed before it made the namespace
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        else:
            try:
                signal.pidfd_send_signal(self.init, signal.SIGKILL)
            except ProcessLookupError:
                pass
            select.select([self.init], [], [])
        self.proc.wait()

    def put(self, obj, tag):
        return self.exchange.put(obj, tag)

    def take(self, name):
        """What the child put under name; a bad or missing file is the candidate's failure."""
        try:
            return self.exchange.take(name)
        except Exception as e:
            raise CandidateFailure(f"the candidate's reply named no readable tensors ({type(e).__name__}: {e})")

    def close(self):
        # On CUDA the child lets go of the memory it shared before it exits (candidate_runner's
        # release); a CPU child has nothing to release and is killed at once (its interpreter's
        # exit took 1-2 s of every job).
        if self.device.startswith("cuda") and self.proc.poll() is None:
            try:
                framing.write_frame(self.cmd_w, {"op": "exit"}, wide=True)
                self.proc.wait(timeout=5)
            except Exception:
                pass
        self.kill()  # the whole namespace: whatever the candidate started goes too
        for fd in (self.cmd_w, self.reply_r, self.violations_r, self.init):
            if fd is not None:
                os.close(fd)
        self.clock.sock.close()
        self.cmd_w = self.reply_r = self.violations_r = self.clock_r = self.init = None
        self.exchange.remove()
