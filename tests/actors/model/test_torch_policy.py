"""The torch policy end to end: `cuda-agent generate` against transformers on the same checkpoint
and tokenizer, and a CPU rollout with `--policy torch` through the real tools, build and harness,
whose trajectory is token for token what the Qwen2.5 chat template and the tokenizer make of the
conversation, and whose hermetic replay is identical.

The checkpoint is a tiny Qwen2 with a byte-level BPE tokenizer trained here on the texts an
episode shows the model. For the rollout its weights are set, not trained, so that greedy
decoding writes one tool call: every layer's output projections are near zero (the residual
stream carries the current token's embedding to the end), and the untied lm_head maps the
embedding of each token of the call to the next one. The call's JSON is one added token of the
tokenizer, so that this bigram chain is unambiguous. transformers' own greedy generate on the
same weights is checked to write the same call, so the fixture does not lean on the C++."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch

SOURCE = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(SOURCE / "tools" / "learn"))
import tiny_model  # noqa: E402  the shipped tokenizer builder (learner.init_model = "tiny")


def find_template():
    """The real Qwen2.5-Instruct chat template where one is at hand (it is not committed: see
    tests/actors/model/templates/README.md); without it the prompts are compared with the C++ chat
    format's rendering, whose parity with the template test_chat_format.py checks."""
    for folder in (os.environ.get("CUDA_AGENT_CHAT_TEMPLATES"), SOURCE / "shared" / "chat_templates",
                   SOURCE / "tests" / "actors" / "model" / "templates"):
        if folder and (pathlib.Path(folder) / "qwen2.5-instruct.jinja").is_file():
            return (pathlib.Path(folder) / "qwen2.5-instruct.jinja").read_text(encoding="utf-8")
    return None


TEMPLATE = find_template()
CALL_JSON = '\n{"name": "Bash", "arguments": {"command": "ls"}}\n'


def binary():
    path = os.environ.get("CUDA_AGENT_BINARY")
    if not path:
        pytest.skip("CUDA_AGENT_BINARY is not set (ctest sets it)")
    return path


def train_tokenizer(path):
    from tokenizers import AddedToken

    texts = [(SOURCE / "skills" / "SKILL.md").read_text()]
    texts += [p.read_text() for p in sorted((SOURCE / "skills" / "tools").glob("*.json"))]
    texts += [p.read_text() for p in sorted((SOURCE / "corpus" / "tasks" / "smoke").glob("*.py"))]
    tok = tiny_model.bpe_tokenizer(texts, 3000)
    tok.add_tokens([AddedToken(CALL_JSON, normalized=False, special=False)])
    tok.save(str(path / "tokenizer.json"))
    tiny_model.write_tokenizer_config(path, TEMPLATE)
    return tok


def hf_tokenizer(path):
    import transformers

    return transformers.PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"),
                                                eos_token="<|im_end|>")


