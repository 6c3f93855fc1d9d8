"""`cuda-agent train --live` end to end on CPU: PPO on live rollouts of the torch policy through
the real tools, build and harness, with the learner actor training while episodes run. The
checkpoint is test_torch_policy's tiny random Qwen2 and its tokenizer. Checks that
every step's batch was sampled by the weight versions the staleness bound allows, that new
weights reached the policy with their version (the log's policy responses carry it), that with
staleness 0 no episode of a batch started before the learner had consumed the batch before it,
and that the run leaves checkpoints and a changed actor."""
import json
import pathlib
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "model"))
from test_torch_policy import SOURCE, binary, export, make_model, train_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(scratch):
    # Random weights, sampled at temperature 1: the turns are mostly not tool calls, and the
    # episodes end at their turn budget. (test_torch_policy's Bash-writing weights would not do:
    # their sampled tokens have probability 1.0 in float32, so the policy gradient is exactly 0.)
    path = scratch / "tiny-qwen2"
    path.mkdir()
    make_model(path, train_tokenizer(path))
    return path


def train_live(model_dir, out, staleness, steps, batch):
    return subprocess.run(
        [binary(), "--set", f"rollout.runs_dir={out / 'runs'}",
         "--set", f"policy.tools_dir={SOURCE / 'skills' / 'tools'}",
         "--set", "policy.temperature=1", "--set", "policy.max_tokens=16", "--set", "episode.max_turns=2",
         "--set", "harness.timed_runs=3", "--set", "harness.warmup_runs=1",
         "--set", f"learner.model_dir={model_dir}", "--set", f"learner.ppo_steps={steps}",
         "--set", f"learner.batch_episodes={batch}", "--set", f"learner.staleness={staleness}",
         "--set", "learner.actor_lr=1e-3", "--set", "learner.critic_lr=1e-3",
         "--set", "learner.checkpoint_every=1",
         "train", "--out", str(out), "--live", "--corpus", "smoke", "--tasks", "smoke_01*",
         "--device", "cpu", "--concurrency", "2"],
        capture_output=True, text=True, timeout=900)


def metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def batch_of(episode_id, batch):
    return int(episode_id.split("-")[1]) // batch  # train000000-0003(-retryN) -> 3 // batch


def test_synchronous_live_ppo_samples_each_batch_with_the_weights_of_the_one_before(model_dir, scratch):
    out = scratch / "sync"
    done = train_live(model_dir, out, staleness=0, steps=2, batch=2)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = metrics(out)
    assert [(m["step"], m["stage"], m["live"], m["rollout_episodes"]) for m in lines] == \
        [(1, "ppo", True, 2), (2, "ppo", True, 2)], lines
    assert [m["sampled_versions"] for m in lines] == [[0, 0], [1, 1]], lines
    assert all(m["version_lag"] == 0 and "skipped" not in m and m["episodes"] == 2 for m in lines), lines
    # A random model writes no kernel: nothing passes, and the rates say so.
    assert all((m["pass_rate"], m["faster_than_eager"], m["faster_than_compile"]) == (0, 0, 0) for m in lines), lines

    log = out / "rollout_log"
    updates = [r["payload"] for r in export(log, "learner_update")]
    assert [(u["step"], u["weight_version"], u["samples"]) for u in updates] == [(1, 1, 2), (2, 2, 2)]
    assert all(pathlib.Path(u["checkpoint_path"]).is_dir() for u in updates[-1:]), updates
    # Each response carries the version that sampled it: batch b's turns were sampled by version b.
    responses = export(log, "policy_response")
    assert responses
    for r in responses:
        assert r["payload"]["weight_version"] == batch_of(r["episode"], 2), r["episode"]
    # Staleness 0: no episode of batch 1 asked the policy anything before the learner's first update.
    everything = subprocess.run([binary(), "log", "export", str(log)], capture_output=True, text=True,
                                timeout=120, check=True).stdout.splitlines()
    order = [(r["type"], r["episode"]) for r in map(json.loads, everything)]
    first_update = order.index(("learner_update", ""))
    started_batch_1 = [i for i, (kind, episode) in enumerate(order)
                       if kind == "policy_request" and episode and batch_of(episode, 2) == 1]
    assert started_batch_1 and min(started_batch_1) > first_update

    # The actor changed, and the run's last checkpoint and final/ hold it.
    from safetensors.torch import load_file
    before = load_file(str(model_dir / "model.safetensors"))
    after = load_file(str(out / "final" / "model.safetensors"))
    assert any(not torch.equal(before[k].float(), after[k].float()) for k in before), lines
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.name.startswith("step-"))[-1].endswith("2")


def test_a_learner_running_behind_keeps_sampling_within_the_bound(model_dir, scratch):
    out = scratch / "async"
    done = train_live(model_dir, out, staleness=1, steps=3, batch=1)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = metrics(out)
    assert [m["step"] for m in lines] == [1, 2, 3]
    for m in lines:  # step s trains a batch sampled by version s - 1 or, one batch ahead, s - 2
        oldest, newest = m["sampled_versions"]
        assert m["step"] - 2 <= oldest <= newest <= m["step"] - 1 and m["version_lag"] <= 1, m


def test_live_training_refuses_bad_input_in_one_line(model_dir, scratch):
    out = scratch / "bad"
    done = subprocess.run([binary(), "--set", f"learner.model_dir={model_dir}", "train", "--out", str(out),
                           "--live", "--corpus", "no-such-set"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "no-such-set" in done.stderr


def test_a_learner_that_fails_ends_the_run_with_an_error_instead_of_a_hang(model_dir, scratch):
    # The first step's checkpoint cannot be written (checkpoints/ is a file): the learner actor
    # stops, and admission, which waits on it, must not wait for ever.
    out = scratch / "broken"
    out.mkdir()
    (out / "checkpoints").write_text("not a directory")
    done = train_live(model_dir, out, staleness=0, steps=3, batch=1)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "the learner stopped" in done.stderr, done.stderr[-3000:]
    assert len(metrics(out)) == 1  # the step that ran is written down before its checkpoint failed
