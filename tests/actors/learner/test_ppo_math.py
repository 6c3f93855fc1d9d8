"""The learner's math (actors/learner/ppo.*, packing.*) against references in PyTorch.

Each test writes its inputs to a safetensors file, runs tests/actors/learner/ppo_probe on it and compares
what the probe wrote back (outputs, gradients, loss_stats) with the formulas of
/work/shared/RL.md computed here: GAE as an explicit backward recursion over each row's policy
positions, the losses term by term, gradients by autograd.
"""

import math
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

BUILD = Path(os.environ.get("CUDA_AGENT_BUILD_DIR", "build/tests/actors/learner"))
PROBE = BUILD / "ppo_probe"
PROBE_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
torch.set_num_threads(1)

pytestmark = pytest.mark.skipif(not PROBE.exists(), reason=f"{PROBE} not built (set CUDA_AGENT_BUILD_DIR)")


def probe(tmp_path, command, tensors, **settings):
    source, result = tmp_path / f"{command}.in.safetensors", tmp_path / f"{command}.out.safetensors"
    save_file({k: v.clone().contiguous() for k, v in tensors.items()}, str(source),
              metadata={k: str(v) for k, v in settings.items()})
    run = subprocess.run([str(PROBE), command, str(source), str(result)], env=PROBE_ENV,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return load_file(str(result))


def probe_error(tmp_path, command, tensors, **settings):
    source = tmp_path / f"{command}.in.safetensors"
    save_file(tensors, str(source), metadata={k: str(v) for k, v in settings.items()})
    run = subprocess.run([str(PROBE), command, str(source), str(tmp_path / "unused")], env=PROBE_ENV,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, (run.returncode, run.stderr)
    return run.stderr


def close(actual, expected, tol=1e-5):
    torch.testing.assert_close(actual.double(), expected.double(), atol=tol, rtol=tol)


# ---------------------------------------------------------------- references

def reference_gae(values, mask, rewards, gamma, lam):
    advantages = torch.zeros(values.shape, dtype=torch.float64)
    for b in range(values.shape[0]):
        steps = mask[b].nonzero().flatten().tolist()  # t_1 < ... < t_n
        next_value, next_advantage = 0.0, 0.0
        for k in reversed(range(len(steps))):
            t = steps[k]
            reward = float(rewards[b]) if k == len(steps) - 1 else 0.0
            delta = reward + gamma * next_value - float(values[b, t])
            next_advantage = delta + gamma * lam * next_advantage
            next_value = float(values[b, t])
            advantages[b, t] = next_advantage
    returns = torch.where(mask, advantages + values.double(), torch.zeros((), dtype=torch.float64))
    return advantages, returns


def reference_policy(logp, old, rollout, adv, mask, clip_low=0.2, clip_high=0.28, is_cap=2.0,
                     kl_coef=0.0, entropy_coef=0.0, ref=None, entropy=None):
    ratio = torch.exp(logp - old)
    per_token = -torch.min(ratio * adv, ratio.clamp(1 - clip_low, 1 + clip_high) * adv)
    weight = torch.exp(old - rollout).clamp(max=is_cap)
    loss = (weight * per_token)[mask].sum()
    if ref is not None:
        q = ref - logp
        loss = loss + kl_coef * (torch.exp(q) - q - 1)[mask].sum()
    if entropy is not None:
        loss = loss - entropy_coef * entropy[mask].sum()
    return loss


def policy_inputs(logp, old, rollout, adv, mask, **extra):
    return dict(logp=logp.float(), logp_old=old.float(), logp_rollout=rollout.float(),
                advantages=adv.float(), mask=mask, **{k: v.float() for k, v in extra.items()})


# ---------------------------------------------------------------- logprobs and entropy

def random_head(seed, batch, length, width, vocab):
    """Hidden states [B,L,H], an output head [V,H], targets [B,L] and the objective's weights u and
    h of the log-probabilities and the entropy, drawn in that order from one seeded generator."""
    g = torch.Generator().manual_seed(seed)
    hidden, weight = torch.randn(batch, length, width, generator=g), torch.randn(vocab, width, generator=g)
    targets = torch.randint(0, vocab, (batch, length), generator=g)
    return hidden, weight, targets, torch.randn(batch, length, generator=g), torch.randn(batch, length, generator=g)


def logprobs_and_entropy(log_p, targets):
    """The reference: log p of each position's target and the entropy of its distribution."""
    return log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1), -(log_p.exp() * log_p).sum(-1)


@pytest.mark.parametrize("with_entropy", [False, True])
def test_logprobs_and_entropy_match_log_softmax_and_their_gradients(tmp_path, with_entropy):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 5, 11, generator=g) * 3
    targets = torch.randint(0, 11, (2, 5), generator=g)
    u, h = torch.randn(2, 5, generator=g), torch.randn(2, 5, generator=g)
    out = probe(tmp_path, "logprobs", dict(logits=logits, targets=targets, u=u, h=h),
                with_entropy=int(with_entropy))

    x = logits.double().requires_grad_(True)
    log_p = torch.log_softmax(x, -1)
    logprobs, entropy = logprobs_and_entropy(log_p, targets)
    objective = (logprobs * u).sum() + ((entropy * h).sum() if with_entropy else 0)
    objective.backward()
    close(out["logprobs"], logprobs.detach())
    close(out["grad_logits"], x.grad)
    if with_entropy:
        close(out["entropy"], entropy.detach())
        assert (out["entropy"] > 0).all() and (out["entropy"] <= math.log(11) + 1e-5).all()
    else:
        assert "entropy" not in out


