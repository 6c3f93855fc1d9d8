"""The C++ transformer (actors/model/transformer.*) against transformers' own models.

Tiny random Qwen2, Qwen3 and Llama checkpoints are made with transformers and saved with its
save_pretrained; tests/actors/model/transformer_probe runs the C++ model on them and prints JSON, which
is compared with what transformers computes on the same checkpoint: logits, greedy generation
with the KV cache, per-token log-probabilities, gradients, save_pretrained round trips, config
parsing, and the one-line errors for broken checkpoints.
"""

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import (AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

BUILD = Path(os.environ.get("CUDA_AGENT_BUILD_DIR", "build/tests/actors/model"))
PROBE = BUILD / "transformer_probe"
TOLERANCE = 1e-4
GENERATED = 256

# One thread each: on a small shared machine, two OpenMP threads per tiny matmul spend most of
# their time waiting for each other.
torch.set_num_threads(1)
PROBE_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

pytestmark = pytest.mark.skipif(not PROBE.exists(), reason=f"{PROBE} not built (set CUDA_AGENT_BUILD_DIR)")

COMMON = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)

# name -> (model class, config); each stands for features of its family.
MODELS = {
    # Qwen2: q/k/v bias, tied embeddings, default rope with a non-default theta.
    "qwen2": (Qwen2ForCausalLM, lambda: Qwen2Config(**COMMON, tie_word_embeddings=True,
                                                   rope_theta=50000.0, eos_token_id=7)),
    # Qwen3: q/k norm, untied, head_dim 32 != 64 / 4, yarn rope.
    "qwen3": (Qwen3ForCausalLM, lambda: Qwen3Config(
        **COMMON, head_dim=32, tie_word_embeddings=False, eos_token_id=[5, 9],
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128})),
    # Llama: llama3 rope, saved sharded.
    "llama": (LlamaForCausalLM, lambda: LlamaConfig(
        **COMMON, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 128})),
    # Llama with attention_bias and mlp_bias, linear rope.
    "llama_bias": (LlamaForCausalLM, lambda: LlamaConfig(
        **COMMON, attention_bias=True, mlp_bias=True,
        rope_scaling={"rope_type": "linear", "factor": 2.0})),
}
SHARDED = {"llama"}


