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
