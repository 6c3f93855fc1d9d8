"""Tensors between the worker and a candidate's child go through files, not the pipe.

A verify of a large task carries several GiB of inputs and outputs: msgpack refuses a single
object over 4 GiB, and pushing gigabytes through a pipe costs seconds per job. Instead the sender
saves the tensors with torch.save into the job's exchange directory and sends only the file's
name; the receiver loads it memory-mapped and removes the file. The directory is private to the
job (mode 0700), on /dev/shm when that has room, else in the temp dir, and is removed with it.

Both sides bind torch.save and torch.load at import, before any candidate code runs.
"""
import atexit
import os
import shutil
import tempfile

import torch

_torch_save = torch.save
_torch_load = torch.load
_SHM = "/dev/shm"
_SHM_MIN_FREE = 16 << 30  # a container's small /dev/shm would fill up: use the disk instead


_PREFIX = "cuda-agent-exchange-"
_root = None


def _base():
    try:
        if shutil.disk_usage(_SHM).free >= _SHM_MIN_FREE:
            return _SHM
    except OSError:
        pass
    return tempfile.gettempdir()


def _sweep(base):
    """Removes the exchange roots of workers that are gone: a worker killed at a job's deadline
    cannot clean up, and on /dev/shm its files would hold memory until the next boot."""
    for name in os.listdir(base):
        pid = name[len(_PREFIX):]
        if not name.startswith(_PREFIX) or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        except PermissionError:
            pass  # alive, another user's


def make_directory():
    """A fresh private directory for one job's exchange files, under this process's root."""
    global _root
    if _root is None or not os.path.isdir(_root):
        base = _base()
        _sweep(base)
        _root = os.path.join(base, f"{_PREFIX}{os.getpid()}")
        os.makedirs(_root, mode=0o700, exist_ok=True)
        atexit.register(shutil.rmtree, _root, ignore_errors=True)
    return tempfile.mkdtemp(prefix="job-", dir=_root)


class Exchange:
    def __init__(self, directory):
        self.directory = directory
        self.count = 0

    def put(self, obj, tag):
        """Saves obj and returns the name to send."""
        self.count += 1
        name = f"{tag}-{os.getpid()}-{self.count}.pt"
        _torch_save(obj, os.path.join(self.directory, name))
        return name

    def take(self, name):
        """Loads what the other side put under name (tensors and plain containers only)."""
        if not isinstance(name, str) or not name or os.path.basename(name) != name or name.startswith("."):
            raise ValueError(f"bad exchange file name {name!r}")
        path = os.path.join(self.directory, name)
        try:
            return _torch_load(path, weights_only=True, mmap=True)
        finally:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def remove(self):
        shutil.rmtree(self.directory, ignore_errors=True)