def randomize(model, seed):
    """Weights spread wider than transformers' init, so that greedy choices are not near-ties,
    and norms and biases away from their 1 and 0 so that a skipped one shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name:
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(0.3 * noise)
            else:
                p.copy_(0.12 * noise)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    out = {}
    for i, (name, (cls, make_config)) in enumerate(MODELS.items()):
        torch.manual_seed(i)
        model = cls(make_config()).eval()
        randomize(model, 100 + i)
        path = root / name
        if name in SHARDED:
            model.save_pretrained(path, max_shard_size="100KB")
            assert len(list(path.glob("*.safetensors"))) > 2 and (path / "model.safetensors.index.json").exists()
        else:
            model.save_pretrained(path)
        out[name] = path
    return out


def hf_model(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def probe(*args, check=True):
    result = subprocess.run([str(PROBE), *map(str, args)], capture_output=True, text=True, timeout=300,
                            env=PROBE_ENV)
    if check:
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)
    return result


def write_json(tmp_path, name, value):
    path = tmp_path / name
    path.write_text(json.dumps(value))
    return path


def token_rows(seed, lengths):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 1000, (n,), generator=gen).tolist() for n in lengths]


@pytest.mark.parametrize("name", list(MODELS))
def test_logits_match_transformers(name, checkpoints, tmp_path):
    rows = token_rows(1, [12, 7, 12, 3])
    width = max(map(len, rows))
    ids = [r + [0] * (width - len(r)) for r in rows]  # right padding
    mask = [[1] * len(r) + [0] * (width - len(r)) for r in rows]
    got = torch.tensor(probe("logits", checkpoints[name],
                             write_json(tmp_path, "in.json", {"input_ids": ids, "attention_mask": mask}))["logits"])
    model = hf_model(checkpoints[name])
    with torch.no_grad():
        want = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.double()
    real = torch.tensor(mask, dtype=torch.bool)
    diff = (got - want).abs()[real].max().item()
    print(f"{name}: max |logit diff| (padded batch) = {diff:.3g}")
    assert diff < TOLERANCE
    # Left padding takes the explicit mask (right padding runs the fused causal kernels).
    left_ids = [[0] * (width - len(r)) + r for r in rows]
    left_mask = [[0] * (width - len(r)) + [1] * len(r) for r in rows]
    got_left = torch.tensor(probe("logits", checkpoints[name], write_json(
        tmp_path, "left.json", {"input_ids": left_ids, "attention_mask": left_mask}))["logits"])
    with torch.no_grad():
        want_left = model(input_ids=torch.tensor(left_ids), attention_mask=torch.tensor(left_mask)).logits.double()
    real_left = torch.tensor(left_mask, dtype=torch.bool)
    assert (got_left - want_left).abs()[real_left].max().item() < TOLERANCE
    # The padded row equals the same tokens alone, and no mask at all equals causal attention.
    alone = torch.tensor(probe("logits", checkpoints[name],
                               write_json(tmp_path, "one.json", {"input_ids": [rows[1]]}))["logits"])[0]
    assert (alone - got[1, :len(rows[1])]).abs().max().item() < 1e-5
    with torch.no_grad():
        want_alone = model(input_ids=torch.tensor([rows[1]])).logits[0].double()
    assert (alone - want_alone).abs().max().item() < TOLERANCE


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_with_cache_matches_generate(name, checkpoints, tmp_path):
    prompts = token_rows(2, [9, 4, 14])
    got = probe("greedy", checkpoints[name], write_json(tmp_path, "p.json", {"prompts": prompts}), GENERATED)
    model = hf_model(checkpoints[name])
    model.generation_config.eos_token_id = None
    worst = 0.0
    for b, prompt in enumerate(prompts):
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 max_new_tokens=GENERATED, do_sample=False, eos_token_id=None, pad_token_id=0)
        want = out[0, len(prompt):].tolist()
        assert len(want) == GENERATED
        assert got["tokens"][b] == want, f"{name} prompt {b}: greedy tokens differ"
        # The log-probability of each generated token, from one full forward over the sequence.
        with torch.no_grad():
            logits = model(out).logits[0, len(prompt) - 1:-1].double()
        want_lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(want).unsqueeze(1)).squeeze(1)
        worst = max(worst, (torch.tensor(got["logprobs"][b]) - want_lp).abs().max().item())
        assert got["cache_lengths"][b] == len(prompt) + GENERATED - 1
    print(f"{name}: {GENERATED} greedy tokens identical for {len(prompts)} prompts; "
          f"max |logprob diff| = {worst:.3g}")
    assert worst < TOLERANCE


@pytest.mark.parametrize("name", ["qwen3", "llama"])
def test_mixed_prefill_and_decode_in_one_step(name, checkpoints, tmp_path):
    a_prefix, a_next, b = token_rows(3, [10, 1, 13])
    spec = {"a_prefix": a_prefix, "a_next": a_next, "b": b}
    got = probe("mixed", checkpoints[name], write_json(tmp_path, "m.json", spec))
    mixed, alone = torch.tensor(got["mixed"]), torch.tensor(got["alone"])
    assert got["cache_lengths"] == [11, 13]
    assert (mixed - alone).abs().max().item() < 1e-5
    assert (torch.tensor(got["after_truncate"])[0] - alone[0]).abs().max().item() < 1e-5
    model = hf_model(checkpoints[name])
    with torch.no_grad():
        want_a = model(torch.tensor([a_prefix + a_next])).logits[0, -1].double()
        want_b = model(torch.tensor([b])).logits[0, -1].double()
    diff = max((mixed[0] - want_a).abs().max().item(), (mixed[1] - want_b).abs().max().item())
    print(f"{name}: mixed step vs transformers, max |logit diff| = {diff:.3g}")
    assert diff < TOLERANCE
    # Several new tokens on top of a cache (a second prefill) in the same batch as a decode.
    c_prefix, c_more, d_prefix = token_rows(4, [6, 5, 8])
    got = probe("mixed", checkpoints[name],
                write_json(tmp_path, "m2.json", {"a_prefix": c_prefix, "a_next": c_more, "b": d_prefix}))
    with torch.no_grad():
        want_c = model(torch.tensor([c_prefix + c_more])).logits[0, -1].double()
    assert (torch.tensor(got["mixed"])[0] - want_c).abs().max().item() < TOLERANCE


def test_gradient_matches_transformers(checkpoints, tmp_path):
    name, weight = "qwen3", "model.layers.0.self_attn.q_proj.weight"
    rows = token_rows(5, [10, 6])
    ids = [r + [0] * (10 - len(r)) for r in rows]
    mask = [[1] * len(r) + [0] * (10 - len(r)) for r in rows]
    got = probe("grad", checkpoints[name],
                write_json(tmp_path, "g.json", {"input_ids": ids, "attention_mask": mask}), weight)
    model = hf_model(checkpoints[name])
    labels = torch.tensor(ids).masked_fill(torch.tensor(mask) == 0, -100)
    loss = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), labels=labels).loss
    loss.backward()
    want = dict(model.named_parameters())[weight].grad.double()
    assert abs(got["loss"] - loss.item()) < TOLERANCE
    diff = (torch.tensor(got["grad"]) - want).abs().max().item()
    print(f"{name}: loss {got['loss']:.6f} vs {loss.item():.6f}; max |grad diff| = {diff:.3g}")
    assert diff < TOLERANCE


@pytest.mark.parametrize("name", ["qwen2", "qwen3"])
def test_recomputed_layers_give_transformers_gradients(name, checkpoints, tmp_path):
    # Activation checkpointing: every weight's gradient, the embeddings (tied in qwen2) and the
    # layers whose backward ran a recomputed copy, against transformers' ordinary backward.
    rows = token_rows(7, [10, 6])
    ids = [r + [0] * (10 - len(r)) for r in rows]
    mask = [[1] * len(r) + [0] * (10 - len(r)) for r in rows]
    spec = write_json(tmp_path, "g.json", {"input_ids": ids, "attention_mask": mask})
    got = probe("grad", checkpoints[name], spec, "*", "recompute")
    plain = probe("grad", checkpoints[name], spec, "*")
    model = hf_model(checkpoints[name])
    labels = torch.tensor(ids).masked_fill(torch.tensor(mask) == 0, -100)
    model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), labels=labels).loss.backward()
    want = {n: p.grad.double() for n, p in model.named_parameters()}
    assert set(got["grads"]) == set(plain["grads"]) and set(got["grads"]) <= set(want)
    assert got["loss"] == pytest.approx(plain["loss"], abs=1e-6)
    # the graph holds one node per layer instead of each layer's operations
    assert got["graph_nodes"] < plain["graph_nodes"] / 2, (got["graph_nodes"], plain["graph_nodes"])
    worst = 0.0
    for weight, grad in got["grads"].items():
        g = torch.tensor(grad)
        assert g.abs().max().item() > 0, f"{weight}: no gradient reached it"
        worst = max(worst, (g - want[weight]).abs().max().item())
        assert (g - torch.tensor(plain["grads"][weight])).abs().max().item() < 1e-5, weight
    print(f"{name}: {len(got['grads'])} weights, max |grad - transformers| = {worst:.3g}")
    assert worst < TOLERANCE


@pytest.mark.parametrize("name,shard_bytes", [("qwen2", 5 << 30), ("qwen3", 60_000)])
def test_save_pretrained_loads_in_transformers(name, shard_bytes, checkpoints, tmp_path):
    out = tmp_path / "saved"
    probe("save", checkpoints[name], out, shard_bytes)
    if shard_bytes < (1 << 20):
        assert (out / "model.safetensors.index.json").exists() and len(list(out.glob("*.safetensors"))) > 2
    else:
        assert (out / "model.safetensors").exists()
    saved, info = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    original = hf_model(checkpoints[name])
    ids = torch.tensor(token_rows(6, [11]))
    with torch.no_grad():
        diff = (saved.eval()(ids).logits - original(ids).logits).abs().max().item()
    print(f"{name}: C++ save_pretrained -> transformers, max |logit diff| = {diff:.3g}")
    assert diff < 1e-6
    assert saved.config.tie_word_embeddings == original.config.tie_word_embeddings
    # Written out in full (yarn's derived attention_factor, beta defaults), otherwise the same.
    for key, value in original.config.rope_parameters.items():
        assert saved.config.rope_parameters[key] == value, key
    # And the C++ model reads its own output.
    got = torch.tensor(probe("logits", out, write_json(tmp_path, "i.json", {"input_ids": ids.tolist()}))["logits"])
    assert (got - original(ids).logits.detach().double()).abs().max().item() < TOLERANCE


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_runs(dtype, checkpoints):
    got = probe("check", checkpoints["qwen3"], dtype, "cpu")
    assert got["finite"] and got["dtype"] in ("BFloat16", "Half")
    assert got["cache_bytes"] > 0


def test_load_weights(checkpoints):
    got = probe("update", checkpoints["llama_bias"])
    assert got["version"] == 7 and got["changed"] > 0
    assert "model.norm.weight" in got["refused"]
    assert got["version_after_refusal"] == 7 and got["unchanged_after_refusal"] == 0


# --- config.json ------------------------------------------------------------------------------

@pytest.mark.parametrize("config", [
    {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"},
    {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"},
    {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8, "rope_theta": 500000.0,
     "rope_scaling": {"type": "linear", "factor": 3.0}, "eos_token_id": [1, 2]},
    {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "max_position_embeddings": 4096,
     "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 2.0}},
    {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 1024,
     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}},
])
def test_config_defaults_match_transformers(config, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(config))
    got = probe("config", tmp_path)
    want = AutoConfig.from_pretrained(tmp_path)
    for key in ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings",
                "bos_token_id"]:
        assert got[key] == getattr(want, key), key
    head_dim = getattr(want, "head_dim", None) or want.hidden_size // want.num_attention_heads
    assert got["head_dim"] == head_dim
    eos = want.eos_token_id
    assert got["eos_token_ids"] == ([] if eos is None else [eos] if isinstance(eos, int) else list(eos))
    rope = want.rope_parameters
    assert got["rope_parameters"]["rope_type"] == rope["rope_type"]
    assert got["rope_parameters"]["rope_theta"] == rope["rope_theta"]
    for key in ["factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"]:
        if key in rope:
            assert got["rope_parameters"][key] == rope[key], key
    assert got["qk_norm"] == (want.model_type == "qwen3")


# --- broken checkpoints -------------------------------------------------------------------------

def broken_copy(checkpoints, tmp_path, name="qwen3"):
    path = tmp_path / "broken"
    shutil.copytree(checkpoints[name], path)
    return path


def expect_error(path, *needles):
    result = probe("logits", path, path / "config.json", check=False)
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def test_missing_tensor(checkpoints, tmp_path):
    path = broken_copy(checkpoints, tmp_path)
    tensors = load_file(path / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    expect_error(path, "missing tensor", "model.layers.1.mlp.up_proj.weight")


def test_wrong_shape(checkpoints, tmp_path):
    path = broken_copy(checkpoints, tmp_path)
    tensors = load_file(path / "model.safetensors")
    tensors["model.layers.0.self_attn.k_norm.weight"] = torch.ones(16)
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    expect_error(path, "model.safetensors", "model.layers.0.self_attn.k_norm.weight", "[16]", "[32]")


def test_unexpected_tensor(checkpoints, tmp_path):
    path = broken_copy(checkpoints, tmp_path)
    tensors = load_file(path / "model.safetensors")
    tensors["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(128)
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    expect_error(path, "unexpected tensor", "q_proj.bias")


def test_unsupported_architecture(checkpoints, tmp_path):
    path = broken_copy(checkpoints, tmp_path)
    edit_config(path, architectures=["MistralForCausalLM"], model_type="mistral")
    expect_error(path, "config.json", "unsupported architecture", "MistralForCausalLM")


def test_unsupported_rope_type(checkpoints, tmp_path):
    path = broken_copy(checkpoints, tmp_path)
    edit_config(path, rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0})
    expect_error(path, "config.json", "unsupported rope type", "longrope")


def test_truncated_file(checkpoints, tmp_path):
    path = broken_copy(checkpoints, tmp_path)
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    expect_error(path, "model.safetensors", "truncated")


def test_truncated_shard(checkpoints, tmp_path):
    path = broken_copy(checkpoints, tmp_path, "llama")
    shard = sorted(path.glob("model-*.safetensors"))[-1]
    data = shard.read_bytes()
    shard.write_bytes(data[:-10])
    expect_error(path, shard.name, "truncated")


def raw_safetensors(path, header, data):
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def test_corrupt_headers(checkpoints, tmp_path):
    path = broken_copy(checkpoints, tmp_path)
    file = path / "model.safetensors"
    file.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    expect_error(path, "model.safetensors", "header length")
    raw_safetensors(file, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12))
    expect_error(path, "overlap")
    raw_safetensors(file, {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8))
    expect_error(path, "'a'", "12")
    raw_safetensors(file, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(4))
    expect_error(path, "'a'", "truncated")
    file.write_bytes(b"\x01\x02")
    expect_error(path, "truncated")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_logits_near_transformers(dtype, checkpoints, tmp_path):
    """Computed in that dtype as transformers does (norms in float32), so close to its logits,
    not bit-equal: the bound is loose, a wrong cast or a skipped norm is far above it."""
    ids = token_rows(7, [16])
    name = str(dtype).removeprefix("torch.")
    got = torch.tensor(probe("logits", checkpoints["qwen3"], write_json(tmp_path, "h.json", {"input_ids": ids}),
                             name)["logits"])
    model = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3"], dtype=dtype).eval()
    with torch.no_grad():
        want = model(torch.tensor(ids)).logits.double()
    diff = (got - want).abs().max().item()
    print(f"qwen3 {name}: max |logit diff| = {diff:.3g} (logits up to {want.abs().max().item():.3g})")
    assert diff < 0.05 * want.abs().max().item()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU host: CUDA loads")
def test_cuda_without_a_gpu_is_a_one_line_error(checkpoints):
    result = probe("check", checkpoints["qwen2"], "float32", "cuda", check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
    assert "cuda" in result.stderr


def test_decode_pool_keeps_every_token_and_logprob(checkpoints, tmp_path):
    """Caches in a decode pool's slots (policy.decode_pool_slots) give the same tokens and
    log-probabilities, to the bit, as caches of their own: whether a cache takes a slot at its
    prefill, finds none free, or outgrows its slot and moves out mid-generation. A cache's slot
    comes back when the cache is destroyed."""
    prompts = token_rows(5, [9, 4, 14])
    spec = write_json(tmp_path, "p.json", {"prompts": prompts})
    n = 24
    alone = probe("greedy", checkpoints["qwen2"], spec, n)
    # Two slots of 20 tokens: the third prompt finds none free; the first two outgrow theirs.
    small = probe("pool", checkpoints["qwen2"], spec, n, 2, 20)
    assert small["pooled_after_prefill"] == [True, True, False]
    assert small["pooled_at_end"] == [False, False, False]
    # Slots long enough for every continuation: each cache stays in its slot to the end, and
    # holds the slot's memory.
    roomy = probe("pool", checkpoints["qwen2"], spec, n, 3, 14 + n)
    assert roomy["pooled_after_prefill"] == [True, True, True]
    assert roomy["pooled_at_end"] == [True, True, True]
    assert len(set(roomy["cache_bytes"])) == 1 and roomy["cache_bytes"][0] > 0
    for got in (small, roomy):
        assert got["tokens"] == alone["tokens"]
        assert got["logprobs"] == alone["logprobs"]
        assert got["cache_lengths"] == alone["cache_lengths"]
        assert got["later_cache_pooled"] is True


def test_decode_pool_rejects_bad_sizes(checkpoints, tmp_path):
    spec = write_json(tmp_path, "p.json", {"prompts": [[1, 2, 3]]})
    for slots, tokens in ((2, 0), (-1, 8)):
        bad = probe("pool", checkpoints["qwen2"], spec, 1, slots, tokens, check=False)
        assert bad.returncode == 2, bad.stderr
        assert "decode pool" in bad.stderr and "must be positive" in bad.stderr, bad.stderr
