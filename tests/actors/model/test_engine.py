"""The generation engine (actors/model/generation_engine.hpp) against transformers.

A tiny Qwen2ForCausalLM with random weights is made here with transformers and saved with
save_pretrained; tests/actors/model/engine_probe runs scripts of engine operations on it and prints the
results, which are compared with transformers' generate() and logits processors, and with the
engine's own results for the same requests run alone or without a cache.
"""

import json
import os
import pathlib
import subprocess

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

BUILD_DIR = os.environ.get("CUDA_AGENT_BUILD_DIR")
PROBE = pathlib.Path(BUILD_DIR, "engine_probe") if BUILD_DIR else None

pytestmark = pytest.mark.skipif(
    PROBE is None or not PROBE.exists(),
    reason="engine_probe not built (set CUDA_AGENT_BUILD_DIR to build/tests/actors/model; needs LibTorch)",
)

VOCAB = 512
CONTEXT = 512

# A model this small gains nothing from more threads, and on a shared machine loses much: an
# OpenMP team of 2 on 2 busy cores ran the probe's decode 25x slower than one thread.
torch.set_num_threads(1)
PROBE_ENV = dict(os.environ, OMP_NUM_THREADS="1")


def tiny_model(seed, hidden=64):
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        # Wider than the default 0.02, so that greedy choices are not near ties that float
        # rounding between two implementations could flip.
        initializer_range=0.1,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(config).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine_models")
    out = {}
    for name, seed, hidden in (("a", 0, 64), ("b", 1, 64), ("narrow", 2, 32)):
        model = tiny_model(seed, hidden)
        model.save_pretrained(root / name)
        out[name] = (root / name, model)
    return out


def run_probe(tmp_path, model_dir, ops, options=None, decode_pool=None):
    script = {"model": str(model_dir), "options": options or {}, "ops": ops}
    if decode_pool:
        script["decode_pool"] = decode_pool  # [slots, tokens]
    path = tmp_path / f"script_{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(script))
    done = subprocess.run([str(PROBE), str(path)], capture_output=True, text=True, timeout=300,
                          env=PROBE_ENV)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def submit(name, prompt, sequence_id="", **sampling):
    return {"op": "submit", "name": name, "sequence_id": sequence_id, "prompt": prompt,
            "sampling": sampling}


