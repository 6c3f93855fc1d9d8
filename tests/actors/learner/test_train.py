"""`cuda-agent train` end to end on CPU: a real demo rollout through the tools, build and harness,
recorded in a tiny checkpoint's tokens (--policy demo with policy.model_dir), then RFT, value
pretraining and PPO on that log. Checks what the command writes (metrics.jsonl per step, the
checkpoints, a final Hugging Face checkpoint that transformers and `--policy torch` load), that
RFT lowers its loss, that a run SIGKILLed between steps and resumed writes the same losses
as an uninterrupted one, and that a learner process SIGKILLed under train's supervisor
(learner.restarts) is restarted in place with the same losses."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "model"))
from test_torch_policy import binary, make_model, train_tokenizer  # noqa: E402
from test_demo_tokens import rollout  # noqa: E402

STEPS = {"rft": 6, "value_pretrain": 2, "ppo": 2}


@pytest.fixture(scope="module")
def recorded(scratch):
    """A tiny random Qwen2 with its tokenizer, and the log of a demo rollout in its tokens."""
    model_dir = scratch / "model"
    model_dir.mkdir()
    make_model(model_dir, train_tokenizer(model_dir))
    done = rollout(model_dir, scratch, "smoke_01*")
    assert done.returncode == 0, done.stderr[-3000:]
    return model_dir, scratch / "log"


def train(model_dir, log, out, *extra, wait=True, resume=False):
    args = [binary(), "--set", f"learner.model_dir={model_dir}", "--set", f"learner.logs={log}",
            "--set", f"learner.rft_steps={STEPS['rft']}", "--set", f"learner.value_steps={STEPS['value_pretrain']}",
            "--set", f"learner.ppo_steps={STEPS['ppo']}", "--set", "learner.actor_lr=1e-3",
            "--set", "learner.critic_lr=1e-3", "--set", "learner.checkpoint_every=1", *extra,
            "train", "--out", str(out), *(["--resume"] if resume else [])]
    if not wait:
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(args, capture_output=True, text=True, timeout=900)


def metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def losses(lines):
    drop = {"tokens_per_s"}  # a wall-clock rate, not a result
    return [{k: v for k, v in line.items() if k not in drop} for line in lines]


def test_train_runs_the_three_stages_and_exports_the_actor(recorded, scratch):
    model_dir, log = recorded
    out = scratch / "straight"
    done = train(model_dir, log, out)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = metrics(out)
    assert [l["stage"] for l in lines] == [s for s, n in STEPS.items() for _ in range(n)]
    assert [l["step"] for l in lines] == list(range(1, sum(STEPS.values()) + 1))
    rft = [l["sft_loss"] for l in lines if l["stage"] == "rft"]
    assert rft[-1] < rft[0], rft
    assert all(l["reward_mean"] >= 1 for l in lines)  # the demos' episodes earn their milestones
    ppo = [l for l in lines if l["stage"] == "ppo"]
    assert all(0 <= l["clip_fraction"] <= 1 and l["is_weight_max"] <= 2.0 for l in ppo)
    assert "RFT keeps 1" in done.stderr
    # Each stage's progress ends on its last step (stderr is no terminal: plain lines).
    for stage, n in STEPS.items():
        assert f"train {stage}: step {n}/{n} | " in done.stderr, done.stderr[-3000:]
    assert "sft_loss" in done.stderr and "policy_loss" in done.stderr

    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir() if p.name.startswith("step-"))
    assert len(ckpts) == 2 and ckpts[-1].endswith(f"{sum(STEPS.values()):012d}")

    from transformers import AutoModelForCausalLM
    final = AutoModelForCausalLM.from_pretrained(out / "final", dtype=torch.float32)
    start = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        assert not torch.allclose(final(ids).logits, start(ids).logits)
    generated = subprocess.run([binary(), "generate", "--model", str(out / "final"), "--prompt", "def f",
                                "--max-tokens", "4", "--temperature", "0", "--json"],
                               capture_output=True, text=True, timeout=300)
    assert generated.returncode == 0, generated.stderr
    assert len(json.loads(generated.stdout)["token_ids"]) >= 1


def learner_process(supervisor):
    """The pid of the learner process train's supervisor started (learner.restarts > 0)."""
    children = open(f"/proc/{supervisor.pid}/task/{supervisor.pid}/children").read().split()
    assert len(children) == 1, children
    return int(children[0])