@pytest.mark.parametrize("with_entropy", [False, True])
@pytest.mark.parametrize("chunk", [0, 1, 4, 7, 100])
def test_chunked_logprobs_from_hidden_states_match_autograd_of_the_whole_head(tmp_path, with_entropy, chunk):
    # 2 x 7 = 14 positions: chunks of 1, 4 (a short last chunk), 7, all of them (0) and more than all.
    hidden, weight, targets, u, h = random_head(2, 2, 7, 6, 13)
    out = probe(tmp_path, "logprobs_hidden", dict(hidden=hidden, weight=weight, targets=targets, u=u, h=h),
                with_entropy=int(with_entropy), chunk=chunk)

    x, w = hidden.double().requires_grad_(True), weight.double().requires_grad_(True)
    log_p = torch.log_softmax(x @ w.T, -1)
    logprobs, entropy = logprobs_and_entropy(log_p, targets)
    ((logprobs * u).sum() + ((entropy * h).sum() if with_entropy else 0)).backward()
    close(out["logprobs"], logprobs.detach(), tol=1e-4)
    close(out["grad_hidden"], x.grad, tol=1e-4)
    close(out["grad_weight"], w.grad, tol=1e-4)
    if with_entropy:
        close(out["entropy"], entropy.detach(), tol=1e-4)
    else:
        assert "entropy" not in out


@pytest.mark.parametrize("use_logprobs, use_entropy", [(1, 0), (0, 1)])
def test_chunked_logprobs_with_one_output_left_out_of_the_loss(tmp_path, use_logprobs, use_entropy):
    # PPO computes the entropy for its metrics and leaves it out of the loss (entropy_coef 0):
    # the gradients are those of the outputs the objective takes, and the one it leaves out
    # reaches the backward as no gradient (nothing worked through for it).
    hidden, weight, targets, u, h = random_head(4, 2, 5, 6, 11)
    out = probe(tmp_path, "logprobs_hidden", dict(hidden=hidden, weight=weight, targets=targets, u=u, h=h),
                with_entropy=1, chunk=4, use_logprobs=use_logprobs, use_entropy=use_entropy)
    x, w = hidden.double().requires_grad_(True), weight.double().requires_grad_(True)
    log_p = torch.log_softmax(x @ w.T, -1)
    logprobs, entropy = logprobs_and_entropy(log_p, targets)
    ((logprobs * u).sum() if use_logprobs else (entropy * h).sum()).backward()
    close(out["grad_hidden"], x.grad, tol=1e-4)
    close(out["grad_weight"], w.grad, tol=1e-4)
    close(out["entropy"], entropy.detach(), tol=1e-4)


