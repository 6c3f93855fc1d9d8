"""Tensors between the worker and a candidate's child go through files, not the pipe.

A verify of a large task carries several GiB of inputs and outputs: msgpack refuses a single
object over 4 GiB, and pushing gigabytes through a pipe costs seconds per job. Instead the sender
saves the tensors with torch.save into the job's exchange directory and sends only the file's
name; the receiver loads it memory-mapped and removes the file. The directory is private to the
job (mode 0700), on /dev/shm when that has room, else in the temp dir, and is removed with it.

A candidate's outputs on a CUDA device do not go through the host at all: the child shares them
by CUDA IPC (put_outputs) and the worker maps the same device memory (take). torch's IPC reference
counters keep the child from reusing that memory until the worker has let go of it. The child's
/dev/shm, where torch keeps those counters, is a private directory (make_shm_directory): the
worker reaches a counter file through a hard link of its own (Exchange._ref_counter).

Both sides bind torch.save, torch.load and the IPC calls at import, before any candidate code runs.
"""
import atexit
import contextlib
import itertools
import os
import re
import shutil
import stat
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
# A process's root directory, and the hard links it makes in /dev/shm (Exchange._ref_counter).
_OURS = re.compile(rf"{_PREFIX}(\d+)(-ipc-\d+)?")
_roots = {}  # base directory -> this process's root in it
_links = itertools.count()


def _base():
    try:
        if shutil.disk_usage(_SHM).free >= _SHM_MIN_FREE:
            return _SHM
    except OSError:
        pass
    return tempfile.gettempdir()


def _sweep(base):
    """Removes what workers that are gone left in base: a worker killed at a job's deadline cannot
    clean up, and on /dev/shm its files would hold memory until the next boot."""
    for name in os.listdir(base):
        ours = _OURS.fullmatch(name)
        if not ours:
            continue
        try:
            os.kill(int(ours[1]), 0)
        except ProcessLookupError:
            path = os.path.join(base, name)
            if ours[2]:  # a link
                with contextlib.suppress(FileNotFoundError):  # another worker swept it meanwhile
                    os.unlink(path)
            else:
                shutil.rmtree(path, ignore_errors=True)
        except PermissionError:
            pass  # alive, another user's


def _root(base):
    if base not in _roots or not os.path.isdir(_roots[base]):
        _sweep(base)
        root = os.path.join(base, f"{_PREFIX}{os.getpid()}")
        os.makedirs(root, mode=0o700, exist_ok=True)
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        _roots[base] = root
    return _roots[base]


def make_directory():
    """A fresh private directory for one job's exchange files, under this process's root."""
    return tempfile.mkdtemp(prefix="job-", dir=_root(_base()))


def make_shm_directory():
    """A fresh directory on /dev/shm's own file system, to be a sandboxed child's /dev/shm: the
    worker hard-links the child's reference counters out of it, and a link cannot cross file
    systems."""
    return tempfile.mkdtemp(prefix="shm-", dir=_root(_SHM))


class Exchange:
    """One job's exchange. On the worker's side shm_directory is the child's private /dev/shm,
    where its CUDA IPC reference counters are."""

    def __init__(self, directory, shm_directory=None):
        self.directory = directory
        self.shm_directory = shm_directory
        self.links = {}  # the child's counter file name -> this process's link to it in /dev/shm
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

    def take(self, name):
        """Loads what the other side put under name (tensors and plain containers only), or maps
        the CUDA tensors that put_outputs described in the child."""
        if isinstance(name, dict):
            if self.shm_directory is not None:
                return [_map_shared(d, self._ref_counter) for d in name.get("cuda_ipc") or []]
            raise ValueError("CUDA IPC descriptors from a child whose /dev/shm is not known")
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
        for link in self.links.values():
            with contextlib.suppress(FileNotFoundError):  # torch unlinks it where the child let go first
                os.unlink(_SHM + link)
        if self.shm_directory:
            shutil.rmtree(self.shm_directory, ignore_errors=True)

    def _ref_counter(self, name):
        """The name under which torch in this process opens the child's reference-counter file
        `name` when it lets go of a mapping (shm_open, in this process's /dev/shm). The file is in
        the child's private /dev/shm, written by nobody else, so it is the candidate's own; a hard
        link in the real /dev/shm, named for this process, makes it reachable by name. Checked on
        the link itself, which the child cannot swap."""
        if name not in self.links:
            if not is_torch_shm_name(name):
                raise ValueError(f"a CUDA IPC reference counter that is not torch's ({name!r})")
            link = f"/{_PREFIX}{os.getpid()}-ipc-{next(_links)}"
            try:
                os.link(os.path.join(self.shm_directory, name[1:]), _SHM + link, follow_symlinks=False)
            except OSError:
                raise ValueError(f"the CUDA IPC reference counter file {name!r} is not in the candidate's /dev/shm")
            info = os.lstat(_SHM + link)
            # a shorter file would fault when mapped and counted down
            if not stat.S_ISREG(info.st_mode) or info.st_size < 8 * _REF_COUNTERS:
                os.unlink(_SHM + link)
                raise ValueError(f"the CUDA IPC reference counter file {name!r} is not a full-size file")
            self.links[name] = link
        return self.links[name]


def _map_shared(d, ref_counter):
    """A tensor over the child's CUDA memory, from a put_outputs descriptor. The descriptor comes
    from the candidate's process: every field is checked, the reference counter must be a file of
    the child's own (ref_counter gives this process's name for it, Exchange._ref_counter) and the
    offset inside it, and torch refuses a view outside the storage."""
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
    if ref_offset >= _REF_COUNTERS:
        raise ValueError(f"a CUDA IPC reference counter offset past the file ({ref_offset})")
    name = ref_counter(ref_handle.decode("ascii", "replace"))
    # A sandboxed child's IPC event is not waited on: the CUDA driver opens it through a file in /dev/shm
    # named for the child's pid (cuda.shm.<uid>.<pid>.<n>), which is private to the child and whose
    # pid, 2 in its namespace, is every sandboxed child's. Nothing is lost: the child synchronises
    # the device before it replies, and an unfinished write could only make its own output wrong.
    storage = _new_shared_cuda(device, handle, storage_bytes, storage_offset_bytes, name.encode(),
                               ref_offset, event_handle, False)
    return torch.empty(0, dtype=dtype, device=torch.device("cuda", device)).set_(storage, offset, size, stride)


def is_torch_shm_name(name):
    """Whether name is one torch gives a shared-memory file (at::NewProcessWideShmHandle:
    /torch_<pid>_<random>_<counter>). In the child's PID namespace the pid is the same in every
    sandbox and says nothing of whose the file is; the private directory does."""
    return re.fullmatch(r"/torch_\d+_\d+_\d+", name) is not None
