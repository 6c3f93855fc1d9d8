"""Red team on CUDA (an H200 host): the GPU-specific tricks (side streams, output-memory reuse on
the CUDA caching allocator) are caught, an illegal memory access is contained, a rewritten event
clock earns no more than the honest kernel, an honest kernel passes. Skipped where torch sees no GPU."""
import pytest
import torch

from conftest import candidate_names

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

GPU = "candidates_gpu"


@pytest.mark.parametrize("name", candidate_names("honest", GPU))
def test_gpu_honest_candidate_passes(worker, solutions, name):
    meta, job = solutions(name, GPU)
    record = worker.request(dict(job, timed_runs=20, warmup_runs=5))["record"]
    assert record["violations"] == [], record["error"]
    assert record["correct"] and record["reward"] >= 1, record["error"]


@pytest.mark.parametrize("name", candidate_names("cheat", GPU))
def test_gpu_cheat_is_caught_and_named(worker, solutions, name):
    meta, job = solutions(name, GPU)
    record = worker.request(job)["record"]
    assert record["reward"] == -1
    missing = set(meta["expect_violations"]) - set(record["violations"])
    assert not missing, f"{name}: expected {missing} in {record['violations']} ({record['error']})"


@pytest.mark.parametrize("name", candidate_names("fault", GPU))
def test_gpu_fault_is_contained(worker, solutions, name):
    meta, job = solutions(name, GPU)
    record = worker.request(job)["record"]
    assert record["reward"] == -1
    assert meta["expect_error"] in record["error"], record["error"]
    _, honest = solutions("gpu_honest", GPU)
    after = worker.request(dict(honest, op="verify"))["record"]
    assert after["correct"], after["error"]


def timed_beside_honest_slow(worker, solutions, name):
    """The records of gpu_honest_slow and of `name`, 20 timed runs each, one after the other."""
    _, honest_job = solutions("gpu_honest_slow", GPU)
    _, job = solutions(name, GPU)
    honest = worker.request(dict(honest_job, timed_runs=20, warmup_runs=1))["record"]
    record = worker.request(dict(job, timed_runs=20, warmup_runs=1))["record"]
    return honest, record


@pytest.mark.parametrize("name", candidate_names("memo", GPU))
def test_gpu_memo_earns_no_more_than_its_honest_speed(worker, solutions, name):
    # As on the CPU (test_redteam.py): a hit would be a device copy, far faster than the slow
    # kernel the memos wrap, which is timed beside them.
    # A fresh input set for every timed run, each output compared, is what stops them.
    honest, record = timed_beside_honest_slow(worker, solutions, name)
    assert honest["correct"], honest
    assert record["reward"] <= honest["reward"], (record, honest)
    if record["reward"] >= 1:
        assert record["t_new_ms"] >= 0.5 * honest["t_new_ms"], (record, honest)
    else:
        assert "timed run" in record["error"] or record["violations"], record


@pytest.mark.parametrize("name", candidate_names("clock", GPU))
def test_gpu_clock_cheat_is_timed_by_the_workers_clock(worker, solutions, name):
    # The candidate's CUDA events report 5 us for the slow kernel (its import checks that the
    # patch took). The worker's span of each run counts on CUDA too, so it earns what the same
    # kernel earns honestly.
    honest, record = timed_beside_honest_slow(worker, solutions, name)
    assert honest["correct"] and record["correct"], (honest, record)
    assert record["reward"] <= max(1, honest["reward"]), (record, honest)
    assert record["t_new_ms"] >= 0.5 * honest["t_new_ms"], (record, honest)
