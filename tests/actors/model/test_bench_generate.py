"""`cuda-agent bench generate` (tools/cli/bench_generate_command.cpp) on CPU: a short run's JSON.

Checks that every batch x context cell carries positive rates for the engine and, unless
--no-hf, for transformers (tools/bench/hf_generate.py run as a child), that the second-turn row
read the first turn from the cache, and that bad usage exits with status 2 and one line. Speeds
themselves are not asserted.
"""

import json
import os
import pathlib
import subprocess

import pytest

BINARY = os.environ.get("CUDA_AGENT_BINARY")

pytestmark = pytest.mark.skipif(
    not BINARY or not pathlib.Path(BINARY).exists(),
    reason="cuda-agent not built (set CUDA_AGENT_BINARY to build/tools/cuda-agent)",
)

SHORT = ["bench", "generate", "--shape", "tiny", "--contexts", "64", "--batches", "1,2",
         "--decode-tokens", "32", "--repeats", "1", "--threads", "1", "--json"]
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def run(args, timeout=120):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout, env=ENV)


def positive_spread(s):
    return s["median"] > 0 and 0 < s["min"] <= s["median"] <= s["max"]


def rate_or_none(s):
    # A decode rate is the generate run's time less the prefill run's: on a busy host a repeat
    # can time the decode at or below zero, and a cell whose repeats all did reports none.
    return s is None or positive_spread(s)


def check_common(out, bandwidth=None):
    assert out["device"] == "cpu" and out["dtype"] == "fp32" and out["threads"] == 1
    assert out["decode_tokens"] == 32 and out["repeats"] == 1
    assert out["model"]["parameters"] > 0 and out["model"]["layers"] == 2 and out["model"]["hidden"] == 64
    assert sorted((c["batch"], c["context"]) for c in out["cells"]) == [(1, 64), (2, 64)]
    for cell in out["cells"]:
        assert positive_spread(cell["engine"]["prefill_tok_s"]), cell
        assert rate_or_none(cell["engine"]["decode_tok_s"]), cell
        if cell["batch"] == 1:
            # Weights plus 2 (k and v) x layers x kv heads x head dim x context x 4 bytes.
            kv = 2 * 2 * 2 * 16 * 64 * 4
            assert cell["roofline"]["bytes_per_token"] == out["model"]["weight_bytes"] + kv
            if bandwidth is None:
                assert cell["roofline"]["fraction"] is None  # no --bandwidth-gbs on cpu
            else:
                roof = bandwidth * 1e9 / cell["roofline"]["bytes_per_token"]
                assert cell["roofline"]["roofline_tok_s"] == pytest.approx(roof)
                decode = cell["engine"]["decode_tok_s"]
                assert cell["roofline"]["fraction"] == (None if decode is None else pytest.approx(decode["median"] / roof))
        else:
            assert cell["roofline"] is None
    # 31 decode steps per generate run outlast a prefill's timing noise in all but rare repeats.
    assert any(cell["engine"]["decode_tok_s"] for cell in out["cells"]), out["cells"]
    turn = out["second_turn"]
    assert turn["first_prompt_tokens"] == 64 and turn["first_cached_tokens"] == 0
    assert turn["second_prompt_tokens"] == 64 + 32 + 100
    # The cache holds the whole first turn, prompt and completion; only the 100 new tokens are prefilled.
    assert turn["second_cached_tokens"] == 64 + 32
    assert turn["first_turn_s"] > 0 and turn["second_turn_s"] > 0
    # Each turn's own steps: one prefill, then its decode steps; nothing evicted, no graph on CPU.
    for steps in (turn["first_turn_steps"], turn["second_turn_steps"]):
        assert steps["prefill_steps"] == 1 and steps["decode_steps"] >= 31, steps
        assert steps["pooled_decode_steps"] == 0 and steps["evictions"] == 0 and steps["slot_handovers"] == 0


def test_short_run_with_transformers():
    r = run(SHORT)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    check_common(out)
    assert out["transformers"]["ran"] is True and out["transformers"]["version"]
    for cell in out["cells"]:
        assert positive_spread(cell["transformers"]["prefill_tok_s"]), cell
        assert rate_or_none(cell["transformers"]["decode_tok_s"]), cell
        assert cell["ratio"]["prefill"] > 0
        both = cell["engine"]["decode_tok_s"] and cell["transformers"]["decode_tok_s"]
        assert (cell["ratio"]["decode"] > 0) if both else cell["ratio"]["decode"] is None


def test_short_run_without_transformers():
    r = run(SHORT + ["--no-hf", "--bandwidth-gbs", "10"])
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["bandwidth_gbs"] == 10
    for cell in out["cells"]:
        assert cell["transformers"] is None and cell["ratio"] is None
    assert out["transformers"] == {"ran": False, "reason": "--no-hf"}
    assert out["decode_attention"] == "per_sequence"
    check_common(out, bandwidth=10)


def test_short_run_with_the_decode_pool():
    """--decode-pool on CPU: the caches live in a pool of one slot per sequence of the largest
    batch, as long as the second turn; no graph runs off CUDA, so no step is a pooled graph."""
    r = run(SHORT + ["--no-hf", "--decode-pool"])
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    check_common(out)
    assert out["decode_pool"] == {"slots": 2, "tokens": 64 + 32 + 100 + 32}
    assert out["pooled_decode_steps"] == 0


def test_table_output():
    args = [a for a in SHORT if a != "--json"] + ["--no-hf"]
    r = run(args)
    assert r.returncode == 0, r.stderr
    assert "prefill tok/s" in r.stdout and "second turn at 64 tokens" in r.stdout
    assert "threads 1" in r.stdout


@pytest.mark.parametrize("args, message", [
    (["--model", "/nonexistent/model-dir"], "no config.json"),
    (["--shape", "tiny", "--batches", "1,x"], "is not a positive integer"),
    (["--shape", "tiny", "--contexts", "200000"], "max_position_embeddings"),
    (["--shape", "huge"], "unknown shape"),
    (["--shape", "tiny", "--batched-decode"], "--batched-decode runs only on --device cuda"),
    (["--shape", "tiny", "--cuda-graphs"], "--cuda-graphs runs only on --device cuda"),
])
def test_usage_errors(args, message):
    r = run(["bench", "generate", "--no-hf", *args])
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cuda-agent: error: ") and message in lines[0], r.stderr


def test_context_above_a_checkpoints_max_positions(tmp_path):
    # A checkpoint that transformers wrote, with room for 128 positions.
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    Qwen2ForCausalLM(config).save_pretrained(tmp_path)
    r = run(["bench", "generate", "--no-hf", "--model", str(tmp_path), "--contexts", "128"])
    assert r.returncode == 2 and "max_position_embeddings 128" in r.stderr, r.stderr
    r = run(["bench", "generate", "--model", str(tmp_path), "--contexts", "32", "--batches", "1",
             "--decode-tokens", "4", "--repeats", "1", "--threads", "1", "--json"])
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["model"]["source"].startswith("checkpoint ") and out["transformers"]["ran"] is True
    assert out["second_turn"] is None  # 32 + 4 + 100 positions do not fit in 128
