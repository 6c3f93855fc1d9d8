"""`cuda-agent bench learn` (tools/cli/bench_learn_command.cpp) on CPU: a short run's JSON has a
row per stage and length with positive rates whose FLOP figure follows from the shape, and bad
input is a one-line error with status 2. The H200 numbers are in docs/benchmarks.md."""
import json
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "model"))
from test_torch_policy import binary  # noqa: E402


def run(args):
    return subprocess.run([binary(), "bench", "learn", *args], capture_output=True, text=True, timeout=300)


def test_a_short_run_reports_every_cell():
    done = run(["--device", "cpu", "--shape", "tiny", "--tokens", "64,128", "--repeats", "2", "--episodes", "2",
                "--json"])
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    rows = out["rows"]
    assert [(r["stage"], r["tokens_per_episode"]) for r in rows] == [("rft", 64), ("rft", 128), ("ppo", 64), ("ppo", 128)]
    for r in rows:
        s = r["step_s"]
        assert 0 < s["min"] <= s["median"] <= s["max"]
        assert r["tokens_per_s"] == 2 * r["tokens_per_episode"] / s["median"]
        assert r["tflops"] > 0 and "mfu" not in r  # no peak on cpu unless given
        o = r["optimizer_step_s"]
        assert 0 < o["min"] <= o["median"] <= o["max"]
    # The tiny shape (hidden 64, 2 layers, 4 heads of 16, intermediate 128, vocab 4096, tied):
    # matrices 2 * (64*64 + 2*64*32 + 64*64 + 3*64*128) = 73728, lm_head 262144.
    rft64 = rows[0]
    forward = 2 * (73728 + 262144) * 64 + 2 * 2 * 64 * 64 * 64
    assert abs(rft64["tflops"] * 1e12 * rft64["step_s"]["median"] - 2 * 3 * forward) < 1e-3 * forward
    # PPO: a forward and backward of the actor and of the critic (no lm_head), no old-policy forward.
    ppo64 = rows[2]
    critic = 2 * 73728 * 64 + 2 * 2 * 64 * 64 * 64
    assert abs(ppo64["tflops"] * 1e12 * ppo64["step_s"]["median"] - 2 * 3 * (forward + critic)) < 1e-3 * forward
    # The warm-up step's losses: a random model's next-token loss is about ln(vocab).
    for r in rows:
        first = r["first_step"]
        assert first["actor_grad_norm"] > 0
        if r["stage"] == "rft":
            assert 7.0 < first["loss"] < 9.5  # ln 4096 = 8.3
        else:
            assert first["value_loss"] > 0 and 7.0 < first["entropy"] < 9.5 and first["critic_grad_norm"] > 0


def test_attention_choice_changes_nothing_on_cpu():
    """learner.attention = cudnn reorders SDPA's CUDA kernels only: on CPU the first step's
    losses and gradient norms are the same to the bit."""
    runs = [json.loads(run(["--device", "cpu", "--shape", "tiny", "--tokens", "64", "--repeats", "1",
                            "--attention", a, "--json"]).stdout) for a in ("default", "cudnn")]
    assert [r["attention"] for r in runs] == ["default", "cudnn"]
    assert [r["first_step"] for r in runs[0]["rows"]] == [r["first_step"] for r in runs[1]["rows"]]


def test_bf16_working_weights_are_reported_and_train_in_bfloat16():
    """--bf16-working-weights: the first steps' losses sit within bfloat16 rounding of autocast's,
    and are not autocast's to the bit (the copies computed)."""
    runs = [json.loads(run(["--device", "cpu", "--shape", "tiny", "--tokens", "64", "--repeats", "1",
                            "--compute-dtype", "bfloat16", "--bf16-working-weights", v, "--json"]).stdout)
            for v in ("false", "true")]
    assert [r["bf16_working_weights"] for r in runs] == [False, True]
    autocast, copies = ([r["first_step"] for r in run_["rows"]] for run_ in runs)
    assert autocast != copies
    for a, c in zip(autocast, copies):
        assert c["loss"] == pytest.approx(a["loss"], rel=2e-2, abs=1e-3), (a, c)


def test_activation_checkpointing_is_reported():
    done = run(["--device", "cpu", "--shape", "tiny", "--tokens", "64", "--repeats", "1", "--stages", "ppo",
                "--activation-checkpointing", "true", "--json"])
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["activation_checkpointing"] is True and out["rows"][0]["step_s"]["median"] > 0


def test_bad_input_is_a_one_line_error():
    for args, word in ((["--tokens", "abc"], "--tokens"), (["--tokens", "64x"], "--tokens"),
                       (["--tokens", "64,,128"], "--tokens"), (["--stages", "sft"], "--stages"),
                       (["--repeats", "0"], "--repeats"), (["--shape", "gpt5"], "--shape"),
                       (["--attention", "fa9"], "--attention"),
                       (["--bf16-working-weights", "true"], "--bf16-working-weights")):
        done = run(["--device", "cpu", *args])
        assert done.returncode == 2 and word in done.stderr, (args, done.stderr)
        assert done.stderr.strip().count("\n") == 0, done.stderr


def test_profile_lists_the_costliest_operators():
    """--profile-top N: one more step per cell under LibTorch's profiler; on CPU its N costliest
    aten operators by inclusive wall time (on CUDA: kernels by GPU time, with the GPU's busy time)."""
    done = run(["--device", "cpu", "--shape", "tiny", "--tokens", "64", "--repeats", "1", "--profile-top", "3",
                "--json"])
    assert done.returncode == 0, done.stderr
    for r in json.loads(done.stdout)["rows"]:
        p = r["profile"]
        assert p["wall_s"] > 0 and "device_busy_s" not in p and p["what"].startswith("aten operators")
        assert len(p["top"]) == 3
        assert all(t["name"].startswith("aten::") and t["seconds"] > 0 and t["calls"] >= 1 for t in p["top"])
        assert [t["seconds"] for t in p["top"]] == sorted((t["seconds"] for t in p["top"]), reverse=True)
    plain = json.loads(run(["--device", "cpu", "--shape", "tiny", "--tokens", "64", "--repeats", "1",
                            "--json"]).stdout)
    assert all("profile" not in r for r in plain["rows"])