def test_chunked_logprobs_in_bf16_follow_the_cast_to_float32(tmp_path):
    # bf16 weights: the logits are the bf16 matmul cast to float32, and the gradients come back
    # in bf16, as autograd of transformer::logits gives them.
    hidden, weight, targets, u, h = random_head(3, 1, 9, 8, 17)
    hidden, weight = hidden.bfloat16(), weight.bfloat16()
    out = probe(tmp_path, "logprobs_hidden", dict(hidden=hidden, weight=weight, targets=targets, u=u, h=h),
                with_entropy=1, chunk=4, bf16=1)
    x, w = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    log_p = torch.log_softmax(torch.nn.functional.linear(x, w).float(), -1)
    logprobs, entropy = logprobs_and_entropy(log_p, targets)
    ((logprobs * u).sum() + (entropy * h).sum()).backward()
    close(out["logprobs"], logprobs.detach(), tol=1e-3)
    close(out["entropy"], entropy.detach(), tol=1e-3)
    close(out["grad_hidden"], x.grad.float(), tol=3e-2)
    close(out["grad_weight"], w.grad.float(), tol=3e-2)


def test_chunked_logprobs_of_bf16_hidden_states_on_a_float32_head(tmp_path):
    # Mixed precision: bf16 hidden states, float32 master weight. The head runs in bf16 on the
    # weight's cast; the weight's gradient comes back in float32, the hidden states' in bf16.
    hidden, weight, targets, u, h = random_head(4, 2, 5, 8, 13)
    hidden = hidden.bfloat16()
    out = probe(tmp_path, "logprobs_hidden", dict(hidden=hidden, weight=weight, targets=targets, u=u, h=h),
                with_entropy=1, chunk=3, bf16=2)
    x, w = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    log_p = torch.log_softmax(torch.nn.functional.linear(x, w.bfloat16()).float(), -1)
    logprobs, entropy = logprobs_and_entropy(log_p, targets)
    ((logprobs * u).sum() + (entropy * h).sum()).backward()
    assert out["grad_dtypes"].tolist() == [2, 4]
    close(out["logprobs"], logprobs.detach(), tol=1e-3)
    close(out["entropy"], entropy.detach(), tol=1e-3)
    close(out["grad_hidden"], x.grad.float(), tol=3e-2)
    close(out["grad_weight"], w.grad, tol=3e-2)
    # and not float32's head: the bf16 cast of the weight shows
    full = torch.log_softmax(torch.nn.functional.linear(hidden.float(), weight), -1)
    assert (out["logprobs"] - full.gather(-1, targets.unsqueeze(-1)).squeeze(-1)).abs().max() > 1e-4


def test_chunked_logprobs_refuse_a_head_of_the_wrong_width(tmp_path):
    err = probe_error(tmp_path, "logprobs_hidden",
                      dict(hidden=torch.zeros(1, 3, 4), weight=torch.zeros(5, 6), targets=torch.zeros(1, 3).long(),
                           u=torch.zeros(1, 3), h=torch.zeros(1, 3)))
    assert "output head's weight must be [V,4], got [5,6]" in err


# ---------------------------------------------------------------- GAE

def gapped_rows():
    # Three rows of different lengths (right padding is mask 0 too), with observation gaps.
    mask = torch.tensor([
        [0, 1, 1, 0, 0, 1, 1, 1, 0, 0],
        [0, 0, 1, 0, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 1, 1, 0],
    ], dtype=torch.bool)
    values = torch.randn(3, 10, generator=torch.Generator().manual_seed(2))
    rewards = torch.tensor([3.0, -1.0, 1.0])
    return values, mask, rewards


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.8), (1.0, 0.0)])
def test_gae_skips_observation_tokens_over_rows_of_different_lengths(tmp_path, gamma, lam):
    values, mask, rewards = gapped_rows()
    out = probe(tmp_path, "gae", dict(values=values, mask=mask, rewards=rewards), gamma=gamma, **{"lambda": lam})
    advantages, returns = reference_gae(values, mask, rewards, gamma, lam)
    close(out["advantages"], advantages)
    close(out["returns"], returns)
    assert (out["advantages"][~mask] == 0).all() and (out["returns"][~mask] == 0).all()


