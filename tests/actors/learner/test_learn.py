"""Learning, end to end, on CPU: config/examples/learn-smoke.toml as shipped. `train` creates a
tiny random Qwen2 and its tokenizer in an empty model directory, records the shipped
demonstrations of two smoke tasks in its tokens, and evaluates the actor with one greedy
`--policy torch` episode per task (real tools, build and harness) before training, after RFT and
after live PPO. The random model earns r = -1 on both; RFT on the demonstrations makes it earn
r >= 1 on both; the PPO steps after it keep it there."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "model"))
from test_torch_policy import SOURCE, binary  # noqa: E402

CONFIG = SOURCE / "config" / "examples" / "learn-smoke.toml"


def train(scratch, out, model_dir, *extra):
    # The example's paths are relative to the source tree; the caches and episodes go to scratch.
    return subprocess.run(
        [binary(), "--config", str(CONFIG), "--set", f"learner.model_dir={model_dir}",
         "--set", f"policy.demo_dir={SOURCE / 'corpus' / 'demos'}",
         "--set", f"policy.tools_dir={SOURCE / 'skills' / 'tools'}",
         "--set", f"rollout.runs_dir={scratch / 'runs'}", "--set", f"build.cache_dir={scratch / 'build-cache'}",
         "--set", f"harness.baseline_cache_dir={scratch / 'baselines'}", *extra,
         "train", "--out", str(out), "--device", "cpu"],
        capture_output=True, text=True, timeout=1800, cwd=scratch,
        env={**os.environ, "OMP_NUM_THREADS": "2"})  # the learning run as a user runs it


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rft_on_demonstrations_teaches_a_random_model_both_tasks(scratch):
    model_dir, out = scratch / "model", scratch / "learn"
    done = train(scratch, out, model_dir)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "created a tiny random model" in done.stderr
    assert all((model_dir / f).is_file() for f in ("config.json", "model.safetensors", "tokenizer.json"))

    evals = lines(out / "eval.jsonl")
    assert [(e["after"], e["infrastructure_failures"]) for e in evals] == \
        [("start", 0), ("rft", 0), ("ppo", 0)], evals
    rewards = [{t["task"]: t["reward"] for t in e["tasks"]} for e in evals]
    tasks = {"smoke_01_relu", "smoke_02_gelu"}
    assert all(set(r) == tasks for r in rewards), rewards
    assert all(v == -1 for v in rewards[0].values()), rewards  # random weights write no kernel
    assert all(v >= 1 for v in rewards[1].values()), rewards   # RFT taught both
    assert all(v >= 1 for v in rewards[2].values()), rewards   # PPO kept them
    assert [e["pass_rate"] for e in evals] == [0, 1, 1]
    # Each evaluation is a real greedy rollout with its own log.
    assert all(pathlib.Path(e["log"]).is_dir() for e in evals)

    metrics = lines(out / "metrics.jsonl")
    stages = [m["stage"] for m in metrics]
    assert stages == ["rft"] * 80 + ["value_pretrain"] * 5 + ["ppo"] * 2, stages
    rft = [m["sft_loss"] for m in metrics if m["stage"] == "rft"]
    assert rft[-1] < 0.1 * rft[0], (rft[0], rft[-1])
    ppo = [m for m in metrics if m["stage"] == "ppo"]
    assert all(m["live"] and m["rollout_episodes"] == 2 for m in ppo), ppo
    assert (out / "final" / "config.json").is_file()


def test_an_empty_model_dir_without_init_model_is_refused_in_one_line(scratch):
    done = train(scratch, scratch / "refused", scratch / "empty-model", "--set", "learner.init_model=none")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "learner.init_model" in done.stderr and "holds no checkpoint" in done.stderr
    assert not (scratch / "refused" / "metrics.jsonl").exists()
