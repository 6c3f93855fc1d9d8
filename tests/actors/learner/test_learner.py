"""The learner's steps (actors/learner/learner.*) against the same steps written here in PyTorch on
transformers' Qwen2: value pretraining, then a PPO step, then an RFT step, on a tiny random
checkpoint, with the episodes packed into padded micro-batches on the C++ side and taken one at a
time, unpadded, here. Gradients after the last step and every weight must agree."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

BUILD = Path(os.environ.get("CUDA_AGENT_BUILD_DIR", "build/tests/actors/learner"))
PROBE = BUILD / "learner_probe"
torch.set_num_threads(1)

pytestmark = pytest.mark.skipif(not PROBE.exists(), reason=f"{PROBE} not built (set CUDA_AGENT_BUILD_DIR)")

OPTIONS = {"actor_lr": 1e-3, "critic_lr": 2e-3, "max_grad_norm": 1.0, "token_budget": 100, "lambda": 0.95,
           "truncated": "penalty", "is_cap": 2.0}
CLIP_LOW, CLIP_HIGH, VALUE_CLIP = 0.2, 0.28, 0.2


def make_model(path):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config).float()
    model.save_pretrained(path)
    return path


def make_samples():
    g = torch.Generator().manual_seed(1)
    samples = []
    # (length, policy segments, reward, truncated): prompts, observations and policy turns
    for i, (n, segments, reward, truncated) in enumerate([
            (40, [(10, 18), (25, 33)], 3, False),
            (25, [(8, 25)], 1, True),
            (60, [(12, 20), (30, 41), (50, 60)], -1, False)]):
        mask = [0] * n
        for a, b in segments:
            mask[a:b] = [1] * (b - a)
        rollout = [float(-1 - 7 * torch.rand(1, generator=g)) if m else 0.0 for m in mask]
        samples.append({"episode_id": f"e{i}", "tokens": torch.randint(0, 64, (n,), generator=g).tolist(),
                        "loss_mask": mask, "rollout_logprobs": rollout, "reward": reward, "truncated": truncated})
    return samples


class Reference:
    """The learner's three steps in PyTorch, one episode at a time."""

    def __init__(self, model_dir):
        from transformers import Qwen2ForCausalLM
        self.actor = Qwen2ForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
        self.critic = Qwen2ForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
        hidden = self.critic.config.hidden_size
        self.w = torch.zeros(1, hidden, requires_grad=True)
        self.b = torch.zeros(1, requires_grad=True)
        self.actor_params = list(self.actor.model.parameters())
        self.critic_params = list(self.critic.model.parameters()) + [self.w, self.b]
        self.actor_opt = torch.optim.AdamW(self.actor_params, lr=OPTIONS["actor_lr"], weight_decay=0.0)
        self.critic_opt = torch.optim.AdamW(self.critic_params, lr=OPTIONS["critic_lr"], weight_decay=0.0)

    @staticmethod
    def episode(s):
        ids = torch.tensor([s["tokens"]])
        mask = torch.tensor(s["loss_mask"][1:], dtype=torch.bool)  # position i predicts x_{i+1}
        rollout = torch.tensor(s["rollout_logprobs"][1:])
        reward = -1.0 if s["truncated"] else float(s["reward"])  # truncated: "penalty"
        return ids, mask, rollout, reward

    def logp(self, ids):
        logits = self.actor(input_ids=ids).logits.float()[0, :-1]
        return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]

    def values(self, ids):
        hidden = self.critic.model(input_ids=ids).last_hidden_state.float()[0, :-1]
        return (hidden @ self.w.T + self.b)[:, 0]

    @staticmethod
    def gae(values, mask, reward, lam):
        idx = mask.nonzero()[:, 0].tolist()
        adv = torch.zeros_like(values)
        next_value, running = 0.0, 0.0
        for k in reversed(range(len(idx))):
            t = idx[k]
            r = reward if k == len(idx) - 1 else 0.0
            delta = r + next_value - values[t].item()
            running = delta + lam * running
            adv[t] = running
            next_value = values[t].item()
        return adv, adv + values

    @staticmethod
    def value_loss(v, v_old, returns, mask):
        clipped = v_old + (v - v_old).clamp(-VALUE_CLIP, VALUE_CLIP)
        return (0.5 * torch.maximum((v - returns) ** 2, (clipped - returns) ** 2))[mask].sum()

    @staticmethod
    def step(opt, params):
        torch.nn.utils.clip_grad_norm_([p for p in params if p.grad is not None], OPTIONS["max_grad_norm"])
        opt.step()

    def value_step(self, samples):
        eps = [self.episode(s) for s in samples]
        total = sum(int(m.sum()) for _, m, _, _ in eps)
        self.critic_opt.zero_grad()
        for ids, mask, _, reward in eps:
            v = self.values(ids)
            returns = torch.full_like(v, reward)
            (self.value_loss(v, v.detach(), returns, mask) / total).backward()
        self.step(self.critic_opt, self.critic_params)

    def ppo_step(self, samples):
        eps = [self.episode(s) for s in samples]
        total = sum(int(m.sum()) for _, m, _, _ in eps)
        with torch.no_grad():
            old = [(self.logp(ids), self.values(ids)) for ids, _, _, _ in eps]
        self.actor_opt.zero_grad()
        self.critic_opt.zero_grad()
        for (ids, mask, rollout, reward), (logp_old, v_old) in zip(eps, old):
            adv, returns = self.gae(v_old, mask, reward, OPTIONS["lambda"])
            logp = self.logp(ids)
            ratio = torch.exp(logp - logp_old)
            w = torch.exp(logp_old - rollout).clamp(max=OPTIONS["is_cap"])
            loss = -torch.minimum(ratio * adv, ratio.clamp(1 - CLIP_LOW, 1 + CLIP_HIGH) * adv) * w
            (loss[mask].sum() / total).backward()
            (self.value_loss(self.values(ids), v_old, returns, mask) / total).backward()
        self.step(self.actor_opt, self.actor_params)
        self.step(self.critic_opt, self.critic_params)

    def rft_step(self, samples):
        eps = [self.episode(s) for s in samples]
        total = sum(int(m.sum()) for _, m, _, _ in eps)
        self.actor_opt.zero_grad()
        for ids, mask, _, _ in eps:
            (-self.logp(ids)[mask].sum() / total).backward()
        self.step(self.actor_opt, self.actor_params)


