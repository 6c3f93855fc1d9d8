"""A `--policy torch` rollout on a GPU with more episodes than decode pool slots (skipped without
a GPU): four episodes of three turns each share one slot of the decode pool, so that their caches
hand the slot to each other between turns, and the decode steps replay CUDA graphs.

The checkpoint is test_torch_policy.py's bigram-chain Qwen2, in bfloat16 on cuda: greedy decoding
writes one Bash call every turn whatever the context, so the episodes' tokens are known. Checked:
- the rollout ends with exit status 0, every episode ran its three turns, each turn sampled the
  call, and later turns prefilled only their new tokens;
- each trajectory is, token for token, its turns' prompts and completions, with its loss mask;
- the same rollout without the pool and the graphs samples the same tokens with log-probabilities
  within bfloat16 rounding of the pooled one's;
- the backend's closing line reports decode pool slot handovers (the pooled run) and none without
  the pool;
- the pooled run's hermetic replay is identical.
The chain writes its call from the current token alone, so a cache that came back wrong would not
change the sampled tokens; test_engine.py's handover test compares a pooled conversation's tokens
and log-probabilities with an unpooled one's exactly (CPU, float32), and test_gpu_parity.py the
pooled graph against transformers in bfloat16."""
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import test_torch_policy as chain  # noqa: E402  its tokenizer and chain model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

EPISODES = 4
TURNS = 3
LOGPROB_TOLERANCE = 0.05  # nats: two bfloat16 decode paths round differently
STATS = re.compile(r"policy: torch backend done: (\d+) prefill steps \((\d+) tokens prefilled, (\d+) from the cache\), "
                   r"(\d+) decode steps .* (\d+) evictions, (\d+) decode pool slot handovers")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-qwen2-chain")
    tok = chain.train_tokenizer(path)
    last = chain.hf_tokenizer(path)("<|im_start|>assistant\n", add_special_tokens=False).input_ids[-1]
    call = [tok.token_to_id(t) for t in ("<tool_call>", chain.CALL_JSON, "</tool_call>", "<|im_end|>")]
    chain.make_model(path, tok, chain={last: call[0], call[0]: call[1], call[1]: call[2], call[2]: call[3]})
    return path, call


@pytest.fixture(scope="module")
def host_settings():
    """As tools/gpu/pipeline_gpu.sh: where this host forbids the episode sandbox to drop root to
    another user, keep root."""
    probe = subprocess.run([chain.binary(), "bench", "sandbox", "--runs", "1"], capture_output=True, text=True,
                           timeout=120)
    return [] if probe.returncode == 0 else ["sandbox.run_as_uid=0"]


@pytest.fixture(scope="module")
def scratch():
    # Sandboxed commands may run as another user, who must reach the workdirs.
    path = pathlib.Path(tempfile.mkdtemp(prefix="cuda-agent-gpu-torch-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def rollout(scratch, model_dir, name, pooled, host_settings):
    log = scratch / name
    settings = [f"rollout.runs_dir={scratch / ('runs-' + name)}", f"policy.tools_dir={chain.SOURCE / 'skills' / 'tools'}",
                f"policy.model_dir={model_dir}", "policy.device=cuda", "policy.dtype=bf16", "policy.temperature=0",
                "policy.max_tokens=64", f"episode.max_turns={TURNS}", "policy.batched_decode=true",
                f"policy.cuda_graphs={'true' if pooled else 'false'}",
                f"policy.decode_pool_slots={1 if pooled else 0}", f"policy.decode_pool_tokens={32768 if pooled else 0}", *host_settings]
    args = [chain.binary()]
    for s in settings:
        args += ["--set", s]
    args += ["rollout", "--corpus", "smoke", "--policy", "torch", "--device", "cpu",
             "--tasks", "smoke_01*", "smoke_02*", "smoke_03*", "smoke_04*", "--concurrency", str(EPISODES),
             "--log", str(log), "--run-id", name]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    stats = STATS.search(done.stderr)
    assert stats, "no closing line of the torch backend in:\n" + done.stderr[-3000:]
    return log, [int(x) for x in stats.groups()]


def by_episode(log, kind):
    """Payloads by episode number (the episode id less the run id: the same task in both runs)."""
    out = {}
    for record in chain.export(log, kind):
        out.setdefault(record["payload"]["episode_id"].rsplit("-", 1)[1], []).append(record["payload"])
    return out


def test_a_gpu_rollout_with_more_episodes_than_pool_slots(scratch, model_dir, host_settings):
    path, call = model_dir
    pooled_log, pooled_stats = rollout(scratch, path, "pooled", True, host_settings)
    plain_log, plain_stats = rollout(scratch, path, "plain", False, host_settings)

    pooled, plain = by_episode(pooled_log, "policy_response"), by_episode(plain_log, "policy_response")
    assert len(pooled) == EPISODES and sorted(pooled) == sorted(plain)
    for episode, responses in pooled.items():
        assert [r["turn"] for r in responses] == list(range(1, TURNS + 1)), episode
        for r in responses:
            assert r["token_ids"] == call, (episode, r["turn"])
        for r, p in zip(responses, plain[episode]):
            assert r["prompt_token_ids"] == p["prompt_token_ids"] and r["token_ids"] == p["token_ids"]
            assert max(abs(a - b) for a, b in zip(r["logprobs"], p["logprobs"])) <= LOGPROB_TOLERANCE, (episode, r["turn"])

    for trajectory in (t["payload"] for t in chain.export(pooled_log, "trajectory")):
        responses = pooled[trajectory["episode_id"].rsplit("-", 1)[1]]
        tokens = [t for turn in trajectory["turns"] for t in turn["token_ids"]]
        assert tokens == [t for r in responses for t in r["prompt_token_ids"] + r["token_ids"]]
        mask = [m for turn in trajectory["turns"] for m in bytes.fromhex(turn["loss_mask"])]
        assert mask == [m for r in responses for m in [0] * len(r["prompt_token_ids"]) + [1] * len(r["token_ids"])]

    prefill_steps, prefilled, cached, decode_steps, evictions, handovers = pooled_stats
    print(f"pooled: {prefill_steps} prefill steps, {prefilled} prefilled, {cached} from the cache, "
          f"{decode_steps} decode steps, {evictions} evictions, {handovers} handovers; plain: {plain_stats}")
    assert decode_steps > 0 and evictions == 0
    assert cached > 0  # turns 2 and 3 of each episode prefilled only their new tokens
    assert handovers > 0, "four episodes on one slot never handed it over"
    assert plain_stats[5] == 0

    replay = subprocess.run([chain.binary(), "replay", str(pooled_log)], capture_output=True, text=True, timeout=300)
    assert replay.returncode == 0, replay.stdout + replay.stderr
