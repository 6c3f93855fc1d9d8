"""Red team on CPU: every cheating candidate is caught and named, honest ones pass, and a
candidate that crashes, hangs or eats memory ends with r = -1 while the next job still runs."""
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

import pytest

from conftest import SKILLS, candidate_names

from harness import evaluator, guard, reward


@pytest.mark.parametrize("name", candidate_names("honest"))
def test_honest_candidate_passes(worker, solutions, name):
    meta, job = solutions(name)
    reply = worker.request(job)
    assert reply["ok"], reply["error"]
    record = reply["record"]
    assert record["violations"] == [], record["error"]
    assert record["correct"], record["error"]
    assert record["reward"] >= 1
    for key in ("t_new_ms", "t_eager_ms", "t_compile_ms"):
        assert record[key] > 0 and math.isfinite(record[key])
    timing = record["timing"]
    assert timing["baseline"] in ("fresh", "cached", "remeasured")
    # A cached baseline rejected at a later measurement (the host slowed eager) is followed by one
    # fresh measurement, the only one that can judge against a fresh torch.compile.
    limit = evaluator.MEASUREMENTS + (timing["baseline"] == "remeasured")
    assert 1 <= timing["measurements"] <= limit, timing
    # speed earns a milestone only where it was measured steadily
    t_new = record["t_new_ms"] if timing["reliable"] else math.nan
    assert record["reward"] == reward.milestone_reward(True, t_new, record["t_eager_ms"], record["t_compile_ms"])
    assert reply["profile"]["candidate"]["runs"] == job["timed_runs"]


@pytest.mark.parametrize("name", candidate_names("cheat"))
def test_cheat_is_caught_and_named(worker, solutions, name):
    meta, job = solutions(name)
    reply = worker.request(job)
    assert reply["ok"], reply["error"]
    record = reply["record"]
    assert record["reward"] == -1
    assert not record["correct"]
    missing = set(meta["expect_violations"]) - set(record["violations"])
    assert not missing, f"{name}: expected {missing} in {record['violations']} ({record['error']})"
    assert set(record["violations"]) <= set(guard.VIOLATIONS)
    assert record["error"]
    marker = os.path.join(tempfile.gettempdir(), "cuda_agent_redteam_marker")  # write_outside's
    if os.path.exists(marker):
        os.remove(marker)


def known_holes():
    """Each known hole as a strict xfail, but for a cheat that wins a race only most of the time
    ("racy" in its candidate.json: it may lose, be judged wrong and pass the test by chance)."""
    reason = "a known hole (the candidate's known_hole); when this passes, the hole is closed: drop known_hole " \
             "from its candidate.json"
    out = []
    for name in candidate_names("known_hole"):
        meta = json.load(open(os.path.join(os.path.dirname(__file__), "candidates", name, "candidate.json")))
        out.append(pytest.param(name, marks=pytest.mark.xfail(strict=not meta.get("racy"), reason=reason)))
    return out


@pytest.mark.parametrize("name", known_holes())
def test_known_hole_is_still_open(worker, solutions, name):
    # The cheat earns a reward it should not: measured, kept visible, never called caught.
    meta, job = solutions(name)
    record = worker.request(job)["record"]
    assert record["reward"] == -1, (name, meta["known_hole"], record["reward"], record.get("t_new_ms"))


# In a child of its own, as the candidate's process: the guards change torch for good.
_TORCH_S_OWN_REDISPATCH = r"""
import gc
import torch
from harness import guard

guard.warm_up_guards()
natives = [o.__name__ for o in gc.get_objects() if type(o).__name__ in ("builtin_function_or_method", "instancemethod")
           and o.__name__ in ("redispatch_boxed", "call_boxed")]
assert not natives, f"an original still alive: {natives}"

@torch.library.custom_op("harness_test::triple", mutates_args=())
def triple(t: torch.Tensor) -> torch.Tensor:
    return t * 3  # a factory call (the scalar's tensor) inside: BackendSelect must still be there

triple.register_autograd(lambda ctx, grad: grad * 3)
x = torch.randn(5, requires_grad=True)
y = triple(x)  # the autograd kernel redispatches below autograd
y.sum().backward()
assert torch.equal(y, x * 3) and torch.equal(x.grad, torch.full_like(x, 3.0))
with torch.no_grad():
    assert torch.equal(triple(x), x * 3)

@torch.library.custom_op("harness_test::count", mutates_args=(), device_types="cpu")
def count(n: int, device: torch.device) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32, device=device)

assert torch.equal(count(4, torch.device("cpu")), torch.arange(4.0))  # BackendSelect redispatches to CPU
cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
assert torch.equal(torch.ops.aten.mul.Tensor.redispatch(cpu, x.detach(), x.detach()), x.detach() ** 2)
print("ok")
"""