def hf_greedy(model, prompt, n):
    """transformers' greedy tokens and the log_softmax of its raw logits at each."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=n, output_logits=True, return_dict_in_generate=True)
    tokens = out.sequences[0, len(prompt):].tolist()
    logprobs = [torch.log_softmax(l[0].float(), -1)[t].item() for l, t in zip(out.logits, tokens)]
    return tokens, logprobs


def prompt_of(length, salt=0):
    g = torch.Generator().manual_seed(1000 + 31 * length + salt)
    return torch.randint(0, VOCAB, (length,), generator=g).tolist()


def close(a, b, tol):
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))


def test_greedy_matches_transformers(models, tmp_path):
    model_dir, hf = models["a"]
    prompt = prompt_of(7)
    out = run_probe(tmp_path, model_dir, [submit("g", prompt, temperature=0, max_tokens=256)])
    r = out["results"]["g"]
    tokens, logprobs = hf_greedy(hf, prompt, 256)
    assert r["token_ids"] == tokens
    worst = max(abs(x - y) for x, y in zip(r["logprobs"], logprobs))
    assert worst <= 1e-4, worst
    assert r["finish_reason"] == "length"
    assert (r["prompt_tokens"], r["cached_tokens"], r["weight_version"]) == (7, 0, 0)


SAMPLED = dict(temperature=1.3, top_k=40, top_p=0.9)


def mixed_requests():
    """8 requests of different prompt lengths, greedy and seeded sampling, different lengths."""
    reqs = []
    for i, length in enumerate((3, 40, 11, 25, 1, 17, 33, 6)):
        sampling = dict(temperature=0) if i % 2 == 0 else dict(SAMPLED, seed=100 + i)
        sampling["max_tokens"] = 4 if i == 0 else 24 + 5 * i
        reqs.append((f"r{i}", prompt_of(length, salt=i), sampling))
    return reqs


def test_batched_requests_equal_alone(models, tmp_path):
    model_dir, hf = models["a"]
    reqs = mixed_requests()
    alone_ops = []
    for name, prompt, sampling in reqs:
        alone_ops += [submit(name, prompt, **sampling), {"op": "wait", "names": [name]}]
    alone = run_probe(tmp_path, model_dir, alone_ops)["results"]

    # Five at once; when the shortest is done, the other three join the four still running,
    # each submitted from a thread of its own.
    ops = [submit(name, prompt, sequence_id=name, **s) for name, prompt, s in reqs[:5]]
    ops.append({"op": "wait", "names": ["r0"]})
    ops.append({"op": "submit_parallel",
                "requests": [submit(name, prompt, sequence_id=name, **s)
                             for name, prompt, s in reqs[5:]]})
    ops += [{"op": "wait_all"}, {"op": "stats", "name": "end"}]
    batched = run_probe(tmp_path, model_dir, ops, {"max_batch": 8})

    for name, prompt, sampling in reqs:
        a, b = alone[name], batched["results"][name]
        assert b["token_ids"] == a["token_ids"], name
        assert close(b["logprobs"], a["logprobs"], 1e-5), name
        assert len(a["token_ids"]) == sampling["max_tokens"]
        if sampling["temperature"] == 0:
            tokens, logprobs = hf_greedy(hf, prompt, sampling["max_tokens"])
            assert a["token_ids"] == tokens, name
            assert close(a["logprobs"], logprobs, 1e-4), name
    assert batched["errors"] == {}
    stats = batched["stats"]["end"]
    assert stats["largest_batch"] > 1
    assert stats["largest_batch"] <= 8
    assert stats["decoded_tokens"] == sum(s["max_tokens"] for _, _, s in reqs)


def test_prompts_prefill_together(models, tmp_path):
    """Prompts taken at one step boundary share prefill steps where their lengths are close
    (padding at most a quarter of the real tokens, within prefill_batch_tokens), and give what
    each gives alone."""
    model_dir, hf = models["a"]
    reqs = [(f"p{i}", prompt_of(length, salt=50 + i),
             dict(temperature=0, max_tokens=6) if i % 2 else dict(SAMPLED, seed=7 + i, max_tokens=6))
            for i, length in enumerate((30, 120, 32, 29, 31))]
    alone_ops = []
    for name, prompt, sampling in reqs:
        alone_ops += [submit(name, prompt, **sampling), {"op": "wait", "names": [name]}]
    alone = run_probe(tmp_path, model_dir, alone_ops)["results"]

    def together(budget):
        ops = [{"op": "submit_all", "requests": [submit(n, p, **s) for n, p, s in reqs]},
               {"op": "wait_all"}, {"op": "stats", "name": "end"}]
        out = run_probe(tmp_path, model_dir, ops, {"max_batch": 8, "prefill_batch_tokens": budget})
        assert out["errors"] == {}
        for name, prompt, sampling in reqs:
            assert out["results"][name]["token_ids"] == alone[name]["token_ids"], (budget, name)
            assert close(out["results"][name]["logprobs"], alone[name]["logprobs"], 1e-5), (budget, name)
        assert out["stats"]["end"]["prefilled_tokens"] == sum(len(p) for _, p, _ in reqs)
        return out["stats"]["end"]["prefill_steps"]

    # 29, 30, 31 and 32 tokens in one step (128 padded for 122 real), 120 alone (it would pad
    # the others to 600 for 242).
    assert together(16384) == 2
    # 64 tokens a step: 29 and 30 (60), then 31 and 32 (64), then 120 alone, over the budget.
    assert together(64) == 3
    assert together(1) == 5
    name, prompt, sampling = reqs[1]
    assert alone[name]["token_ids"] == hf_greedy(hf, prompt, sampling["max_tokens"])[0]


def test_max_batch_bounds_the_batch(models, tmp_path):
    model_dir, _ = models["a"]
    reqs = mixed_requests()
    ops = [submit(name, prompt, **s) for name, prompt, s in reqs]
    ops += [{"op": "wait_all"}, {"op": "stats", "name": "end"}]
    out = run_probe(tmp_path, model_dir, ops, {"max_batch": 3})
    assert 1 < out["stats"]["end"]["largest_batch"] <= 3
    assert all("token_ids" in r for r in out["results"].values())


def test_second_turn_prefills_only_new_tokens(models, tmp_path):
    model_dir, hf = models["a"]
    p1 = prompt_of(20)
    first = run_probe(tmp_path, model_dir, [submit("t1", p1, temperature=0, max_tokens=15)])
    c1 = first["results"]["t1"]["token_ids"]
    new = prompt_of(6, salt=7)
    p2 = p1 + c1 + new
    diverging = p1[:12] + prompt_of(9, salt=8)
    ops = [
        submit("t1", p1, sequence_id="s", temperature=0, max_tokens=15),
        {"op": "wait", "names": ["t1"]},
        {"op": "stats", "name": "after1"},
        submit("t2", p2, sequence_id="s", temperature=0, max_tokens=20),
        {"op": "wait", "names": ["t2"]},
        {"op": "stats", "name": "after2"},
        # a prompt that leaves the cached conversation after 12 tokens
        submit("t3", diverging, sequence_id="s", temperature=0, max_tokens=10),
        {"op": "wait", "names": ["t3"]},
        {"op": "stats", "name": "after3"},
        {"op": "release", "sequence_id": "s"},
        submit("t4", diverging, sequence_id="s", temperature=0, max_tokens=10),
        {"op": "wait", "names": ["t4"]},
        {"op": "new_engine"},
        submit("fresh2", p2, temperature=0, max_tokens=20),
        submit("fresh3", diverging, temperature=0, max_tokens=10),
    ]
    out = run_probe(tmp_path, model_dir, ops)
    res, stats = out["results"], out["stats"]
    assert res["t1"]["token_ids"] == c1
    t2 = res["t2"]
    assert t2["cached_tokens"] == len(p1) + len(c1)
    assert t2["prompt_tokens"] == len(p2)
    assert stats["after2"]["prefilled_tokens"] - stats["after1"]["prefilled_tokens"] == len(new)
    assert stats["after2"]["cached_tokens"] == len(p1) + len(c1)
    assert t2["token_ids"] == res["fresh2"]["token_ids"]
    assert close(t2["logprobs"], res["fresh2"]["logprobs"], 1e-4)
    tokens, logprobs = hf_greedy(hf, p2, 20)
    assert t2["token_ids"] == tokens
    assert close(t2["logprobs"], logprobs, 1e-4)

    t3 = res["t3"]
    assert t3["cached_tokens"] == 12
    assert stats["after3"]["prefilled_tokens"] - stats["after2"]["prefilled_tokens"] == 9
    assert t3["token_ids"] == res["fresh3"]["token_ids"]
    assert close(t3["logprobs"], res["fresh3"]["logprobs"], 1e-4)
    assert res["t4"]["cached_tokens"] == 0  # released
    assert res["t4"]["token_ids"] == res["fresh3"]["token_ids"]


def test_idle_caches_hand_their_pool_slots_to_running_ones(models, tmp_path):
    """With one decode pool slot and two conversations taking turns, each turn's cache gets the
    slot from the idle one (which keeps its tokens in memory of its own), and every turn reads
    its conversation from the cache and samples what it samples without a pool."""
    model_dir, _ = models["a"]
    a1, b1 = prompt_of(12, salt=1), prompt_of(10, salt=2)

    def turns(decode_pool):
        first = run_probe(tmp_path, model_dir, [submit("a1", a1, sequence_id="a", temperature=0, max_tokens=6),
                                                {"op": "wait", "names": ["a1"]},
                                                submit("b1", b1, sequence_id="b", temperature=0, max_tokens=6),
                                                {"op": "wait", "names": ["b1"]}], decode_pool=decode_pool)
        ra, rb = first["results"]["a1"], first["results"]["b1"]
        a2, b2 = a1 + ra["token_ids"] + prompt_of(3, salt=3), b1 + rb["token_ids"] + prompt_of(3, salt=4)
        return run_probe(tmp_path, model_dir, [
            submit("a1", a1, sequence_id="a", temperature=0, max_tokens=6), {"op": "wait", "names": ["a1"]},
            submit("b1", b1, sequence_id="b", temperature=0, max_tokens=6), {"op": "wait", "names": ["b1"]},
            {"op": "stats", "name": "after_b1"},
            submit("a2", a2, sequence_id="a", temperature=0, max_tokens=6), {"op": "wait", "names": ["a2"]},
            submit("b2", b2, sequence_id="b", temperature=0, max_tokens=6), {"op": "wait", "names": ["b2"]},
            {"op": "stats", "name": "after_b2"}], decode_pool=decode_pool)

    pooled, plain = turns([1, 64]), turns(None)
    assert pooled["stats"]["after_b1"]["slot_handovers"] == 1  # a's slot to b
    assert pooled["stats"]["after_b2"]["slot_handovers"] == 3  # to a, then back to b
    assert plain["stats"]["after_b2"]["slot_handovers"] == 0
    for name in ("a1", "b1", "a2", "b2"):
        assert pooled["results"][name]["token_ids"] == plain["results"][name]["token_ids"], name
        assert pooled["results"][name]["logprobs"] == plain["results"][name]["logprobs"], name
        assert pooled["results"][name]["cached_tokens"] == plain["results"][name]["cached_tokens"], name
    assert pooled["results"]["a2"]["cached_tokens"] == 12 + 6


def test_eviction_under_budget(models, tmp_path):
    model_dir, _ = models["a"]
    seqs = {s: prompt_of(30, salt=i) for i, s in enumerate("ABC")}
    turn1 = dict(temperature=0, max_tokens=10)
    turn2 = dict(SAMPLED, seed=5, max_tokens=10)

    # Without caches: every request on its own, and what a whole conversation's cache takes.
    plain_ops, conversations = [], {}
    first = run_probe(tmp_path, model_dir,
                      [submit(s, p, **turn1) for s, p in seqs.items()])["results"]
    for s, p in seqs.items():
        conversations[s] = p + first[s]["token_ids"] + prompt_of(5, salt=50)
        plain_ops.append(submit(s + "2", conversations[s], **turn2))
    plain_ops += [{"op": "wait_all"}, submit("size", seqs["A"], sequence_id="A", **turn1),
                  {"op": "wait", "names": ["size"]}, {"op": "stats", "name": "one"}]
    plain = run_probe(tmp_path, model_dir, plain_ops)
    one = plain["stats"]["one"]["cache_bytes"]  # a first turn's cache
    assert one > 0
    budget = int(one * 2.5)  # two first turns' caches, not three

    ops = []
    for s, p in seqs.items():
        ops += [submit(s + "1", p, sequence_id=s, **turn1), {"op": "wait", "names": [s + "1"]}]
    for s in seqs:
        ops += [submit(s + "2", conversations[s], sequence_id=s, **turn2),
                {"op": "wait", "names": [s + "2"]}, {"op": "stats", "name": s}]
    out = run_probe(tmp_path, model_dir, ops, {"cache_budget_bytes": budget})
    res = out["results"]
    for s in seqs:
        assert res[s + "1"]["token_ids"] == first[s]["token_ids"]
        assert res[s + "2"]["token_ids"] == plain["results"][s + "2"]["token_ids"]
        assert close(res[s + "2"]["logprobs"], plain["results"][s + "2"]["logprobs"], 1e-4)
        assert out["stats"][s]["cache_bytes"] <= budget
    assert out["stats"]["C"]["evictions"] > 0
    # A was least recently used when C came: its second turn found no cache.
    assert res["A2"]["cached_tokens"] == 0

    # One request that alone needs more than the budget fails rather than thrashes.
    tiny = run_probe(tmp_path, model_dir, [submit("big", seqs["A"], max_tokens=100)],
                     {"cache_budget_bytes": 1024})
    assert "cache_budget_bytes" in tiny["results"]["big"]["error"]


def test_sampling_controls(models, tmp_path):
    model_dir, hf = models["a"]
    prompt = prompt_of(9)
    greedy, _ = hf_greedy(hf, prompt, 40)
    stop = greedy[6]
    first_stop = min(i for i, t in enumerate(greedy) if t in (VOCAB - 1, stop))
    long_prompt = prompt_of(CONTEXT - 12)
    ops = [
        submit("greedy", prompt, temperature=0, max_tokens=40),
        submit("topk1", prompt, temperature=1.0, top_k=1, seed=3, max_tokens=40),
        submit("topp0", prompt, temperature=1.0, top_p=1e-6, seed=3, max_tokens=40),
        submit("seed7a", prompt, temperature=1.5, seed=7, max_tokens=40),
        submit("seed7b", prompt, sequence_id="x", temperature=1.5, seed=7, max_tokens=40),
        submit("seed8", prompt, temperature=1.5, seed=8, max_tokens=40),
        submit("stop", prompt, temperature=0, max_tokens=40, stop_token_ids=[VOCAB - 1, stop]),
        submit("length", prompt, temperature=0, max_tokens=10),
        submit("context", long_prompt, temperature=0, max_tokens=100),
        submit("full", prompt_of(CONTEXT), temperature=0, max_tokens=5),
        {"op": "wait_all"},
        submit("seed7c", prompt, temperature=1.5, seed=7, max_tokens=40),
    ]
    res = run_probe(tmp_path, model_dir, ops)["results"]
    assert res["greedy"]["token_ids"] == greedy
    assert res["topk1"]["token_ids"] == greedy
    assert res["topp0"]["token_ids"] == greedy
    assert res["seed7a"]["token_ids"] == res["seed7b"]["token_ids"] == res["seed7c"]["token_ids"]
    assert res["seed7a"]["token_ids"] != res["seed8"]["token_ids"]
    assert res["seed7a"]["token_ids"] != greedy
    assert res["stop"]["token_ids"] == greedy[: first_stop + 1]
    assert res["stop"]["finish_reason"] == "stop"
    assert res["length"]["token_ids"] == greedy[:10]
    assert res["length"]["finish_reason"] == "length"
    assert len(res["context"]["token_ids"]) == 12  # the context ends it, not max_tokens
    assert res["context"]["finish_reason"] == "length"
    assert res["full"]["token_ids"] == [] and res["full"]["finish_reason"] == "length"
    # logprobs are the temperature-1 policy's, whatever the sampling temperature
    ctx = torch.tensor([prompt + res["seed7a"]["token_ids"]])
    with torch.no_grad():
        logits = hf(ctx).logits[0, len(prompt) - 1:-1].float()
    expected = torch.log_softmax(logits, -1).gather(
        1, torch.tensor(res["seed7a"]["token_ids"])[:, None])[:, 0].tolist()
    assert close(res["seed7a"]["logprobs"], expected, 1e-4)


@pytest.mark.parametrize("sampling", [
    dict(temperature=1.5, top_k=6),
    dict(temperature=0.5, top_p=0.6),
    dict(temperature=1.0, top_k=20, top_p=0.8),
])
def test_sampling_distribution_matches_transformers_warpers(models, tmp_path, sampling):
    model_dir, hf = models["a"]
    prompt = prompt_of(5, salt=3)
    n = 2000
    ops = [submit(f"s{i}", prompt, seed=i, max_tokens=1, **sampling) for i in range(n)]
    res = run_probe(tmp_path, model_dir, ops, {"max_batch": 32})["results"]
    counts = torch.zeros(VOCAB)
    for i in range(n):
        counts[res[f"s{i}"]["token_ids"][0]] += 1

    with torch.no_grad():
        scores = hf(torch.tensor([prompt])).logits[:, -1].float()
    ids = torch.tensor([prompt])
    scores = TemperatureLogitsWarper(sampling["temperature"])(ids, scores)
    if "top_k" in sampling:
        scores = TopKLogitsWarper(sampling["top_k"])(ids, scores)
    if "top_p" in sampling:
        scores = TopPLogitsWarper(sampling["top_p"])(ids, scores)
    probs = torch.softmax(scores[0], -1)
    kept = probs > 0
    assert counts[~kept].sum() == 0, "sampled a token that transformers' warpers remove"
    total_variation = 0.5 * (counts / n - probs).abs().sum().item()
    # what sampling noise alone gives: E|count/n - p| ~ sqrt(2 p (1 - p) / (pi n)) per token
    noise = 0.5 * torch.sqrt(2 * probs * (1 - probs) / (torch.pi * n)).sum().item()
    print(f"\n{sampling}: {int(kept.sum())} tokens kept, total variation {total_variation:.4f}, "
          f"noise {noise:.4f}")
    assert total_variation < 2 * noise + 0.01, (total_variation, noise)


def test_update_weights_mid_run(models, tmp_path):
    dir_a, hf_a = models["a"]
    dir_b, hf_b = models["b"]
    prompt = prompt_of(8)
    later = prompt_of(14, salt=2)
    ops = [
        submit("before", prompt, sequence_id="s", temperature=0, max_tokens=20),
        {"op": "wait", "names": ["before"]},
        submit("across", prompt, temperature=0, max_tokens=450),
        {"op": "update_weights", "model": str(dir_b), "version": 7},
        submit("after", later, temperature=0, max_tokens=30),
        submit("after_cached", prompt, sequence_id="s", temperature=0, max_tokens=20),
        submit("after_sampled", later, seed=4, max_tokens=30, **SAMPLED),
        {"op": "wait_all"},
        # weights of another shape are refused, and the engine goes on with version 7
        {"op": "update_weights", "model": str(models["narrow"][0]), "version": 8},
        submit("after_bad", later, temperature=0, max_tokens=30),
    ]
    out = run_probe(tmp_path, dir_a, ops)
    res = out["results"]
    fresh = run_probe(tmp_path, dir_b, [
        submit("after", later, temperature=0, max_tokens=30),
        submit("after_sampled", later, seed=4, max_tokens=30, **SAMPLED),
        submit("prompt", prompt, temperature=0, max_tokens=20),
    ])["results"]
    assert res["before"]["weight_version"] == 0
    for name in ("after", "after_sampled"):
        assert res[name]["weight_version"] == 7
        assert res[name]["token_ids"] == fresh[name]["token_ids"], name
        assert close(res[name]["logprobs"], fresh[name]["logprobs"], 1e-4), name
    assert res["after_cached"]["cached_tokens"] == 0  # the old weights' cache was dropped
    assert res["after_cached"]["token_ids"] == fresh["prompt"]["token_ids"]
    assert "8" in out["errors"]
    assert res["after_bad"]["weight_version"] == 7
    assert res["after_bad"]["token_ids"] == fresh["after"]["token_ids"]

    # The request running across the update: A's greedy tokens up to the switch, then B's
    # greedy continuation of everything so far, each token's logprob under the weights that
    # chose it. The switch is where the logprobs leave A's (the tokens may agree for a while).
    across = res["across"]
    tokens, logprobs = across["token_ids"], across["logprobs"]
    a_tokens, a_logprobs = hf_greedy(hf_a, prompt, 450)
    j = 0
    while j < len(tokens) and tokens[j] == a_tokens[j] and abs(logprobs[j] - a_logprobs[j]) <= 1e-4:
        j += 1
    assert j < 450, "the update landed after the request ended; nothing was tested"
    assert across["weight_version"] == 7
    b_tokens, b_logprobs = hf_greedy(hf_b, prompt + tokens[:j], 450 - j)
    assert tokens[j:] == b_tokens
    assert close(logprobs[j:], b_logprobs, 1e-4)


def test_bad_requests_fail(models, tmp_path):
    model_dir, _ = models["a"]
    ops = [
        submit("empty", [], temperature=0),
        submit("long", prompt_of(CONTEXT + 1), temperature=0),
        submit("vocab", [1, 2, VOCAB], temperature=0),
        submit("ok", [1, 2, 3], temperature=0, max_tokens=3),
    ]
    res = run_probe(tmp_path, model_dir, ops)["results"]
    assert "empty" in res["empty"]["error"]
    assert "max_position_embeddings" in res["long"]["error"]
    assert "vocabulary" in res["vocab"]["error"]
    assert len(res["ok"]["token_ids"]) == 3


def test_destroy_fails_pending_requests(models, tmp_path):
    model_dir, _ = models["a"]
    ops = [
        submit("running", prompt_of(4), temperature=0, max_tokens=500),
        submit("queued", prompt_of(5), temperature=0, max_tokens=5),
        {"op": "destroy"},
    ]
    res = run_probe(tmp_path, model_dir, ops, {"max_batch": 1})["results"]
    assert "stopped" in res["queued"]["error"]
    assert "stopped" in res["running"]["error"]


def test_print_decode_throughput(models, tmp_path):
    model_dir, _ = models["a"]
    for batch in (1, 8):
        ops = [{"op": "timer_start"}]
        ops += [submit(f"r{i}", prompt_of(16, salt=i), temperature=0, max_tokens=128)
                for i in range(batch)]
        ops += [{"op": "wait_all"}, {"op": "timer_stop", "name": "t"},
                {"op": "stats", "name": "s"}]
        out = run_probe(tmp_path, model_dir, ops, {"max_batch": batch})
        seconds, stats = out["timings"]["t"], out["stats"]["s"]
        print(f"\nengine decode on CPU, tiny model, batch {batch}: "
              f"{stats['decoded_tokens'] / seconds:.0f} tokens/s "
              f"({stats['decode_steps'] / seconds:.0f} steps/s, largest batch "
              f"{stats['largest_batch']})")
