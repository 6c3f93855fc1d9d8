"""The harness wire, Python's side: the fields a job request (evaluate, verify, profile) may hold,
with their defaults.

A request is one flat map: the fields of messages/harness_wire.hpp's harness_job and those of
messages/messages.hpp's judging_parameters. tests/actors/harness/harness_wire_test.cpp compares JOB and
JUDGING with the C++ declarations, name by name and default by default, so a field that exists on
one side only fails a test instead of being silently ignored or defaulted.
"""

# messages/harness_wire.hpp, harness_job.
JOB = {
    "op": "", "job_id": "", "episode_id": "", "task_path": "", "solution_dir": "", "module_path": "",
    "device": "cpu", "seed": 0, "baseline_cache_dir": "", "baseline_max_age_s": 86400.0, "timing_cpus": [],
}

# messages/messages.hpp, judging_parameters: everything besides the task and the candidate that
# decides a verdict or a timing.
JUDGING = {
    "atol": 0.01, "rtol": 0.01, "input_sets": 5, "warmup_runs": 10, "timed_runs": 50, "max_cv": 0.25,
    "candidate_timeout_s": 120.0, "memory_limit_mb": 16384, "cpu_threads": 0, "compile_mode": "default",
}


class WireError(ValueError):
    """A request that does not fit the wire: an unknown field or a value of the wrong kind."""


def job_options(request):
    """The request's fields over the defaults, checked: an unknown field or a value whose kind
    differs from its default's (a number for a number, a string for a string, a list for a list)
    is a WireError naming it."""
    options = dict(JOB, **JUDGING)
    for name, value in request.items():
        if name not in options:
            raise WireError(f"unknown field {name!r} in a job request (messages/harness_wire.hpp, "
                            "skills/harness/wire.py)")
        if value is None:
            continue
        default = options[name]
        if isinstance(default, bool) or isinstance(value, bool):
            ok = isinstance(value, bool) == isinstance(default, bool)
        elif isinstance(default, (int, float)):
            ok = isinstance(value, (int, float)) and (isinstance(default, float) or isinstance(value, int))
        else:
            ok = isinstance(value, type(default))
        if not ok:
            raise WireError(f"field {name!r} of a job request is {type(value).__name__}, "
                            f"expected {type(default).__name__}")
        options[name] = value
    return options
