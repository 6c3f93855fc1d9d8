"""The tensor exchange between the worker and a candidate's child (skills/harness/exchange.py)."""
import os
import subprocess
import sys

import pytest
import torch

from harness import exchange


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.setattr(exchange, "_base", lambda: str(tmp_path))
    monkeypatch.setattr(exchange, "_root", None)
    return tmp_path


def test_put_then_take_gives_the_tensors_back_and_removes_the_file(base):
    ex = exchange.Exchange(exchange.make_directory())
    name = ex.put([torch.arange(6.0).reshape(2, 3), 7], "inputs")
    got = ex.take(name)
    assert torch.equal(got[0], torch.arange(6.0).reshape(2, 3)) and got[1] == 7
    assert os.listdir(ex.directory) == []


@pytest.mark.parametrize("name", ["../x.pt", "/etc/passwd", ".hidden", "", None, "a/b.pt"])
def test_a_name_that_is_not_a_plain_file_in_the_directory_is_refused(base, name):
    ex = exchange.Exchange(exchange.make_directory())
    with pytest.raises(ValueError):
        ex.take(name)


def test_what_is_not_tensors_is_refused(base):
    ex = exchange.Exchange(exchange.make_directory())
    torch.save({"f": print}, os.path.join(ex.directory, "evil.pt"))  # a pickled callable
    with pytest.raises(Exception):
        ex.take("evil.pt")


def test_roots_of_dead_workers_are_swept_and_live_ones_kept(base):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (base / f"cuda-agent-exchange-{dead.pid}" / "job-x").mkdir(parents=True)
    (base / f"cuda-agent-exchange-{os.getppid()}").mkdir()
    directory = exchange.make_directory()
    assert directory.startswith(str(base / f"cuda-agent-exchange-{os.getpid()}"))
    assert not (base / f"cuda-agent-exchange-{dead.pid}").exists()
    assert (base / f"cuda-agent-exchange-{os.getppid()}").exists()


def test_outputs_on_the_cpu_go_through_a_file(base):
    ex = exchange.Exchange(exchange.make_directory())
    sent = ex.put_outputs([torch.ones(3), torch.zeros(2, dtype=torch.int64)])
    assert isinstance(sent, str)
    got = ex.take(sent)
    assert torch.equal(got[0], torch.ones(3)) and got[1].dtype == torch.int64


OWNER = 4242  # the pid of the process the descriptors claim to come from
# torch names shared-memory files /torch_<pid>_<random>_<counter> (test_torch_s_own_names_are_recognised)
GOOD, SHORT, OTHERS = f"torch_{OWNER}_2747371651_7", f"torch_{OWNER}_2747371651_8", "torch_999_2747371651_7"


def descriptor(**changes):
    good = {"dtype": "float32", "size": [4], "stride": [1], "offset": 0, "device": 0, "handle": b"h" * 64,
            "storage_bytes": 16, "storage_offset_bytes": 0, "ref_handle": f"/{GOOD}".encode(),
            "ref_offset": 3, "event_handle": b"e" * 64, "event_sync": True}
    return dict(good, **changes)


@pytest.fixture
def shm(tmp_path, monkeypatch):
    """A stand-in for /dev/shm holding the owner's reference-counter file, full size."""
    directory = tmp_path / "shm"
    directory.mkdir()
    (directory / GOOD).write_bytes(bytes(8 * exchange._REF_COUNTERS + 64))
    (directory / SHORT).write_bytes(bytes(64))
    (directory / OTHERS).write_bytes(bytes(8 * exchange._REF_COUNTERS + 64))
    (directory / f"torch_{OWNER}_7").write_bytes(bytes(8 * exchange._REF_COUNTERS + 64))
    monkeypatch.setattr(exchange, "_SHM", str(directory))
    return directory


@pytest.mark.parametrize("changes", [
    {"dtype": "print"}, {"dtype": "Tensor"}, {"size": [-1]}, {"size": "4"}, {"stride": [1, 1]},
    {"handle": "not bytes"}, {"offset": -3}, {"device": None}, {"event_sync": 1}, {"event_handle": None},
    # the receiver counts down ref_offset of this file when it lets go: it must be the owner's, in range
    {"ref_offset": 10000}, {"ref_offset": 1 << 40}, {"ref_handle": f"/{OTHERS}".encode()},
    {"ref_handle": f"/{GOOD}/../x".encode()}, {"ref_handle": f"/{SHORT}".encode()},
    {"ref_handle": f"/torch_{OWNER}_2747371651_9".encode()}, {"ref_handle": f"/torch_{OWNER}_7".encode()},
    {"ref_handle": f"/torch_{OWNER}0_2747371651_7".encode()},
])
def test_a_cuda_ipc_descriptor_with_a_bad_field_is_refused_before_anything_is_mapped(base, shm, monkeypatch, changes):
    # The descriptor comes from the candidate's process; nothing of it may reach the CUDA driver unchecked.
    mapped = []
    monkeypatch.setattr(exchange, "_new_shared_cuda", lambda *a: mapped.append(a))
    ex = exchange.Exchange(exchange.make_directory())
    with pytest.raises(ValueError):
        ex.take({"cuda_ipc": [descriptor(**changes)]}, ipc_owner=OWNER)
    with pytest.raises(ValueError):
        ex.take({"cuda_ipc": ["not a map"]}, ipc_owner=OWNER)
    with pytest.raises(ValueError):
        ex.take({"cuda_ipc": [descriptor()]})  # from no named process
    assert mapped == []


def test_a_well_formed_cuda_ipc_descriptor_reaches_the_mapping_call(base, shm, monkeypatch):
    calls = []
    monkeypatch.setattr(exchange, "_new_shared_cuda", lambda *a: calls.append(a) or torch.UntypedStorage(16))
    monkeypatch.setattr(torch, "device", lambda *a: "cpu")  # no CUDA device here to put the view on
    ex = exchange.Exchange(exchange.make_directory())
    got = ex.take({"cuda_ipc": [descriptor()]}, ipc_owner=OWNER)
    assert calls == [(0, b"h" * 64, 16, 0, f"/{GOOD}".encode(), 3, b"e" * 64, True)]
    assert got[0].shape == (4,) and got[0].dtype == torch.float32


def test_torch_s_own_names_are_recognised():
    # The names come from torch itself: a CPU storage shared by file name goes through the same
    # at::NewProcessWideShmHandle as a CUDA IPC reference counter. A hand-written pattern that
    # torch does not follow would refuse every honest candidate's outputs on a GPU.
    names = [torch.UntypedStorage(64)._share_filename_cpu_()[1].decode() for _ in range(3)]
    assert all(exchange.owns_shm_name(n, os.getpid()) for n in names), names
    assert not any(exchange.owns_shm_name(n, os.getpid() + 1) for n in names)
    assert len(set(names)) == 3
