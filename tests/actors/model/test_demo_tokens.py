"""The demo policy in a checkpoint's tokens (policy.model_dir with --policy demo): a CPU rollout of
shipped demonstrations through the real tools, build and harness, whose trajectories are token for
token what the Qwen2.5 chat template and the tokenizer make of each final conversation, trained on
(loss mask 1) exactly where the assistant turns were written, with the reward the demos earn.

The checkpoint is only a tokenizer (the demo backend loads no weights): the tiny byte-level BPE of
test_torch_policy.py, and a config.json that names the family."""
import json
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

from test_torch_policy import SOURCE, TEMPLATE, binary, export, hf_messages, hf_tokenizer
from test_torch_policy import train_tokenizer

TOOLS_DIR = SOURCE / "skills" / "tools"
END_OF_TURN = "<|im_end|>"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-qwen2-tokenizer")
    train_tokenizer(path)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    return path


def render(tokenizer, messages, offered, add_generation_prompt):
    """The conversation's prompt text by the real template, else by the C++ chat format (whose
    parity with the template test_chat_format.py checks)."""
    if TEMPLATE:
        offered = offered or sorted(p.stem for p in TOOLS_DIR.glob("*.json"))
        tools = [{"type": "function", "function": json.loads((TOOLS_DIR / f"{n}.json").read_text())}
                 for n in offered]
        return tokenizer.apply_chat_template(hf_messages(messages), tools=tools, tokenize=False,
                                             add_generation_prompt=add_generation_prompt,
                                             chat_template=TEMPLATE)
    probe = pathlib.Path(os.environ["CUDA_AGENT_BUILD_DIR"]) / "chat_probe"
    ask = {"format": "qwen2", "tools_dir": str(TOOLS_DIR),
           "renders": [{"messages": messages, "offered": offered,
                        "add_generation_prompt": add_generation_prompt}]}
    done = subprocess.run([str(probe)], input=json.dumps(ask), capture_output=True, text=True,
                          timeout=60, check=True)
    return json.loads(done.stdout)["renders"][0]["text"]


def written_by_the_assistant(tokenizer, messages, offered, text):
    """Character ranges of `text` (the whole conversation) that the assistant turns wrote: from the
    end of the generation prompt before each turn to its end-of-turn token, inclusive."""
    ranges = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = render(tokenizer, messages[:i], offered, True)
        assert text.startswith(prompt), f"the prompt before turn {i} is not a prefix"
        ranges.append((len(prompt), text.index(END_OF_TURN, len(prompt)) + len(END_OF_TURN)))
    return ranges


def rollout(checkpoint, scratch, tasks, *extra):
    return subprocess.run(
        [binary(), "--set", f"rollout.runs_dir={scratch / 'runs'}",
         "--set", f"build.cache_dir={scratch / 'build-cache'}",
         "--set", f"harness.baseline_cache_dir={scratch / 'baselines'}",
         "--set", f"policy.demo_dir={SOURCE / 'corpus' / 'demos'}",
         "--set", f"policy.tools_dir={TOOLS_DIR}", "--set", f"policy.model_dir={checkpoint}",
         "--set", "harness.timed_runs=5", "--set", "harness.warmup_runs=2", *extra,
         "rollout", "--corpus", "smoke", "--device", "cpu", "--policy", "demo", "--tasks", tasks,
         "--log", str(scratch / "log"), "--run-id", "demo"],
        capture_output=True, text=True, timeout=600)


@pytest.fixture
def scratch(request):
    # Sandboxed commands may run as another user, who must reach the workdir: not under pytest's
    # private tmp_path.
    path = pathlib.Path(tempfile.mkdtemp(prefix="cuda-agent-demo-tokens-"))
    path.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(path, ignore_errors=True))
    return path


def test_demo_trajectories_are_the_chat_templates_tokens(checkpoint, scratch):
    done = rollout(checkpoint, scratch, "smoke_01*,smoke_02*")
    assert done.returncode == 0, done.stderr[-3000:]
    log = scratch / "log"
    tok = hf_tokenizer(checkpoint)

    requests, responses = {}, {}
    for r in export(log, "policy_request"):
        requests.setdefault(r["payload"]["episode_id"], []).append(r["payload"])
    for r in export(log, "policy_response"):
        responses.setdefault(r["payload"]["episode_id"], []).append(r["payload"])
    trajectories = [r["payload"] for r in export(log, "trajectory") if r["receiver"] == "learner"]
    assert sorted(t["task_id"] for t in trajectories) == ["smoke_01_relu", "smoke_02_gelu"]

    for trajectory in trajectories:
        episode = trajectory["episode_id"]
        answers = responses[episode]
        last = requests[episode][-1]
        assert answers[-1]["finish_reason"] == "stop" and not answers[-1]["tool_calls"]
        messages = last["messages"] + [{"role": "assistant", "content": answers[-1]["content"],
                                        "tool_call_id": "", "tool_calls": []}]
        full = render(tok, messages, last["tools"], False)
        # The episode ends with the last turn's end-of-turn token; the template's newline after
        # it is never written.
        text = full[:full.rindex(END_OF_TURN) + len(END_OF_TURN)]
        assert full[len(text):] == "\n"
        encoded = tok(text, add_special_tokens=False, return_offsets_mapping=True)

        tokens = [t for turn in trajectory["turns"] for t in turn["token_ids"]]
        assert tokens == encoded.input_ids
        assert tok.decode(tokens) == text

        ranges = written_by_the_assistant(tok, messages, last["tools"], text)
        assert len(ranges) == len(answers) == len(trajectory["turns"])
        expected_mask = [int(any(b <= start and end <= e for b, e in ranges))
                         for start, end in encoded.offset_mapping]
        mask = [m for turn in trajectory["turns"] for m in bytes.fromhex(turn["loss_mask"])]
        assert mask == expected_mask
        assert sum(mask) == sum(len(a["token_ids"]) for a in answers) > 0

        for answer in answers:  # the demonstrator is not the model
            assert answer["logprobs"] == [0.0] * len(answer["token_ids"])
            assert answer["weight_version"] == -1
            assert answer["completion_tokens"] == len(answer["token_ids"])
        assert [t["weight_version"] for t in trajectory["turns"]] == [-1] * len(answers)
        assert answers[-1]["prompt_tokens"] + answers[-1]["completion_tokens"] == len(tokens)
        assert trajectory["reward"] >= 1, trajectory["reason"]


def test_a_checkpoint_without_a_tokenizer_is_refused_in_one_line(scratch):
    empty = scratch / "no-tokenizer"
    empty.mkdir()
    done = rollout(empty, scratch, "smoke_01*")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(empty / "tokenizer.json") in lines[0] and "policy.model_dir" in lines[0]
