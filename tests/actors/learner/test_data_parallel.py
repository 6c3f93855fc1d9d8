"""The data-parallel learner on CPU (learner.ranks, the tcp collective over loopback): `train`
with two ranks, rank 1 a real `cuda-agent learner-rank` child process, on the log of a real demo
rollout of two smoke tasks in a tiny checkpoint's tokens.

Two ranks train as one rank does (the same losses and weights up to float rounding: each rank
holds half the batch, their gradients are summed); two-rank runs are deterministic to the bit;
a rank SIGKILLed mid-run is reported, restarted from rank 0's state and the step retried, so the
run ends exactly as an uninterrupted one; bad settings are one-line errors.

Where a GPU is visible, the same batches over NCCL: one rank (the NCCL path on one GPU) trains
as the plain learner does, and with two GPUs two NCCL ranks train as one rank."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "model"))
from test_torch_policy import binary, make_model, train_tokenizer  # noqa: E402
from test_demo_tokens import rollout  # noqa: E402

STEPS = {"rft": 4, "value_pretrain": 1, "ppo": 2}  # the killed-rank test kills after step 3
TIMING = {"tokens_per_s", "seconds", "rank_restarts"}  # wall-clock figures and the restart count


@pytest.fixture(scope="module")
def recorded(scratch):
    """A tiny random Qwen2 with its tokenizer, and the log of a demo rollout of two tasks."""
    model_dir = scratch / "model"
    model_dir.mkdir()
    make_model(model_dir, train_tokenizer(model_dir))
    done = rollout(model_dir, scratch, "smoke_01*,smoke_02*")
    assert done.returncode == 0, done.stderr[-3000:]
    return model_dir, scratch / "log"


def train(recorded, out, ranks, *extra, wait=True):
    model_dir, log = recorded
    args = [binary(), "--set", f"learner.model_dir={model_dir}", "--set", f"learner.logs={log}",
            "--set", f"learner.rft_steps={STEPS['rft']}", "--set", f"learner.value_steps={STEPS['value_pretrain']}",
            "--set", f"learner.ppo_steps={STEPS['ppo']}", "--set", "learner.batch_episodes=2",
            "--set", "learner.actor_lr=1e-3", "--set", "learner.critic_lr=1e-3", "--set", "learner.rft_lr=1e-3",
            "--set", "learner.ppo_epochs=2", "--set", f"learner.ranks={ranks}",
            "--set", "learner.collective=tcp", "--set", "learner.checkpoint_every=100", *extra,
            "train", "--out", str(out)]
    if not wait:
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(args, capture_output=True, text=True, timeout=900)


def metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def results(lines):
    return [{k: v for k, v in line.items() if k not in TIMING} for line in lines]


def weights(out):
    return load_file(str(out / "final" / "model.safetensors"))


@pytest.fixture(scope="module")
def two_ranks(recorded, scratch):
    out = scratch / "two-ranks"
    done = train(recorded, out, 2)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_two_ranks_train_as_one_rank_does(recorded, scratch, two_ranks):
    one = scratch / "one-rank"
    done = train(recorded, one, 1)
    assert done.returncode == 0, done.stderr[-3000:]
    single, double = metrics(one), metrics(two_ranks)
    assert [l["stage"] for l in double] == [s for s, n in STEPS.items() for _ in range(n)]
    assert all(l["ranks"] == 2 and l["rank_restarts"] == 0 for l in double)
    assert all("ranks" not in l for l in single)
    for a, b in zip(single, double):
        # The batch is the same episodes, only split: every count is exact.
        for key in ("episodes", "tokens", "policy_tokens", "reward_mean"):
            assert a[key] == b[key], (key, a, b)
        for key in ("sft_loss", "value_loss", "policy_loss", "entropy", "approx_kl", "actor_grad_norm",
                    "critic_grad_norm"):
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (key, a, b)
    ppo = [l for l in double if l["stage"] == "ppo"]
    # Two PPO epochs: the second pass runs on moved weights, so the policy has drifted from the
    # one that computed the old log-probabilities (one pass alone measures a KL of 0).
    assert all(l["approx_kl"] > 1e-9 for l in ppo), ppo
    w1, w2 = weights(one), weights(two_ranks)
    start = load_file(str(recorded[0] / "model.safetensors"))
    for name, t in w1.items():
        # Compared as norms: the ranks' gradient sum adds in another order, and AdamW divides
        # each element's update by its own gradient scale, so an element whose gradient is near
        # zero can move by a visible fraction of the step on a difference in the last bit
        # (seen: 1.2e-5 on one element of a tensor that moved 6.8e-3). Gradients not averaged,
        # or a rank's batch lost, move the whole tensor differently.
        moved = (t - start[name]).norm().item()
        assert (w2[name] - t).norm().item() <= 1e-3 * moved + 1e-6, name


def test_two_rank_runs_are_deterministic(recorded, scratch, two_ranks):
    again = scratch / "two-ranks-again"
    done = train(recorded, again, 2)
    assert done.returncode == 0, done.stderr[-3000:]
    assert results(metrics(again)) == results(metrics(two_ranks))
    w1, w2 = weights(two_ranks), weights(again)
    assert all(torch.equal(w1[n], w2[n]) for n in w1)


def rank_children(train_pid):
    """The PIDs of the learner-rank processes under `train_pid`: children of its learner process
    (train supervises that one, learner.restarts), or of train itself with learner.restarts = 0."""
    parents, ranks = {}, []
    for status in pathlib.Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            cmdline = (status.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        pid = int(status.parent.name)
        parents[pid] = int(fields.get("PPid", "0").strip() or 0)
        if b"learner-rank" in cmdline:
            ranks.append(pid)
    return [pid for pid in ranks if parents.get(pid) == train_pid or parents.get(parents.get(pid)) == train_pid]


def test_a_killed_rank_is_restarted_and_the_run_ends_as_if_uninterrupted(recorded, scratch, two_ranks):
    out = scratch / "killed-rank"
    proc = train(recorded, out, 2, wait=False)
    killed = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None and not killed:
        done_steps = len((out / "metrics.jsonl").read_text().splitlines()) if (out / "metrics.jsonl").exists() else 0
        children = rank_children(proc.pid)
        if done_steps >= 3 and children:
            os.kill(children[0], signal.SIGKILL)
            killed.append((done_steps, children[0]))
        time.sleep(0.01)
    assert killed, "the run ended before its rank could be killed"
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    assert "learner: rank 1 lost during a" in stderr, stderr[-3000:]
    lines = metrics(out)
    assert lines[-1]["rank_restarts"] >= 1
    assert results(lines) == results(metrics(two_ranks))
    w1, w2 = weights(two_ranks), weights(out)
    assert all(torch.equal(w1[n], w2[n]) for n in w1)
    assert not rank_children(proc.pid)


def close(a, b):
    """Two runs' metrics agree: counts exactly, losses and norms up to float rounding."""
    assert [l["stage"] for l in a] == [l["stage"] for l in b]
    for x, y in zip(a, b):
        for key in ("episodes", "tokens", "policy_tokens", "reward_mean"):
            assert x[key] == y[key], (key, x, y)
        for key in ("sft_loss", "value_loss", "policy_loss", "entropy", "approx_kl", "actor_grad_norm"):
            if key in x:
                assert y[key] == pytest.approx(x[key], rel=1e-4, abs=1e-6), (key, x, y)


