"""The learner's checkpoints and Hugging Face export (actors/learner/checkpoint.*).

tests/actors/learner/checkpoint_probe trains, checkpoints, resumes, writes checkpoints in a loop and
exports; this file runs it in separate processes and checks: a resumed run is bit for bit the
uninterrupted one, a SIGKILL at any moment of a write never leaves a checkpoint that
latest_checkpoint() returns and that fails to load, damaged files are one-line learner_errors,
`keep` is honoured, and transformers loads an export with the source model's logits.
"""

import json
import os
import random
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

BUILD = Path(os.environ.get("CUDA_AGENT_BUILD_DIR", "build/tests/actors/learner"))
PROBE = BUILD / "checkpoint_probe"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
torch.set_num_threads(1)

pytestmark = pytest.mark.skipif(not PROBE.exists(), reason=f"{PROBE} not built (set CUDA_AGENT_BUILD_DIR)")


def probe(*args, check=True):
    result = subprocess.run([str(PROBE), *map(str, args)], capture_output=True, text=True, env=ENV, timeout=300)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def train(root, out, steps, checkpoint_at, stop_after=-1, resume=False):
    probe("train", root, steps, checkpoint_at, stop_after, out / "losses.json", out / "final.safetensors",
          *(["resume"] if resume else []))
    return json.loads((out / "losses.json").read_text()), load_file(out / "final.safetensors")


def step_dirs(root):
    return sorted(p.name for p in root.iterdir() if p.name.startswith("step-"))


def test_resumed_run_is_bitwise_the_uninterrupted_run(tmp_path):
    steps, k = 12, 5
    for name in ("straight", "first", "second"):
        (tmp_path / name).mkdir()
    straight, straight_weights = train(tmp_path / "straight-ckpt", tmp_path / "straight", steps, k)
    first, _ = train(tmp_path / "resumed-ckpt", tmp_path / "first", steps, k, stop_after=k)
    resumed, resumed_weights = train(tmp_path / "resumed-ckpt", tmp_path / "second", steps, k, resume=True)

    assert len(first["losses"]) == k
    assert resumed["first"] == k + 1  # the second process did start from the checkpoint
    assert len(straight["losses"]) == steps
    assert resumed["losses"] == straight["losses"]
    assert straight_weights.keys() == resumed_weights.keys()
    for name, value in straight_weights.items():
        assert torch.equal(value, resumed_weights[name]), name
    # The losses move, so equal lists are not an artefact of a model that does not train.
    assert len(set(straight["losses"][k:])) == steps - k


def test_checkpoint_layout(tmp_path):
    (tmp_path / "out").mkdir()
    train(tmp_path / "ckpt", tmp_path / "out", 3, 2)
    (step,) = step_dirs(tmp_path / "ckpt")
    assert step == "step-000000000002"
    files = sorted(p.name for p in (tmp_path / "ckpt" / step).iterdir())
    assert files == ["COMPLETE", "manifest.json", "optimizer.adamw.pt", "rng.safetensors", "state.json",
                     "tensors.model.safetensors"]
    manifest = json.loads((tmp_path / "ckpt" / step / "manifest.json").read_text())
    assert manifest["step"] == 2
    for name, entry in manifest["files"].items():
        assert (tmp_path / "ckpt" / step / name).stat().st_size == entry["bytes"]
    state = json.loads((tmp_path / "ckpt" / step / "state.json").read_text())
    assert state["state"]["step"] == 2 and len(state["state"]["losses"]) == 2
    assert "targets" in state["engines"]
    # Writing the same step again replaces it (swapped in whole) and leaves nothing else behind.
    train(tmp_path / "ckpt", tmp_path / "out", 3, 2)
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [step]
    probe("read", tmp_path / "ckpt" / step, 32)


