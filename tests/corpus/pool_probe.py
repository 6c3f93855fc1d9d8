"""Functions for worker-pool tests to run in a worker process (by "pool_probe:NAME")."""
import os
import signal
import time


def echo(payload):
    return {"value": payload.get("value"), "pid": os.getpid(),
            "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "threads": os.environ.get("OMP_NUM_THREADS")}


def sleep(payload):
    time.sleep(payload.get("seconds", 1000))
    return {"slept": True}


def segfault(payload):
    os.kill(os.getpid(), signal.SIGSEGV)


def exit_now(payload):
    os._exit(3)


def boom(payload):
    raise ValueError("boom")


def chatty(payload):
    print("a task printing to standard output must not break the protocol")
    return {"printed": True}


def dispatch_by_payload(payload):
    """Runs the function named by payload["fn"]: one pool run can mix behaviours."""
    return globals()[payload["fn"]](payload)