def test_gae_by_hand_a_gap_is_not_a_step(tmp_path):
    # Policy tokens at 0 and 2, an observation at 1 whose value must not enter: gamma = 1,
    # lambda = 0.5, R = 1. A_2 = 1 - 0.2 = 0.8; A_0 = (0.2 - 0.5) + 0.5 * 0.8 = 0.1.
    values = torch.tensor([[0.5, 7.0, 0.2]])
    mask = torch.tensor([[True, False, True]])
    out = probe(tmp_path, "gae", dict(values=values, mask=mask, rewards=torch.tensor([1.0])),
                gamma=1.0, **{"lambda": 0.5})
    close(out["advantages"], torch.tensor([[0.1, 0.0, 0.8]]))
    close(out["returns"], torch.tensor([[0.6, 0.0, 1.0]]))


def test_gae_with_gamma_and_lambda_one_is_reward_minus_value(tmp_path):
    values, mask, rewards = gapped_rows()
    out = probe(tmp_path, "gae", dict(values=values, mask=mask, rewards=rewards), gamma=1.0, **{"lambda": 1.0})
    expected = torch.where(mask, rewards[:, None] - values, torch.zeros(()))
    close(out["advantages"], expected)
    close(out["returns"], torch.where(mask, rewards[:, None].expand_as(values), torch.zeros(())))


def test_gae_row_without_policy_tokens_is_zero(tmp_path):
    values = torch.randn(2, 4)
    mask = torch.tensor([[False] * 4, [False, True, False, True]])
    out = probe(tmp_path, "gae", dict(values=values, mask=mask, rewards=torch.tensor([2.0, 1.0])),
                gamma=1.0, **{"lambda": 0.95})
    assert (out["advantages"][0] == 0).all() and (out["returns"][0] == 0).all()
    close(out["advantages"], reference_gae(values, mask, torch.tensor([2.0, 1.0]), 1.0, 0.95)[0])


def test_gae_on_a_128k_row(tmp_path):
    g = torch.Generator().manual_seed(3)
    length = 131072
    values = torch.randn(2, length, generator=g)
    mask = torch.rand(2, length, generator=g) < 0.3
    rewards = torch.tensor([2.0, -1.0])
    out = probe(tmp_path, "gae", dict(values=values, mask=mask, rewards=rewards), gamma=1.0, **{"lambda": 1.0})
    close(out["advantages"], torch.where(mask, rewards[:, None] - values, torch.zeros(())))


# ---------------------------------------------------------------- policy loss

def test_policy_loss_clips_on_both_sides_for_both_signs_of_the_advantage(tmp_path):
    # Per token: (rho, A) and whether the clipped term is the active (larger) loss.
    cases = [(1.5, 1.0, True),     # A > 0, rho above 1 + 0.28: clipped, no gradient
             (0.5, 1.0, False),    # A > 0, rho below 1 - 0.2: the unclipped term is the smaller
             (0.5, -2.0, True),    # A < 0, rho below 1 - 0.2: clipped, no gradient
             (1.5, -2.0, False),   # A < 0, rho above: unclipped, gradient stays
             (1.1, 0.7, False)]    # inside the clip range
    rho = torch.tensor([[c[0] for c in cases] + [1.0]])
    adv = torch.tensor([[c[1] for c in cases] + [5.0]])
    active = torch.tensor([c[2] for c in cases])
    old = torch.full_like(rho, -1.0)
    logp = old + rho.log()
    logp[0, -1] = 100.0  # garbage at a masked-out position: exp overflows, must not leak
    mask = torch.tensor([[True] * len(cases) + [False]])
    out = probe(tmp_path, "policy", policy_inputs(logp, old, old.clone(), adv, mask))

    x = logp.double().requires_grad_(True)
    loss = reference_policy(x, old.double(), old.double(), adv.double(), mask)
    loss.backward()
    close(out["loss"], loss.detach())
    close(out["grad_logp"], x.grad)
    assert torch.isfinite(out["loss"]) and torch.isfinite(out["grad_logp"]).all()
    assert (out["grad_logp"][0, :len(cases)][active] == 0).all()
    assert (out["grad_logp"][0, :len(cases)][~active] != 0).all()
    assert out["stats.tokens"].item() == len(cases)
    assert out["stats.clipped"].item() == int(active.sum())
    close(out["stats.clip_fraction"], torch.tensor(active.float().mean().item()))
    close(out["stats.ratio_max"], torch.tensor(1.5))
    close(out["stats.ratio_sum"], rho[0, :len(cases)].sum())
    close(out["stats.approx_kl_sum"], 0.5 * (rho[0, :len(cases)].log() ** 2).sum())