def test_sigkill_while_writing_never_leaves_a_bad_latest_checkpoint(tmp_path):
    root = tmp_path / "ckpt"
    rng = random.Random(20261202)
    kills, torn = 0, 0
    last_latest = None
    # Each write of 48 MiB takes most of the loop's time, so most kills land inside one; kill
    # until several have left a torn temporary behind.
    while kills < 40 and (kills < 6 or torn < 3):
        writer = subprocess.Popen([str(PROBE), "write_loop", str(root), "48", "0"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=ENV)
        if kills % 2 == 0:  # half the kills after a first checkpoint of this process is written
            assert writer.stdout.readline().startswith("written"), writer.stderr.read()
        try:
            writer.wait(timeout=rng.uniform(0.0, 1.5))
        except subprocess.TimeoutExpired:
            pass
        assert writer.poll() is None, writer.stderr.read()  # it never stops on its own
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        writer.stdout.close()
        writer.stderr.close()
        kills += 1

        partials = [p for p in root.iterdir() if p.name.startswith(".partial-")] if root.exists() else []
        torn += bool(partials)
        report = json.loads(probe("verify", root, 48).stdout)
        if report["latest"] is not None:
            assert report["ok"] and report["matches_name"], report
            assert last_latest is None or report["latest"] >= last_latest
            last_latest = report["latest"]
        else:
            assert last_latest is None, "a complete checkpoint disappeared"
    assert torn >= 1, f"none of {kills} kills landed inside a write"
    assert last_latest is not None
    # The next write removes the torn temporaries and keeps two.
    probe("write_loop", root, 48, 1)
    report = json.loads(probe("verify", root, 48).stdout)
    assert report == {"complete": 2, "latest": last_latest + 1, "matches_name": True, "ok": True,
                      "partials": 0}
    print(f"{kills} kills, {torn} inside a write; latest step {last_latest}")


def test_keep_two_leaves_the_newest_two(tmp_path):
    root = tmp_path / "ckpt"
    probe("write_loop", root, 1, 5)
    assert step_dirs(root) == ["step-000000000004", "step-000000000005"]
    assert sorted(p.name for p in root.iterdir()) == ["step-000000000004", "step-000000000005"]
    assert json.loads(probe("verify", root, 1).stdout)["latest"] == 5


@pytest.fixture
def checkpoint(tmp_path):
    (tmp_path / "out").mkdir()
    train(tmp_path / "ckpt", tmp_path / "out", 3, 3)
    (step,) = step_dirs(tmp_path / "ckpt")
    return tmp_path / "ckpt" / step


def flip_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGE = {
    "flipped_tensors": ("tensors.model.safetensors", flip_byte, "CRC-32C"),
    "flipped_optimizer": ("optimizer.adamw.pt", flip_byte, "CRC-32C"),
    "flipped_rng": ("rng.safetensors", flip_byte, "CRC-32C"),
    "truncated_tensors": ("tensors.model.safetensors", truncate, "bytes where the manifest says"),
    "truncated_state": ("state.json", truncate, "bytes where the manifest says"),
    "flipped_manifest": ("manifest.json", flip_byte, "does not match the COMPLETE marker"),
    "missing_marker": ("COMPLETE", Path.unlink, "no COMPLETE marker"),
    "missing_optimizer": ("optimizer.adamw.pt", Path.unlink, "missing from the checkpoint"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_checkpoint_is_a_one_line_learner_error(case, checkpoint):
    name, damage, message = DAMAGE[case]
    probe("read", checkpoint, 32)  # intact, it loads
    damage(checkpoint / name)
    result = probe("read", checkpoint, 32, check=False)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("learner_error: "), result.stderr
    assert message in lines[0] and str(checkpoint) in lines[0], lines[0]
    # latest_checkpoint() skips what it can see is torn (sizes, marker); a flipped byte it
    # cannot see without reading everything, and read_checkpoint() refuses it.
    if damage is not flip_byte or name == "manifest.json":
        report = json.loads(probe("verify", checkpoint.parent, 1, check=False).stdout or "{}")
        assert report.get("latest") is None and report.get("complete") == 0, report


def test_checkpoint_of_another_model_names_the_tensor(checkpoint):
    result = probe("read", checkpoint, 16, check=False)
    assert result.returncode == 2
    assert "tensor '0.weight' is F32 [32,8] in the checkpoint but F32 [16,8] here" in result.stderr


# The Hugging Face export.

def make_source(path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = Path(__file__).read_text()
    tok.train_from_iterator([text], trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    hf_tok.save_pretrained(path)
    config = Qwen2Config(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, tie_word_embeddings=True,
                         eos_token_id=tok.token_to_id("<|im_end|>"))
    model = Qwen2ForCausalLM(config).eval()
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.3 if "embed" in name else 0.1
            p.copy_((1.0 if "norm" in name else 0.0) + scale * torch.randn(p.shape, generator=gen))
    model.save_pretrained(path)
    return model, hf_tok


def test_export_loads_in_transformers_with_the_source_logits(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = tmp_path / "source"
    model, tok = make_source(source)
    out = tmp_path / "export"
    probe("export", source, source, out)
    assert (out / "tokenizer.json").exists() and (out / "tokenizer_config.json").exists()
    assert (out / "generation_config.json").exists() and (out / "config.json").exists()
    assert [p.name for p in tmp_path.iterdir() if ".partial-" in p.name] == []

    exported = AutoModelForCausalLM.from_pretrained(out).eval()
    exported_tok = AutoTokenizer.from_pretrained(out)
    text = "def test_export(tmp_path): return the source logits"
    ids = tok(text, return_tensors="pt").input_ids
    assert torch.equal(exported_tok(text, return_tensors="pt").input_ids, ids)
    assert exported_tok.eos_token == "<|im_end|>"
    with torch.no_grad():
        assert torch.equal(exported(ids).logits, model(ids).logits)

    # An earlier export is replaced; anything else is refused.
    (out / "stale.txt").write_text("from the earlier export")
    probe("export", source, source, out)
    assert not (out / "stale.txt").exists() and (out / "model.safetensors").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("not an export")
    result = probe("export", source, source, other, check=False)
    assert result.returncode == 2
    assert "is not empty and not an earlier export" in result.stderr and len(result.stderr.splitlines()) == 1
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    result = probe("export", source, tmp_path / "no-tokenizer", tmp_path / "third", check=False)
    assert result.returncode == 2 and "no tokenizer.json or tokenizer_config.json" in result.stderr
    assert not (tmp_path / "third").exists()
