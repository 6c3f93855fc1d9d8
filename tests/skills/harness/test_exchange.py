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
    monkeypatch.setattr(exchange, "_roots", {})
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


def test_roots_and_links_of_dead_workers_are_swept_and_live_ones_kept(base):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (base / f"cuda-agent-exchange-{dead.pid}" / "job-x").mkdir(parents=True)
    (base / f"cuda-agent-exchange-{dead.pid}-ipc-3").write_bytes(b"")
    (base / f"cuda-agent-exchange-{os.getppid()}").mkdir()
    (base / f"cuda-agent-exchange-{os.getppid()}-ipc-3").write_bytes(b"")
    directory = exchange.make_directory()
    assert directory.startswith(str(base / f"cuda-agent-exchange-{os.getpid()}"))
    assert not (base / f"cuda-agent-exchange-{dead.pid}").exists()
    assert not (base / f"cuda-agent-exchange-{dead.pid}-ipc-3").exists()
    assert (base / f"cuda-agent-exchange-{os.getppid()}").exists()
    assert (base / f"cuda-agent-exchange-{os.getppid()}-ipc-3").exists()


def test_outputs_on_the_cpu_go_through_a_file(base):
    ex = exchange.Exchange(exchange.make_directory())
    sent = ex.put_outputs([torch.ones(3), torch.zeros(2, dtype=torch.int64)])
    assert isinstance(sent, str)
    got = ex.take(sent)
    assert torch.equal(got[0], torch.ones(3)) and got[1].dtype == torch.int64


# torch names shared-memory files /torch_<pid>_<random>_<counter> (test_torch_s_own_names_are_recognised);
# in the child's PID namespace the pid is 2.
GOOD, SHORT, LINK = "torch_2_2747371651_7", "torch_2_2747371651_8", "torch_2_2747371651_9"
ELSEWHERE = "torch_999_2747371651_7"  # in the real /dev/shm, not in the child's


def descriptor(**changes):
    good = {"dtype": "float32", "size": [4], "stride": [1], "offset": 0, "device": 0, "handle": b"h" * 64,
            "storage_bytes": 16, "storage_offset_bytes": 0, "ref_handle": f"/{GOOD}".encode(),
            "ref_offset": 3, "event_handle": b"e" * 64, "event_sync": True}
    return dict(good, **changes)


@pytest.fixture
def shm(tmp_path, monkeypatch):
    """Stand-ins for the real /dev/shm and for the child's private one, which holds its
    reference-counter file (full size), a short one and a symbolic link to a full-size file
    elsewhere."""
    real, child = tmp_path / "shm", tmp_path / "child-shm"
    real.mkdir()
    child.mkdir()
    full = bytes(8 * exchange._REF_COUNTERS + 64)
    (child / GOOD).write_bytes(full)
    (child / SHORT).write_bytes(bytes(64))
    (real / ELSEWHERE).write_bytes(full)
    (child / LINK).symlink_to(real / ELSEWHERE)
    monkeypatch.setattr(exchange, "_SHM", str(real))
    return real, child


@pytest.mark.parametrize("changes", [
    {"dtype": "print"}, {"dtype": "Tensor"}, {"size": [-1]}, {"size": "4"}, {"stride": [1, 1]},
    {"handle": "not bytes"}, {"offset": -3}, {"device": None}, {"event_sync": 1}, {"event_handle": None},
    # the receiver counts down ref_offset of this file when it lets go: it must be the child's, in range
    {"ref_offset": 10000}, {"ref_offset": 1 << 40}, {"ref_handle": f"/{ELSEWHERE}".encode()},
    {"ref_handle": f"/{GOOD}/../x".encode()}, {"ref_handle": f"/{SHORT}".encode()},
    {"ref_handle": f"/{LINK}".encode()}, {"ref_handle": b"/torch_2_2747371651_10"},
    {"ref_handle": b"/torch_2_7"}, {"ref_handle": f"/../shm/{GOOD}".encode()},
])
def test_a_cuda_ipc_descriptor_with_a_bad_field_is_refused_before_anything_is_mapped(base, shm, monkeypatch, changes):
    # The descriptor comes from the candidate's process; nothing of it may reach the CUDA driver unchecked.
    real, child = shm
    mapped = []
    monkeypatch.setattr(exchange, "_new_shared_cuda", lambda *a: mapped.append(a))
    ex = exchange.Exchange(exchange.make_directory(), str(child))
    with pytest.raises(ValueError):
        ex.take({"cuda_ipc": [descriptor(**changes)]})
    with pytest.raises(ValueError):
        ex.take({"cuda_ipc": ["not a map"]})
    with pytest.raises(ValueError):
        exchange.Exchange(ex.directory).take({"cuda_ipc": [descriptor()]})  # no child's /dev/shm known
    assert mapped == []
    assert sorted(os.listdir(real)) == [ELSEWHERE]  # no link left behind


def test_a_well_formed_cuda_ipc_descriptor_maps_through_a_link_of_the_worker_s_own(base, shm, monkeypatch):
    real, child = shm
    calls = []
    monkeypatch.setattr(exchange, "_new_shared_cuda", lambda *a: calls.append(a) or torch.UntypedStorage(16))
    monkeypatch.setattr(torch, "device", lambda *a: "cpu")  # no CUDA device here to put the view on
    ex = exchange.Exchange(exchange.make_directory(), str(child))
    got = ex.take({"cuda_ipc": [descriptor(), descriptor(ref_offset=4)]})
    link = f"/cuda-agent-exchange-{os.getpid()}-ipc-"
    (name,) = [n for n in os.listdir(real) if n != ELSEWHERE]
    assert ("/" + name).startswith(link) and os.path.samefile(real / name, child / GOOD)
    # torch opens the counters by this name when it lets go; the child's IPC event is not waited on
    assert calls == [(0, b"h" * 64, 16, 0, f"/{name}".encode(), 3, b"e" * 64, False),
                     (0, b"h" * 64, 16, 0, f"/{name}".encode(), 4, b"e" * 64, False)]
    assert got[0].shape == (4,) and got[0].dtype == torch.float32
    ex.remove()
    assert os.listdir(real) == [ELSEWHERE] and not child.exists()


def test_torch_s_own_names_are_recognised():
    # The names come from torch itself: a CPU storage shared by file name goes through the same
    # at::NewProcessWideShmHandle as a CUDA IPC reference counter. A hand-written pattern that
    # torch does not follow would refuse every honest candidate's outputs on a GPU.
    names = [torch.UntypedStorage(64)._share_filename_cpu_()[1].decode() for _ in range(3)]
    assert all(exchange.is_torch_shm_name(n) for n in names), names
    assert len(set(names)) == 3