def test_torch_s_own_redispatch_runs_on_the_observed_stand_in():
    # The harness keeps no original of redispatch_boxed (Python reaches whatever is alive); torch's
    # custom ops redispatch from their autograd and BackendSelect kernels and must still run.
    done = subprocess.run([sys.executable, "-c", _TORCH_S_OWN_REDISPATCH], env=dict(os.environ, PYTHONPATH=SKILLS),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


@pytest.mark.parametrize("name", candidate_names("fault"))
def test_fault_is_contained(worker, solutions, name):
    meta, job = solutions(name)
    reply = worker.request(job)
    assert reply["ok"], reply["error"]
    record = reply["record"]
    assert record["reward"] == -1
    assert meta["expect_error"] in record["error"], record["error"]
    # The worker survived and the next job runs normally.
    _, honest = solutions("honest_elementwise")
    after = worker.request(dict(honest, op="verify"))
    assert after["record"]["correct"], after["record"]["error"]


def test_reward_table():
    assert reward.milestone_reward(False, 1.0, 2.0, 2.0) == -1
    assert reward.milestone_reward(True, 1.0, 2.0, 2.0) == 3
    assert reward.milestone_reward(True, 1.0, 2.0, 1.0) == 2
    assert reward.milestone_reward(True, 95.0, 100.0, 100.0) == 1  # exactly 5% is not faster
    assert reward.milestone_reward(True, 94.0, 100.0, 100.0) == 3
    assert reward.milestone_reward(True, math.nan, 1.0, 1.0) == 1
    assert reward.milestone_reward(True, 1.0, 0.0, 0.0) == 1


def test_verify_uses_fresh_seeds(worker, solutions):
    _, job = solutions("honest_elementwise")
    a = worker.request(dict(job, op="verify"))
    b = worker.request(dict(job, op="verify"))
    assert a["record"]["correct"] and b["record"]["correct"]


def test_unknown_op_is_an_error(worker):
    reply = worker.request({"op": "frobnicate"})
    assert not reply["ok"] and "unknown op" in reply["error"]


@pytest.mark.parametrize("name", candidate_names("memo"))
def test_a_memo_earns_no_more_than_its_honest_speed(worker, solutions, name):
    # Every timed run sees input values of its own and its output is compared, so a result
    # remembered by content, address or call count is either recomputed (and timed as such) or
    # wrong. The honest kernel the memos wrap is timed beside them; a hit would be a copy, two
    # orders of magnitude faster than the triple loop.
    _, honest_job = solutions("honest_linear")
    _, job = solutions(name)
    honest = [worker.request(honest_job)["record"] for _ in range(2)]
    record = worker.request(job)["record"]
    assert all(h["correct"] for h in honest), honest
    assert record["reward"] <= max(h["reward"] for h in honest), record
    if record["reward"] >= 1:
        assert record["t_new_ms"] >= 0.5 * min(h["t_new_ms"] for h in honest), (record, honest)
    else:
        assert "timed run" in record["error"] or record["violations"], record


@pytest.mark.parametrize("name", candidate_names("clock"))
def test_a_clock_cheat_is_timed_by_the_workers_clock(worker, solutions, name):
    # Native code that rewrites the child's own clock (libc's clock_gettime here) reported the
    # triple loop at 0.015 ms, reward 3. The worker times each run itself (timing.ChildClock), so
    # the cheat earns what its honest kernel earns: honest_linear runs the same loop.
    _, honest_job = solutions("honest_linear")
    _, job = solutions(name)
    honest = worker.request(honest_job)["record"]
    record = worker.request(job)["record"]
    assert honest["correct"] and record["correct"], (honest, record)
    assert record["reward"] <= max(1, honest["reward"]), record
    assert record["t_new_ms"] >= 0.5 * honest["t_new_ms"], (record, honest)


def test_a_poisoned_baseline_is_detected_and_measured_again(worker, solutions, tmp_path):
    # A cached baseline 100x too slow would make any candidate look fast. Each job measures
    # eager afresh; when its median disagrees with the cached one, both baselines are measured
    # again and the file is rewritten.
    _, job = solutions("honest_linear")
    job = dict(job, baseline_cache_dir=str(tmp_path), timed_runs=5)
    first = worker.request(job)["record"]
    assert first["timing"]["baseline"] == "fresh", first
    if not first["timing"]["reliable"]:
        pytest.skip("the host was too busy for a steady first measurement (nothing was cached)")
    [path] = glob.glob(str(tmp_path / "*.json"))
    cached = json.load(open(path))
    json.dump(dict(cached, eager=[100 * x for x in cached["eager"]], compiled=[100 * x for x in cached["compiled"]]),
              open(path, "w"))
    second = worker.request(job)["record"]
    assert second["timing"]["baseline"] == "remeasured", second
    assert second["t_compile_ms"] < 10 * first["t_compile_ms"], (first, second)
    kept = os.path.exists(path)  # rewritten where the new measurement was steady, else removed
    if kept:
        rewritten = json.load(open(path))
        assert max(rewritten["eager"]) < 50 * max(cached["eager"]), "the poisoned file was kept"
    third = worker.request(job)["record"]
    # a rewritten file is used (or measured again if this job disagrees); a removed one is measured afresh
    expected = ("cached", "remeasured") if kept else ("fresh",)
    assert third["timing"]["baseline"] in expected, (kept, third)


def test_a_torn_baseline_file_is_measured_again(worker, solutions, tmp_path):
    _, job = solutions("honest_linear")
    job = dict(job, baseline_cache_dir=str(tmp_path))
    worker.request(job)
    paths = glob.glob(str(tmp_path / "*.json"))
    if not paths:
        pytest.skip("the host was too busy for a steady first measurement (nothing was cached)")
    for path in paths:
        open(path, "w").write('{"eager": [0.1, ')
    record = worker.request(job)["record"]
    assert record["correct"] and record["timing"]["baseline"] == "fresh", record
