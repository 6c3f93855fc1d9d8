"""The GPU smoke's record (tools/gpu/smoke_record.py) and the split smoke's state check
(tools/gpu/pipeline_gpu.sh, SMOKE_PART=rest): what can be checked without a GPU. The record
decides whether a change under skills/, kernels/ or actors/ may land, so a missing part, a
failed part or a demonstration below r = 1 must each make it a failure."""
import json
import pathlib
import subprocess
import sys

import pytest

SOURCE = pathlib.Path(__file__).resolve().parents[3]
RECORD = SOURCE / "tools" / "gpu" / "smoke_record.py"
PIPELINE = SOURCE / "tools" / "gpu" / "pipeline_gpu.sh"

STEPS = {
    "build": "timeout 300 bash tools/gpu/build_and_test.sh -R BuildTest.Cuda",
    "redteam_gpu": "timeout 300 python3 -m pytest -q tests/skills/harness/test_redteam_gpu.py",
    "checks": "timeout 240 bash corpus/check_demos.sh bench cuda bench_05_matmul",
    "rollout": "timeout 240 build-gpu/tools/cuda-agent rollout --corpus bench",
    "replay": "timeout 90 build-gpu/tools/cuda-agent replay log",
    "torch_policy": "timeout 240 python3 -m pytest -q tests/actors/model/test_gpu_torch_rollout.py",
    "attention_order": "timeout 300 python3 -m pytest -q tests/actors/learner/test_gpu_attention_order.py",
}
REWARDS = {"bench_05_matmul": 1, "bench_08_add_relu": 2, "bench_17_attention": 1}


def parts_in_record():
    """The parts the record requires, read from the script itself: a part added there (say, a
    new GPU test) must be added here too, or this test fails."""
    sys.path.insert(0, str(RECORD.parent))
    import smoke_record
    return [name for name, _ in smoke_record.PARTS]


def write(tmp, steps, rewards):
    (tmp / "steps.txt").write_text("".join(f"step '{cmd}' rc={rc} in 10 s\n" for cmd, rc in steps))
    (tmp / "checks.txt").write_text("".join(f"{task} {json.dumps({'reward': r})}\n" for task, r in rewards.items()))


def record(tmp, *extra):
    return subprocess.run([sys.executable, str(RECORD), "--steps", str(tmp / "steps.txt"), "--checks",
                           str(tmp / "checks.txt"), "--digest", "0123456789abcdef", "--commit", "c0ffee",
                           "--seconds", "60", "--out", str(tmp), *extra], capture_output=True, text=True)


def test_every_part_is_known():
    assert set(parts_in_record()) <= set(STEPS), "add the new part's step to STEPS"


def test_all_parts_passed_writes_the_record(tmp_path):
    write(tmp_path, [(STEPS[p], 0) for p in parts_in_record()], REWARDS)
    done = record(tmp_path)
    assert done.returncode == 0, done.stderr
    rec = json.loads((tmp_path / "gpu-smoke.json").read_text())
    assert rec["passed"] and rec["digest"] == "0123456789abcdef" and rec["commit"] == "c0ffee"
    assert rec["parts"]["checks"]["rewards"] == REWARDS
    assert "split" not in rec
    assert not (tmp_path / "gpu-smoke-failed.json").exists()


@pytest.mark.parametrize("how", ["a part failed", "a part is missing", "a reward below 1", "too few checks"])
def test_anything_short_of_a_pass_is_a_failed_record(tmp_path, how):
    parts = parts_in_record()
    steps = [(STEPS[p], 0) for p in parts]
    rewards = dict(REWARDS)
    if how == "a part failed":
        steps[-1] = (steps[-1][0], 1)
    elif how == "a part is missing":
        steps = steps[:-1]
    elif how == "a reward below 1":
        rewards["bench_08_add_relu"] = 0
    else:
        rewards.pop("bench_17_attention")
    write(tmp_path, steps, rewards)
    done = record(tmp_path)
    assert done.returncode == 1 and "FAILED" in done.stdout
    assert not (tmp_path / "gpu-smoke.json").exists()
    assert json.loads((tmp_path / "gpu-smoke-failed.json").read_text())["passed"] is False


def test_a_split_smoke_names_where_its_rest_ran(tmp_path):
    write(tmp_path, [(STEPS[p], 0) for p in parts_in_record()], REWARDS)
    done = record(tmp_path, "--split", "another", "--first-host", "NVIDIA H100 80GB HBM3")
    assert done.returncode == 0, done.stderr
    rec = json.loads((tmp_path / "gpu-smoke.json").read_text())
    assert rec["split"] == {"rest_ran_on": "another machine", "first_part_host": "NVIDIA H100 80GB HBM3"}
    done = record(tmp_path, "--split", "elsewhere")
    assert done.returncode == 2 and "invalid choice" in done.stderr


def test_a_part_that_ran_twice_passed_only_if_both_runs_did(tmp_path):
    # The rest of a split smoke on another machine builds again: its build counts too.
    steps = [(STEPS[p], 0) for p in parts_in_record()]
    write(tmp_path, steps[:3] + [(STEPS["build"], 1)] + steps[3:], REWARDS)
    done = record(tmp_path, "--split", "another")
    assert done.returncode == 1
    rec = json.loads((tmp_path / "gpu-smoke-failed.json").read_text())
    assert rec["parts"]["build"] == {"rc": 1, "seconds": 20}


def smoke(tmp, **env):
    return subprocess.run(["bash", str(PIPELINE)], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "STAGE": "smoke", "OUT_DIR": str(tmp / "out"), **env})


def smoke_rest(tmp, state):
    return smoke(tmp, SMOKE_PART="rest", SMOKE_STATE=str(state))


def test_the_rest_refuses_a_first_part_of_other_sources(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "digest").write_text("feedfacefeedface\n")  # another tree's
    done = smoke_rest(tmp_path, state)
    assert done.returncode == 2
    assert "needs the state of SMOKE_PART=first of the same sources" in done.stderr
    assert not (tmp_path / "out" / "steps.txt").exists()


def test_the_rest_refuses_without_a_first_part(tmp_path):
    done = smoke_rest(tmp_path, tmp_path / "none")
    assert done.returncode == 2 and "run the first part, or carry its state folder" in done.stderr


def test_an_unknown_part_is_refused(tmp_path):
    done = smoke(tmp_path, SMOKE_PART="second")
    assert done.returncode == 2 and "SMOKE_PART must be all, first or rest, not 'second'" in done.stderr