def run_probe(tmp_path, samples, options, *stages):
    (tmp_path / "samples.json").write_text(json.dumps(samples))
    (tmp_path / "options.json").write_text(json.dumps(options))
    out = tmp_path / "out.safetensors"
    result = subprocess.run([str(PROBE), str(tmp_path / "model"), str(tmp_path / "samples.json"),
                             str(tmp_path / "options.json"), str(out), *stages],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return result, out


# With activation checkpointing each layer's weight gradients come from a recomputed copy's
# backward, accumulated over the micro-batches into .grad: the same reference must hold.
@pytest.mark.parametrize("recompute", [False, True], ids=["stored", "recomputed"])
def test_value_ppo_and_rft_steps_match_pytorch(tmp_path, recompute):
    make_model(tmp_path / "model")
    samples = make_samples()
    result, out = run_probe(tmp_path, samples, dict(OPTIONS, activation_checkpointing=recompute), "value", "ppo", "rft")
    assert result.returncode == 0, result.stderr
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["stage"] for r in reports] == ["value_pretrain", "ppo", "rft"]
    assert all(r["micro_batches"] == 2 for r in reports)  # 60 alone, 40 and 25 padded together
    assert reports[1]["is_weight_max"] <= OPTIONS["is_cap"] + 1e-6
    assert reports[0]["reward_mean"] == pytest.approx((3 - 1 - 1) / 3)  # the truncated one is -1

    ref = Reference(tmp_path / "model")
    ref.value_step(samples)
    ref.ppo_step(samples)
    ref.rft_step(samples)
    got = load_file(out)
    names = dict(ref.actor.named_parameters())
    checked = 0
    for name, p in names.items():
        torch.testing.assert_close(got["actor." + name], p.detach(), rtol=0, atol=2e-5, msg=name)
        torch.testing.assert_close(got["actor_grad." + name], p.grad, rtol=1e-4, atol=1e-7, msg=name)
        checked += 1
    for name, p in ref.critic.model.named_parameters():
        torch.testing.assert_close(got["critic.model." + name], p.detach(), rtol=0, atol=2e-5, msg=name)
        torch.testing.assert_close(got["critic_grad.model." + name], p.grad, rtol=1e-4, atol=1e-7, msg=name)
    torch.testing.assert_close(got["critic.score.weight"], ref.w.detach(), rtol=0, atol=2e-5)
    torch.testing.assert_close(got["critic.score.bias"], ref.b.detach(), rtol=0, atol=2e-5)
    assert checked > 10
    # and the steps moved the weights: a probe that did nothing would not pass
    start = load_file(tmp_path / "model" / "model.safetensors")
    moved = (got["actor.model.layers.0.mlp.up_proj.weight"] - start["model.layers.0.mlp.up_proj.weight"]).abs().max()
    assert moved > 1e-4