def test_importance_weight_is_capped_and_carries_no_gradient(tmp_path):
    # rho = 1 everywhere, so d loss / d logp_t = -w_t * A_t exactly when w is a constant.
    w_raw = torch.tensor([[0.5, 1.5, 3.0, 10.0, 1.0]])
    adv = torch.tensor([[1.0, -1.0, 2.0, 0.5, 4.0]])
    mask = torch.tensor([[True, True, True, True, False]])
    old = torch.tensor([[-0.5, -1.0, -2.0, -0.3, -1.0]])
    rollout = old - w_raw.log()
    out = probe(tmp_path, "policy", policy_inputs(old.clone(), old, rollout, adv, mask), is_cap=2.0)
    w = w_raw.clamp(max=2.0)
    close(out["grad_logp"], torch.where(mask, -w * adv, torch.zeros(())))
    close(out["loss"], (-w * adv)[mask].sum())
    assert out["stats.is_capped"].item() == 2
    close(out["stats.is_capped_fraction"], torch.tensor(0.5))
    close(out["stats.is_weight_max"], torch.tensor(2.0))
    close(out["stats.is_weight_sum"], w[mask].sum())


def test_policy_loss_with_k3_kl_entropy_and_micro_batches_matches_reference(tmp_path):
    g = torch.Generator().manual_seed(4)
    shape = (4, 9)
    old = -torch.rand(shape, generator=g) * 3
    logp = old + torch.randn(shape, generator=g) * 0.3
    rollout = old + torch.randn(shape, generator=g) * 0.5
    ref = old + torch.randn(shape, generator=g) * 0.4
    adv = torch.randn(shape, generator=g)
    entropy = torch.rand(shape, generator=g) * 2
    mask = torch.rand(shape, generator=g) < 0.7
    settings = dict(clip_low=0.15, clip_high=0.3, is_cap=1.5, kl_coef=0.3, entropy_coef=0.05, chunks=2)
    out = probe(tmp_path, "policy", policy_inputs(logp, old, rollout, adv, mask, logp_ref=ref, entropy=entropy),
                **settings)

    x = logp.double().requires_grad_(True)
    e = entropy.double().requires_grad_(True)
    loss = reference_policy(x, old.double(), rollout.double(), adv.double(), mask, 0.15, 0.3, 1.5, 0.3, 0.05,
                            ref.double(), e)
    loss.backward()
    close(out["loss"], loss.detach(), 1e-4)
    close(out["grad_logp"], x.grad, 1e-4)
    close(out["grad_entropy"], torch.where(mask, torch.full(shape, -0.05), torch.zeros(())))

    q = (ref - logp).double()
    close(out["stats.kl_ref_sum"], (torch.exp(q) - q - 1)[mask].sum(), 1e-4)
    close(out["stats.entropy_sum"], entropy.double()[mask].sum(), 1e-4)
    ratio = torch.exp(logp - old).double()
    clipped = (-adv * ratio.clamp(0.85, 1.3) > -adv * ratio) & mask
    assert out["stats.clipped"].item() == int(clipped.sum())
    assert out["stats.tokens"].item() == int(mask.sum())
    close(out["stats.ratio_max"], ratio[mask].max())
    no_terms = reference_policy(logp.double(), old.double(), rollout.double(), adv.double(), mask, 0.15, 0.3, 1.5)
    close(out["stats.policy_loss_sum"], no_terms, 1e-4)