CUDA = ("--set", "learner.device=cuda:0")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_one_nccl_rank_trains_as_the_plain_learner_on_cuda(recorded, scratch):
    plain = train(recorded, scratch / "cuda-plain", 1, *CUDA)
    assert plain.returncode == 0, plain.stderr[-3000:]
    nccl = train(recorded, scratch / "cuda-nccl", 1, *CUDA, "--set", "learner.collective=nccl")
    assert nccl.returncode == 0, nccl.stderr[-3000:]
    close(metrics(scratch / "cuda-plain"), metrics(scratch / "cuda-nccl"))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_nccl_ranks_train_as_one_rank_on_two_gpus(recorded, scratch):
    one = scratch / "cuda-plain"
    if not (one / "metrics.jsonl").exists():
        assert train(recorded, one, 1, *CUDA).returncode == 0
    two = train(recorded, scratch / "cuda-two", 2, *CUDA, "--set", "learner.collective=nccl")
    assert two.returncode == 0, two.stderr[-3000:]
    lines = metrics(scratch / "cuda-two")
    assert all(l["ranks"] == 2 and l["rank_restarts"] == 0 for l in lines)
    close(metrics(one), lines)


def test_bad_rank_settings_are_one_line_errors(recorded, scratch):
    for setting, expect in (("learner.ranks=0", "learner.ranks"),
                            ("learner.collective=gloo", "learner.collective"),
                            ("learner.rank_retries=-1", "learner.rank_retries")):
        done = train(recorded, scratch / "bad", 2, "--set", setting)
        assert done.returncode == 2 and expect in done.stderr, (setting, done.stderr)
        assert done.stderr.strip().count("\n") == 0, done.stderr
    nccl_on_cpu = train(recorded, scratch / "bad-nccl", 2, "--set", "learner.collective=nccl",
                        "--set", "learner.device=cpu")
    assert nccl_on_cpu.returncode == 2 and "learner.device on CUDA" in nccl_on_cpu.stderr, nccl_on_cpu.stderr
    assert not (scratch / "bad").exists() or not (scratch / "bad" / "metrics.jsonl").exists()
    # learner-rank is started by train, with the group's secret in its environment.
    env = {k: v for k, v in os.environ.items() if k != "CUDA_AGENT_LEARNER_SECRET"}
    alone = subprocess.run([binary(), "learner-rank", "--join", "127.0.0.1:1", "--rank", "1", "--world", "2"],
                           capture_output=True, text=True, timeout=60, env=env)
    assert alone.returncode == 2 and "CUDA_AGENT_LEARNER_SECRET" in alone.stderr, alone.stderr
    unreachable = subprocess.run([binary(), "learner-rank", "--join", "127.0.0.1:1", "--rank", "1", "--world", "2"],
                                 capture_output=True, text=True, timeout=60,
                                 env={**env, "CUDA_AGENT_LEARNER_SECRET": "x" * 32})
    assert unreachable.returncode == 1 and "cannot reach learner rank 0" in unreachable.stderr, unreachable.stderr
