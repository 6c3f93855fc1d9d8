"""The persistent harness worker: one per device, started and supervised by the C++ side
(actors/harness/harness_process.cpp).

Reads requests and writes replies as msgpack maps framed by a 4-byte big-endian length on standard
input and output; standard error is its log. Ops: ping, task, verify, profile, evaluate, shutdown.
Every reply carries `ok` and `error`; a job reply carries `record` (messages.hpp reward_record),
`verify` (verify_result), `profile` (profile_result) and `phases_ms` (where the job's time went,
evaluator.PhaseLog). A reply whose job failed because the task is broken (evaluator.TaskError)
has ok false and `task_error` set: the failure is the task's, not the candidate's. A job request
that does not fit the wire (skills/harness/wire.py: an unknown field, a value of the wrong kind)
has ok false and `wire_error` set: the caller's fault, never judged.
"""
import math
import os
import sys
import traceback

import torch

from harness import framing
from harness.evaluator import Evaluator, TaskError
from harness.wire import WireError


def finite_or_nan(x):
    return float(x) if x is not None and not (isinstance(x, float) and math.isnan(x)) else math.nan


def main():
    reply_fd = os.dup(1)
    os.dup2(2, 1)  # anything printed by a task or by torch goes to the log, not into the protocol
    sys.stdout = sys.stderr
    evaluator = Evaluator()
    try:
        return serve(evaluator, reply_fd)
    finally:
        evaluator.close()  # the spare child, started for a job that will not come


def serve(evaluator, reply_fd):
    while True:
        try:
            req = framing.read_frame(0)
        except framing.ChannelClosed:
            return 0
        op = req.get("op")
        reply = {"ok": True, "error": "", "op": op}
        try:
            if op == "ping":
                reply.update(pid=os.getpid(), torch_version=torch.__version__,
                             cuda=torch.cuda.is_available())
            elif op == "task":
                evaluator.check_task(req)
            elif op in ("evaluate", "verify", "profile"):
                record, verify, profile, phases_ms = evaluator.run(req, want_profile=(op != "verify"))
                reply.update(record=record, verify=verify, profile=profile, phases_ms=phases_ms)
            elif op == "shutdown":
                framing.write_frame(reply_fd, reply)
                return 0
            else:
                reply.update(ok=False, error=f"unknown op {op!r} (ping, task, evaluate, verify, profile, shutdown)")
        except TaskError as e:
            reply.update(ok=False, error=str(e), task_error=str(e))
        except WireError as e:
            reply.update(ok=False, error=str(e), wire_error=str(e))
        except Exception as e:  # a broken task or installation: the job fails, the worker lives
            traceback.print_exc()
            reply.update(ok=False, error=f"{type(e).__name__}: {e}")
        framing.write_frame(reply_fd, reply)

if __name__ == "__main__":
    sys.exit(main())