def test_k3_kl_is_zero_at_the_reference_and_positive_away_from_it(tmp_path):
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    zeros = torch.zeros(1, 3)
    same = probe(tmp_path, "policy", policy_inputs(logp, logp, logp, zeros, mask, logp_ref=logp), kl_coef=1.0)
    assert same["stats.kl_ref_sum"].item() == pytest.approx(0.0, abs=1e-7)
    close(same["grad_logp"], zeros)
    ref = logp + torch.tensor([[0.5, -0.5, 1.0]])
    away = probe(tmp_path, "policy", policy_inputs(logp, logp, logp, zeros, mask, logp_ref=ref), kl_coef=2.0)
    q = (ref - logp).double()
    close(away["loss"], 2.0 * (torch.exp(q) - q - 1).sum())
    close(away["grad_logp"], 2.0 * (1 - torch.exp(q)))  # d k3 / d logp = 1 - exp(q)


# ---------------------------------------------------------------- value and SFT losses

def test_value_loss_clipping(tmp_path):
    # eps = 0.2. Token 0: V moved 0.5 towards G = 1, the clipped V (0.2) is farther: clipped
    # loss, no gradient. Token 1: moved away from G = 0, unclipped larger. Token 2: inside eps.
    values_old = torch.tensor([[0.0, 0.0, 0.0, 9.0]])
    values = torch.tensor([[0.5, 0.5, 0.1, -9.0]])
    returns = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    mask = torch.tensor([[True, True, True, False]])
    out = probe(tmp_path, "value", dict(values=values, values_old=values_old, returns=returns, mask=mask),
                value_clip=0.2)
    close(out["loss"], torch.tensor(0.5 * (0.64 + 0.25 + 0.81)))
    close(out["grad_values"], torch.tensor([[0.0, 0.5, -0.9, 0.0]]))
    assert out["stats.value_clipped"].item() == 1 and out["stats.value_tokens"].item() == 3
    close(out["stats.value_clip_fraction"], torch.tensor(1 / 3))


def test_value_loss_matches_reference(tmp_path):
    g = torch.Generator().manual_seed(5)
    shape = (3, 8)
    values_old = torch.randn(shape, generator=g)
    values = values_old + torch.randn(shape, generator=g) * 0.4
    returns = torch.randn(shape, generator=g)
    mask = torch.rand(shape, generator=g) < 0.6
    out = probe(tmp_path, "value", dict(values=values, values_old=values_old, returns=returns, mask=mask),
                value_clip=0.25)
    v = values.double().requires_grad_(True)
    vo, G = values_old.double(), returns.double()
    unclipped = (v - G) ** 2
    clipped = (vo + (v - vo).clamp(-0.25, 0.25) - G) ** 2
    loss = (0.5 * torch.max(unclipped, clipped))[mask].sum()
    loss.backward()
    close(out["loss"], loss.detach())
    close(out["grad_values"], v.grad)
    assert out["stats.value_clipped"].item() == int(((clipped > unclipped) & mask).sum())


def test_sft_loss_is_minus_the_masked_logprob_sum(tmp_path):
    logp = -torch.rand(2, 6, generator=torch.Generator().manual_seed(6)) * 4
    mask = torch.tensor([[1, 0, 1, 1, 0, 0], [0, 1, 1, 0, 0, 1]], dtype=torch.bool)
    out = probe(tmp_path, "sft", dict(logp=logp, mask=mask))
    close(out["loss"], -logp[mask].sum())
    close(out["grad_logp"], -mask.float())


# ---------------------------------------------------------------- packing

def groups_of(out):
    return [out[f"group.{k}"].tolist() for k in range(len(out))]