def test_bfloat16_compute_keeps_float32_weights_and_recomputes_in_bfloat16(tmp_path):
    # learner.compute_dtype = bfloat16: autocast over float32 master weights. The gradients
    # follow float32's within bfloat16 rounding but are not float32's (so bfloat16 ran), and
    # activation checkpointing recomputes each layer under the same autocast as its forward:
    # otherwise its gradients would sit a bfloat16 rounding away from the stored run's.
    make_model(tmp_path / "model")
    samples = make_samples()
    grads = {}
    copies = {"compute_dtype": "bfloat16", "bf16_working_weights": True}
    for name, extra in (("fp32", {}), ("bf16", {"compute_dtype": "bfloat16"}),
                        ("bf16_recomputed", {"compute_dtype": "bfloat16", "activation_checkpointing": True}),
                        ("copies", copies), ("copies_recomputed", dict(copies, activation_checkpointing=True))):
        run_dir = tmp_path / name
        run_dir.mkdir()
        (run_dir / "model").symlink_to(tmp_path / "model")
        result, out = run_probe(run_dir, samples, dict(OPTIONS, **extra), "ppo")
        assert result.returncode == 0, result.stderr
        got = load_file(out)
        assert all(t.dtype == torch.float32 for t in got.values())
        grads[name] = {k: v for k, v in got.items() if "_grad." in k}
    names = sorted(grads["fp32"])
    assert len(names) > 10 and all(sorted(g) == names for g in grads.values())
    flat = {k: torch.cat([g[n].flatten() for n in names]) for k, g in grads.items()}
    rel = lambda a, b: ((a - b).norm() / b.norm()).item()  # noqa: E731
    bf16_vs_fp32 = rel(flat["bf16"], flat["fp32"])
    recomputed_vs_stored = rel(flat["bf16_recomputed"], flat["bf16"])
    print(f"|bf16 - fp32| / |fp32| = {bf16_vs_fp32:.3g}; |recomputed - stored| / |stored| = {recomputed_vs_stored:.3g}")
    assert 1e-4 < bf16_vs_fp32 < 5e-2
    assert recomputed_vs_stored < bf16_vs_fp32 / 20
    # learner.bf16_working_weights: the whole forward in bfloat16 on copies (residual stream and
    # norms too), the gradients returned to the float32 master weights (the probe writes the
    # master's). Further from float32 than autocast, within bfloat16's reach, and not autocast's.
    copies_vs_fp32 = rel(flat["copies"], flat["fp32"])
    copies_vs_autocast = rel(flat["copies"], flat["bf16"])
    print(f"|copies - fp32| / |fp32| = {copies_vs_fp32:.3g}; |copies - autocast| / |autocast| = {copies_vs_autocast:.3g}")
    assert 1e-4 < copies_vs_fp32 < 5e-2
    assert copies_vs_autocast > 1e-4
    assert rel(flat["copies_recomputed"], flat["copies"]) < copies_vs_fp32 / 20


# With bfloat16 working weights the loss is computed on the copies: it falls only if each
# optimiser step's master weights reach them.
@pytest.mark.parametrize("extra", [{}, {"compute_dtype": "bfloat16", "bf16_working_weights": True}],
                         ids=["float32", "bf16_working_weights"])
def test_rft_lowers_the_loss_it_trains_on(tmp_path, extra):
    make_model(tmp_path / "model")
    samples = make_samples()
    result, _ = run_probe(tmp_path, samples, dict(OPTIONS, actor_lr=3e-3, **extra), *["rft"] * 8)
    assert result.returncode == 0, result.stderr
    losses = [json.loads(line)["sft_loss"] for line in result.stdout.splitlines()]
    assert losses[-1] < losses[0] - 0.1, losses


def test_drop_leaves_truncated_episodes_out_and_bad_options_are_one_line_errors(tmp_path):
    make_model(tmp_path / "model")
    samples = make_samples()
    result, _ = run_probe(tmp_path, samples, dict(OPTIONS, truncated="drop"), "value")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["samples"] == 2 and report["dropped"] == 1
    result, _ = run_probe(tmp_path, samples, dict(OPTIONS, truncated="ignore"), "value")
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0
    assert "learner.truncated must be penalty, reward or drop" in result.stderr
    result, _ = run_probe(tmp_path, samples, dict(OPTIONS, bf16_working_weights=True), "value")
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0
    assert "learner.bf16_working_weights needs learner.compute_dtype = bfloat16" in result.stderr