def uninterrupted(model_dir, log, scratch):
    """The run the interrupted ones are compared with (the first test's, else made here)."""
    straight = scratch / "straight"
    if not (straight / "metrics.jsonl").exists():
        assert train(model_dir, log, straight).returncode == 0
    return straight


def wait_for_steps(proc, out, steps):
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if (out / "metrics.jsonl").exists() and len((out / "metrics.jsonl").read_text().splitlines()) >= steps:
            return
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed: " + proc.stderr.read()[-2000:]


def test_a_run_killed_between_steps_resumes_with_the_same_losses(recorded, scratch):
    model_dir, log = recorded
    straight = uninterrupted(model_dir, log, scratch)
    out = scratch / "killed"
    proc = train(model_dir, log, out, wait=False)
    wait_for_steps(proc, out, 3)
    proc.send_signal(signal.SIGKILL)  # train itself: its learner process dies with it
    proc.wait()
    assert len(metrics(out)) < sum(STEPS.values())
    resumed = train(model_dir, log, out, resume=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr
    assert losses(metrics(out)) == losses(metrics(straight))


def test_bf16_working_weights_resume_from_the_checkpoint_weights(recorded, scratch):
    """learner.bf16_working_weights: the bfloat16 copies are made when the learner is, before
    --resume reads the checkpoint into the master weights; the first resumed step must still run
    on the checkpoint's weights, so the losses are those of the uninterrupted run."""
    model_dir, log = recorded
    copies = ("--set", "learner.compute_dtype=bfloat16", "--set", "learner.bf16_working_weights=true")
    straight = scratch / "straight-bf16-copies"
    done = train(model_dir, log, straight, *copies)
    assert done.returncode == 0, done.stderr[-3000:]
    out = scratch / "killed-bf16-copies"
    proc = train(model_dir, log, out, *copies, wait=False)
    wait_for_steps(proc, out, 3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(metrics(out)) < sum(STEPS.values())
    resumed = train(model_dir, log, out, *copies, resume=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr
    assert losses(metrics(out)) == losses(metrics(straight))


def test_a_learner_process_killed_mid_run_is_restarted_in_place_with_the_same_losses(recorded, scratch):
    """SIGKILL to the learner process, not to train: its supervisor starts it again from the
    newest checkpoint, the run completes by itself, and its losses are the uninterrupted run's."""
    model_dir, log = recorded
    straight = uninterrupted(model_dir, log, scratch)
    out = scratch / "restarted"
    proc = train(model_dir, log, out, wait=False)
    wait_for_steps(proc, out, 3)
    killed = learner_process(proc)
    os.kill(killed, signal.SIGKILL)
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    assert f"the learner process {killed} died by signal 9" in err and "restart 1 of 2" in err, err[-3000:]
    assert "resumed from" in err
    assert losses(metrics(out)) == losses(metrics(straight))


def test_a_learner_that_keeps_dying_ends_train_with_one_line(recorded, scratch):
    model_dir, log = recorded
    out = scratch / "dying"
    proc = train(model_dir, log, out, "--set", "learner.restarts=1", wait=False)
    for steps in (2, 4):  # the second death comes after the restart's own progress
        wait_for_steps(proc, out, steps)
        os.kill(learner_process(proc), signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("cuda-agent: error: the learner process") and "learner.restarts = 1" in last, last
    assert "train --resume --out" in last


def test_sigterm_to_train_stops_its_learner_process_too(recorded, scratch):
    model_dir, log = recorded
    out = scratch / "stopped"
    proc = train(model_dir, log, out, wait=False)
    wait_for_steps(proc, out, 2)
    learner = learner_process(proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "train: stopped; `train --resume --out" in err, err[-3000:]
    assert not os.path.exists(f"/proc/{learner}"), "the learner process outlived train"


def test_bad_input_is_a_one_line_error(recorded, scratch):
    model_dir, log = recorded
    out = scratch / "straight"
    again = train(model_dir, log, out)  # a finished run is not overwritten
    assert again.returncode == 2 and "--resume" in again.stderr
    missing = train(model_dir, scratch / "no-such-log", scratch / "missing")
    assert missing.returncode == 2 and "no-such-log" in missing.stderr
    assert missing.stderr.strip().count("\n") == 0, missing.stderr
