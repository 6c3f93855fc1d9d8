"""The harness wire from the worker's side (skills/harness/wire.py): a job request that does not
fit it is refused with `wire_error` before anything is judged, and each job is judged by the
parameters it carries (two jobs of one worker with different timed_runs time differently).
tests/actors/harness/harness_wire_test.cpp checks that wire.py and the C++ declarations agree."""
import pytest

from harness import wire


def test_an_unknown_field_is_refused_and_never_judged(worker, solutions):
    _, job = solutions("honest_elementwise")
    reply = worker.request(dict(job, tolerance=0.5))
    assert not reply["ok"]
    assert "tolerance" in reply["wire_error"]
    assert "record" not in reply
    # The retired name of the candidate's deadline is unknown too, not silently defaulted.
    reply = worker.request(dict(job, timeout_s=5))
    assert not reply["ok"] and "timeout_s" in reply["wire_error"]
    # The worker lives on and judges the next request.
    assert worker.request(job)["ok"]


@pytest.mark.parametrize("field,value", [("atol", "0.1"), ("timed_runs", 2.5), ("timing_cpus", 1),
                                         ("compile_mode", 3)])
def test_a_value_of_the_wrong_kind_is_refused(worker, solutions, field, value):
    _, job = solutions("honest_elementwise")
    reply = worker.request(dict(job, **{field: value}))
    assert not reply["ok"] and field in reply["wire_error"], reply


def test_each_job_is_judged_by_its_own_parameters(worker, solutions):
    _, job = solutions("honest_elementwise")
    for runs in (3, 5, 3):
        reply = worker.request(dict(job, op="profile", timed_runs=runs))
        assert reply["ok"], reply["error"]
        assert reply["profile"]["candidate"]["runs"] == runs


def test_job_options_fill_defaults_and_keep_given_values():
    options = wire.job_options({"op": "verify", "atol": 0.05, "input_sets": 2, "candidate_timeout_s": 7})
    assert options["atol"] == 0.05 and options["input_sets"] == 2 and options["candidate_timeout_s"] == 7
    assert options["rtol"] == wire.JUDGING["rtol"] and options["device"] == wire.JOB["device"]
    assert set(options) == set(wire.JOB) | set(wire.JUDGING)