def test_pack_first_fit_decreasing_by_hand(tmp_path):
    lengths = torch.tensor([3, 5, 2, 5, 9])
    out = probe(tmp_path, "pack", dict(lengths=lengths), budget=10)
    assert groups_of(out) == [[4], [1, 3], [0, 2]]
    ties = probe(tmp_path, "pack", dict(lengths=torch.tensor([4, 4, 4])), budget=8)
    assert groups_of(ties) == [[0, 1], [2]]


def test_pack_covers_every_sample_once_within_the_budget(tmp_path):
    g = torch.Generator().manual_seed(7)
    lengths = torch.randint(1, 400, (60,), generator=g)
    lengths[[5, 17]] = torch.tensor([1500, 1024])  # longer than the budget
    budget = 1024
    out = probe(tmp_path, "pack", dict(lengths=lengths), budget=budget)
    groups = groups_of(out)
    assert sorted(i for group in groups for i in group) == list(range(60))
    for group in groups:
        padded = len(group) * max(int(lengths[i]) for i in group)
        assert padded <= budget or len(group) == 1
    assert [5] in groups  # oversized: alone
    assert [17] in groups  # exactly the budget: nothing else fits beside it
    assert groups_of(probe(tmp_path, "pack", dict(lengths=lengths), budget=budget)) == groups


def test_pack_rejects_a_budget_below_one(tmp_path):
    message = probe_error(tmp_path, "pack", dict(lengths=torch.tensor([3, 4])), budget=0)
    assert "budget" in message


def micro_batch_inputs(samples, indices):
    tensors = {"rewards": torch.tensor([s[3] for s in samples]), "indices": torch.tensor(indices)}
    for k, (tokens, mask, logprobs, _) in enumerate(samples):
        tensors[f"tokens.{k}"] = torch.tensor(tokens)
        tensors[f"loss_mask.{k}"] = torch.tensor(mask, dtype=torch.uint8)
        tensors[f"rollout_logprobs.{k}"] = torch.tensor(logprobs, dtype=torch.float32)
    return tensors


def test_micro_batch_shifts_targets_mask_and_logprobs_by_one(tmp_path):
    samples = [
        ([11, 12, 13, 14, 15], [0, 0, 1, 1, 0], [0, 0, -0.1, -0.2, 0], 3),
        ([21, 22, 23], [0, 1, 1], [0, -0.3, -0.4], -1),
        ([31, 32, 33, 34, 35, 36, 37], [0, 1, 0, 0, 1, 1, 1], [0, -1, 0, 0, -2, -3, -4], 2),
    ]
    out = probe(tmp_path, "micro_batch", micro_batch_inputs(samples, [2, 1]))
    assert out["samples"].tolist() == [2, 1]
    assert out["input_ids"].tolist() == [[31, 32, 33, 34, 35, 36, 37], [21, 22, 23, 0, 0, 0, 0]]
    assert out["attention_mask"].tolist() == [[1] * 7, [1, 1, 1, 0, 0, 0, 0]]
    assert out["targets"].tolist() == [[32, 33, 34, 35, 36, 37, 0], [22, 23, 0, 0, 0, 0, 0]]
    assert out["target_mask"].tolist() == [[True, False, False, True, True, True, False],
                                           [True, True, False, False, False, False, False]]
    close(out["rollout_logprobs"], torch.tensor([[-1, 0, 0, -2, -3, -4, 0], [-0.3, -0.4, 0, 0, 0, 0, 0]]))
    assert out["rewards"].tolist() == [2.0, -1.0]
    assert out["real_tokens"].item() == 10 and out["policy_tokens"].item() == 6


def test_micro_batch_names_the_episode_whose_lengths_disagree(tmp_path):
    samples = [([1, 2, 3], [0, 1, 1], [0, -1, -1], 1), ([4, 5, 6], [0, 1], [0, -1, -1], 1)]
    message = probe_error(tmp_path, "micro_batch", micro_batch_inputs(samples, [0, 1]))
    assert "episode-1" in message and "loss_mask" in message
