"""Tensors between the worker and a candidate's child go through files, not the pipe.

A verify of a large task carries several GiB of inputs and outputs: msgpack refuses a single
object over 4 GiB, and pushing gigabytes through a pipe costs seconds per job. Instead the sender
saves the tensors with torch.save into the job's exchange directory and sends only the file's
name; the receiver loads it memory-mapped and removes the file. The directory is private to the
job (mode 0700), on /dev/shm when that has room, else in the temp dir, and is removed with it.

A candidate's outputs on a CUDA device do not go through the host at all: the child shares them
by CUDA IPC (put_outputs) and the worker maps the same device memory (take). torch's IPC reference
counters keep the child from reusing that memory until the worker has let go of it.

Both sides bind torch.save, torch.load and the IPC calls at import, before any candidate code runs.
"""
import atexit
import os
import re
import shutil
import tempfile

import torch

_torch_save = torch.save
_torch_load = torch.load
_share_cuda = torch.UntypedStorage._share_cuda_
_new_shared_cuda = torch.UntypedStorage._new_shared_cuda
_MAX_DIMS = 64
# torch's CUDA_IPC_REF_COUNTER_FILE_SIZE: int64 counters in one ref-counter file. The receiver
# decrements counter ref_offset of that file when it lets go, so an offset past it would be a
# write anywhere in the worker.
_REF_COUNTERS = 10000
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

    def put_outputs(self, tensors):
        """What to send for a list of output tensors: CUDA IPC descriptors when all are on a CUDA
        device, else the name of a file holding host copies."""
        tensors = [t.detach() for t in tensors]
        if not tensors or not all(t.is_cuda for t in tensors):
            return self.put([t.cpu() for t in tensors], "outputs")
        shared = {}  # one IPC export per storage: outputs may share one
        descriptors = []
        for t in tensors:
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key not in shared:
                shared[key] = _share_cuda(storage)
            (device, handle, storage_bytes, storage_offset_bytes, ref_handle, ref_offset,
             event_handle, event_sync) = shared[key]
            descriptors.append({"dtype": str(t.dtype).replace("torch.", ""), "size": list(t.shape),
                                "stride": list(t.stride()), "offset": t.storage_offset(), "device": device,
                                "handle": handle, "storage_bytes": storage_bytes,
                                "storage_offset_bytes": storage_offset_bytes, "ref_handle": ref_handle,
                                "ref_offset": ref_offset, "event_handle": event_handle,
                                "event_sync": bool(event_sync)})
        return {"cuda_ipc": descriptors}

    def take(self, name, ipc_owner=None):
        """Loads what the other side put under name (tensors and plain containers only), or maps
        the CUDA tensors that put_outputs described in the process whose pid is ipc_owner."""
        if isinstance(name, dict):
            if ipc_owner is None:
                raise ValueError("CUDA IPC descriptors from a process not named")
            return [_map_shared(d, ipc_owner) for d in name.get("cuda_ipc") or []]
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


def owns_shm_name(name, pid):
    """Whether name is a shared-memory file that torch made in process pid. torch names them all
    through at::NewProcessWideShmHandle: /torch_<pid>_<random>_<counter>."""
    return re.fullmatch(rf"/torch_{int(pid)}_\d+_\d+", name) is not None


def _map_shared(d, owner_pid):
    """A tensor over another process's CUDA memory, from a put_outputs descriptor. The descriptor
    comes from the candidate's process: every field is checked, the reference counter must be one
    of that process's own (owns_shm_name) and lie inside its file, and
    torch refuses a view outside the storage."""
    def ints(value, what):
        if not isinstance(value, list) or len(value) > _MAX_DIMS or \
                not all(isinstance(x, int) and x >= 0 for x in value):
            raise ValueError(f"bad {what} {value!r}")
        return value
    if not isinstance(d, dict):
        raise ValueError("a CUDA IPC descriptor is not a map")
    dtype = getattr(torch, str(d.get("dtype")), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"bad dtype {d.get('dtype')!r}")
    size, stride = ints(d.get("size"), "size"), ints(d.get("stride"), "stride")
    if len(size) != len(stride):
        raise ValueError("size and stride differ in length")
    fields = [d.get(k) for k in ("device", "handle", "storage_bytes", "storage_offset_bytes", "ref_handle",
                                 "ref_offset", "event_handle", "event_sync", "offset")]
    device, handle, storage_bytes, storage_offset_bytes, ref_handle, ref_offset, event_handle, event_sync, offset = fields
    if not all(isinstance(x, int) and x >= 0 for x in (device, storage_bytes, storage_offset_bytes, ref_offset, offset)) \
            or not all(isinstance(x, bytes) for x in (handle, ref_handle)) or not isinstance(event_sync, bool) \
            or not (isinstance(event_handle, bytes) or (event_handle is None and not event_sync)):
        raise ValueError("a CUDA IPC descriptor has a field of the wrong type")
    ref_name = ref_handle.decode("ascii", "replace")
    if not owns_shm_name(ref_name, owner_pid) or ref_offset >= _REF_COUNTERS:
        raise ValueError(f"a CUDA IPC reference counter that is not the candidate's ({ref_name!r}, {ref_offset})")
    try:
        counters_bytes = os.stat(os.path.join(_SHM, ref_name[1:])).st_size
    except OSError:
        counters_bytes = 0
    if counters_bytes < 8 * _REF_COUNTERS:  # a shorter file would fault when mapped and counted down
        raise ValueError(f"the CUDA IPC reference counter file {ref_name!r} is missing or short")
    storage = _new_shared_cuda(device, handle, storage_bytes, storage_offset_bytes, ref_handle, ref_offset,
                               event_handle, event_sync)
    return torch.empty(0, dtype=dtype, device=torch.device("cuda", device)).set_(storage, offset, size, stride)