def make_model(path, tok, chain=None):
    """A tiny Qwen2 with random weights; `chain` (token id -> next token id) makes greedy decoding
    follow it from any token it names."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=32768, tie_word_embeddings=chain is None,
                         eos_token_id=tok.token_to_id("<|im_end|>"), bos_token_id=None)
    model = Qwen2ForCausalLM(config).eval()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name:
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(0.5 * noise)
            else:
                p.copy_(0.1 * noise)
        if chain:
            for layer in model.model.layers:  # the residual stream keeps the token's embedding
                layer.self_attn.o_proj.weight.mul_(1e-3)
                layer.mlp.down_proj.weight.mul_(1e-3)
            model.lm_head.weight.mul_(0.02)
            emb = model.model.embed_tokens.weight
            for current, following in chain.items():
                model.lm_head.weight[following] += emb[current] / emb[current].norm() * 8.0
    model.save_pretrained(str(path), safe_serialization=True)
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-qwen2")
    tok = train_tokenizer(path)
    model = make_model(path, tok)
    return path, tok, model


def generate(path, *args):
    done = subprocess.run([binary(), "generate", "--model", str(path), *args],
                          capture_output=True, text=True, timeout=300)
    return done


def test_generate_matches_transformers(checkpoint):
    path, tok, model = checkpoint
    prompt = "__global__ void relu(const float* x, float* y, int n) {\n  int i = "
    done = generate(path, "--prompt", prompt, "--max-tokens", "64", "--temperature", "0", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    ids = hf_tokenizer(path)(prompt).input_ids
    assert out["prompt_tokens"] == len(ids)
    with torch.no_grad():
        ref = model.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False,
                             output_logits=True, return_dict_in_generate=True,
                             eos_token_id=model.config.eos_token_id, pad_token_id=0)
    expected = ref.sequences[0, len(ids):].tolist()
    assert out["token_ids"] == expected
    logprobs = [torch.log_softmax(step[0].double(), -1)[t].item()
                for step, t in zip(ref.logits, expected)]
    assert max(abs(a - b) for a, b in zip(out["logprobs"], logprobs)) < 1e-4
    assert out["text"] == hf_tokenizer(path).decode(expected)


def test_generate_samples_the_same_tokens_under_the_same_seed(checkpoint):
    path, _, _ = checkpoint
    runs = [json.loads(generate(path, "--prompt", "Write a kernel", "--max-tokens", "32",
                                "--seed", seed, "--json").stdout)["token_ids"]
            for seed in ("3", "3", "4")]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_generate_refuses_bad_input_in_one_line(checkpoint, tmp_path):
    path, _, _ = checkpoint
    missing = generate(tmp_path / "nothing", "--prompt", "x")
    assert missing.returncode != 0
    assert len(missing.stderr.strip().splitlines()) == 1 and "tokenizer.json" in missing.stderr
    both = generate(path, "--prompt", "x", "--prompt-file", str(tmp_path / "f"))
    assert both.returncode != 0
    none = generate(path)
    assert none.returncode != 0 and "--prompt" in none.stderr


def test_cuda_graphs_without_the_batched_decode_step_is_refused_in_one_line(checkpoint, tmp_path):
    path, _, _ = checkpoint
    done = subprocess.run(
        [binary(), "--set", f"rollout.runs_dir={tmp_path / 'runs'}", "--set", f"policy.model_dir={path}",
         "--set", "policy.batched_decode=false", "--set", "policy.cuda_graphs=true",
         "rollout", "--corpus", "smoke", "--policy", "torch", "--tasks", "smoke_01*", "--log", str(tmp_path / "log")],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "policy.cuda_graphs" in lines[0] and "policy.batched_decode = true" in lines[0], lines


def export(log, kind):
    done = subprocess.run([binary(), "log", "export", str(log), "--type", kind],
                          capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


def hf_messages(messages):
    out = []
    for m in messages:
        d = {"role": m["role"], "content": m["content"]}
        if m["role"] == "tool":
            d["tool_call_id"] = m["tool_call_id"]
        if m["tool_calls"]:
            d["tool_calls"] = [{"id": c["call_id"], "type": "function",
                                "function": {"name": c["tool"],
                                             "arguments": json.loads(c["arguments_json"] or "{}")}}
                               for c in m["tool_calls"]]
        out.append(d)
    return out


def expected_prompt(tokenizer, request):
    """The prompt text of `request` (by the real template, else by the C++ chat format) and
    what the HF tokenizer makes of it."""
    tools_dir = SOURCE / "skills" / "tools"
    if TEMPLATE:
        offered = request["tools"] or sorted(p.stem for p in tools_dir.glob("*.json"))
        tools = [{"type": "function", "function": json.loads((tools_dir / f"{name}.json").read_text())}
                 for name in offered]
        text = tokenizer.apply_chat_template(hf_messages(request["messages"]), tools=tools,
                                             tokenize=False, add_generation_prompt=True,
                                             chat_template=TEMPLATE)
    else:
        probe = pathlib.Path(os.environ["CUDA_AGENT_BUILD_DIR"]) / "chat_probe"
        ask = {"format": "qwen2", "tools_dir": str(tools_dir),
               "renders": [{"messages": request["messages"], "offered": request["tools"],
                            "add_generation_prompt": True}]}
        done = subprocess.run([str(probe)], input=json.dumps(ask), capture_output=True, text=True,
                              timeout=60, check=True)
        text = json.loads(done.stdout)["renders"][0]["text"]
    return text, tokenizer(text, add_special_tokens=False).input_ids


def test_a_rollout_with_the_torch_policy_runs_tools_and_records_the_exact_tokens(tmp_path, request):
    path = tmp_path / "tiny-qwen2-bash"
    path.mkdir()
    tok = train_tokenizer(path)
    hf_tok = hf_tokenizer(path)
    # The generation prompt "<|im_start|>assistant\n" ends in the token that starts the chain.
    last = hf_tok("<|im_start|>assistant\n", add_special_tokens=False).input_ids[-1]
    call = [tok.token_to_id(t) for t in ("<tool_call>", CALL_JSON, "</tool_call>", "<|im_end|>")]
    model = make_model(path, tok, chain={last: call[0], call[0]: call[1], call[1]: call[2],
                                         call[2]: call[3]})
    with torch.no_grad():
        probe = hf_tok("Some text.<|im_start|>assistant\n", add_special_tokens=False).input_ids
        written = model.generate(torch.tensor([probe]), max_new_tokens=8, do_sample=False,
                                 eos_token_id=call[3], pad_token_id=0)[0, len(probe):].tolist()
    assert written == call, "the fixture's weights do not write the call in transformers"

    # Sandboxed commands may run as another user, who must reach the workdir: not under pytest's
    # private tmp_path.
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="cuda-agent-torch-"))
    scratch.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    log = scratch / "log"
    done = subprocess.run(
        [binary(), "--set", f"rollout.runs_dir={scratch / 'runs'}",
         "--set", f"policy.tools_dir={SOURCE / 'skills' / 'tools'}",
         "--set", f"policy.model_dir={path}", "--set", "policy.temperature=0",
         "--set", "policy.max_tokens=64", "--set", "episode.max_turns=2",
         "--set", "harness.timed_runs=5", "--set", "harness.warmup_runs=2",
         "rollout", "--corpus", "smoke", "--policy", "torch", "--tasks", "smoke_01*",
         "--log", str(log), "--run-id", "torch"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    requests = export(log, "policy_request")
    responses = export(log, "policy_response")
    assert [r["payload"]["turn"] for r in responses] == [1, 2]
    first, second = (r["payload"] for r in responses)
    assert [(c["tool"], json.loads(c["arguments_json"]), c["parse_error"])
            for c in first["tool_calls"]] == [("Bash", {"command": "ls"}, "")]
    assert first["token_ids"] == call
    results = [r for r in export(log, "tool_result") if r["sender"] == "tools"]
    assert results and "model.py" in results[0]["payload"]["output"], results

    # Each turn's prompt is what the chat template and the tokenizer make of the conversation so
    # far: the first rendered in full, the second as the first's tokens, the sampled call, then
    # the tool result's markup.
    for request, response in zip((r["payload"] for r in requests), (first, second)):
        text, ids = expected_prompt(hf_tok, request)
        if request["turn"] == 1:
            assert response["prompt_token_ids"] == ids
        else:
            assert first["prompt_token_ids"] + first["token_ids"] + response["prompt_token_ids"] == ids
        assert hf_tok.decode(ids) == text

    [trajectory] = [r["payload"] for r in export(log, "trajectory")]
    tokens = [t for turn in trajectory["turns"] for t in turn["token_ids"]]
    assert tokens == (first["prompt_token_ids"] + first["token_ids"] + second["prompt_token_ids"]
                      + second["token_ids"])
    mask = [m for turn in trajectory["turns"] for m in bytes.fromhex(turn["loss_mask"])]  # bin: hex
    assert mask == ([0] * len(first["prompt_token_ids"]) + [1] * len(first["token_ids"])
                    + [0] * len(second["prompt_token_ids"]) + [1] * len(second["token_ids"]))

    replay = subprocess.run([binary(), "replay", str(log)], capture_output=True, text=True,
                            timeout=300)
    assert replay.returncode == 0, replay.stdout + replay.stderr
