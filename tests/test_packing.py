"""Packed and padded training agree: upstream's Actor with `--ds.packing_samples` (the CPU mode's eager attention in
place of flash_attention_2) gives the same log-probs, entropy, policy loss and gradient as the padded batch, and as
each sample computed alone.

The batch is what the project trains: Reinforce-Ada-Est's groups of different sizes (2, 4 and 3 samples, each with
its own prompt and response lengths, right-padded as upstream's replay buffer pads them), advantages against each
group's own mean reward (dr_grpo), weighted by ADORA's per-group weight. The expected values come from each sample
alone, without padding, through the Hugging Face model itself and torch's log_softmax, with the PPO clipped loss
written out here: nothing of the packed path (flash_attn.bert_padding, upstream's unpad / gather, its log-prob and
entropy helpers) is in them.
"""

from __future__ import annotations

import pytest
import torch

from openrlhf_ada.cpu import patches as cpu_compat

SIZES = (2, 4, 3)  # Est's groups: a prompt's sample count follows its pass-rate estimate
PROMPT_LENGTHS = (5, 5, 9, 9, 9, 9, 3, 3, 3)  # each group shares its prompt
RESPONSE_LENGTHS = (6, 2, 7, 4, 1, 5, 8, 7, 2)  # the last group's correct sample is its shortest: ADORA's lam
REWARDS = (1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0)
CLIP = 0.2


@pytest.fixture(scope="module")
def actor(tiny_llama_path):
    """Upstream's Actor on the tiny llama with the attention the CPU mode gives packing, in float32 (the gradients
    are compared to 1e-5) and bfloat16 (log-probs compared exactly)."""
    if cpu_compat.use_cpu_mode_without_cuda():
        cpu_compat.apply_cpu_patches()  # flash-attn's Triton cross-entropy out of the way, as in the actors
    from openrlhf.models.actor import Actor

    torch.manual_seed(0)
    return Actor(tiny_llama_path, attn_implementation=cpu_compat.PACKED_ATTENTION, packing_samples=True)


def make_batch(vocab: int):
    """Right-padded sequences (prompt + response), attention mask, and action mask of length T - 1 (the token after
    position t is an action), as upstream's samples generator and replay buffer build them; plus each row alone."""
    gen = torch.Generator().manual_seed(1)
    rows, prompt_of = [], {}
    for i, (p, r) in enumerate(zip(PROMPT_LENGTHS, RESPONSE_LENGTHS)):
        group = group_of(i)
        prompt = prompt_of.setdefault(group, torch.randint(3, vocab, (p,), generator=gen))
        rows.append((torch.cat([prompt, torch.randint(3, vocab, (r,), generator=gen)]), p))
    T = max(len(ids) for ids, _ in rows)
    sequences = torch.zeros(len(rows), T, dtype=torch.long)
    attention = torch.zeros(len(rows), T, dtype=torch.long)
    action = torch.zeros(len(rows), T - 1, dtype=torch.bool)
    for i, (ids, p) in enumerate(rows):
        sequences[i, : len(ids)] = ids
        attention[i, : len(ids)] = 1
        action[i, p - 1 : len(ids) - 1] = True
    return sequences, attention, action, rows


def group_of(i: int) -> int:
    bounds = torch.tensor(SIZES).cumsum(0)
    return int((bounds <= i).sum())


def advantages(action: torch.Tensor) -> torch.Tensor:
    """dr_grpo against each (ragged) group's own mean reward, times the group's ADORA weight, on every action token."""
    from openrlhf_ada.algorithms.adora import AdoraConfig, ragged_sample_weights

    rewards = torch.tensor(REWARDS)
    groups = torch.tensor([group_of(i) for i in range(len(REWARDS))])
    means = torch.stack([rewards[groups == g].mean() for g in range(len(SIZES))])
    weights = ragged_sample_weights(AdoraConfig(enable=True), scores=rewards, rewards=rewards,
                                    lengths=torch.tensor(RESPONSE_LENGTHS, dtype=torch.float32),
                                    truncated=torch.zeros(len(REWARDS), dtype=torch.bool), sizes=SIZES, step=0)
    assert len(set(weights.tolist())) > 1, weights  # ADORA weighs the groups differently: the batch has both
    per_sample = (rewards - means[groups]) * weights
    return per_sample[:, None] * action.float()


def alone(model, rows, dtype):
    """Each sample by itself, no padding: its action tokens' log-probs and entropies (by hand from the logits)."""
    log_probs, entropies = [], []
    for ids, p in rows:
        logits = model(ids[None], attention_mask=torch.ones(1, len(ids), dtype=torch.long)).logits[0].float()
        logp = torch.log_softmax(logits, dim=-1)
        targets = ids[p:]  # the response tokens, each predicted from the position before it
        log_probs.append(logp[p - 1 : len(ids) - 1].gather(-1, targets[:, None])[:, 0])
        entropies.append(-(logp.exp() * logp).sum(-1)[p - 1 : len(ids) - 1])
    return log_probs, entropies


def ppo_loss_by_hand(log_probs, old, adv):
    """Token-level PPO clipped loss over all action tokens of all rows: sum of -min(r A, clip(r) A) / tokens."""
    total, tokens = 0.0, 0
    for lp, o, a in zip(log_probs, old, adv):
        ratio = (lp - o).exp()
        total = total + (-torch.min(ratio * a, ratio.clamp(1 - CLIP, 1 + CLIP) * a)).sum()
        tokens += len(lp)
    return total / tokens


def forward(actor, packed: bool, sequences, attention, action):
    actor.packing_samples = packed
    try:
        log_probs, output = actor(sequences, action, attention_mask=attention, return_output=True,
                                  return_entropy=True)
    finally:
        actor.packing_samples = True
    return log_probs, output.entropy[:, -action.shape[1]:]


def per_row(matrix, action):
    return [matrix[i][action[i]] for i in range(len(action))]


def test_packed_log_probs_equal_padded_and_each_sample_alone_in_bfloat16(actor):
    model = actor.model.to(torch.bfloat16)
    try:
        sequences, attention, action, rows = make_batch(model.config.vocab_size)
        with torch.no_grad():
            packed = forward(actor, True, sequences, attention, action)
            padded = forward(actor, False, sequences, attention, action)
            expected_lp, expected_ent = alone(model, rows, torch.bfloat16)
    finally:
        model.to(torch.float32)
    # the model's logits are the same bits packed, padded and alone; what is left is the float32 rounding of
    # upstream's cross-entropy against the log_softmax here
    assert torch.equal(packed[0], padded[0]) and torch.equal(packed[1] * action, padded[1] * action)
    for got in (packed, padded):
        lp, ent = per_row(got[0], action), per_row(got[1], action)
        for i in range(len(rows)):
            assert torch.allclose(lp[i], expected_lp[i], rtol=0, atol=2e-6), (i, lp[i] - expected_lp[i])
            assert torch.allclose(ent[i], expected_ent[i], rtol=0, atol=2e-6), (i, ent[i] - expected_ent[i])
    assert (packed[0] * ~action).abs().sum() == 0  # nothing outside the actions


def test_packed_loss_and_gradient_equal_padded_and_each_sample_alone(actor):
    from openrlhf.models.loss import PolicyLoss

    model = actor.model
    sequences, attention, action, rows = make_batch(model.config.vocab_size)
    adv = advantages(action)
    with torch.no_grad():
        current, _ = alone(model, rows, torch.float32)
    gen = torch.Generator().manual_seed(2)
    # old log-probs a little off the current ones: some ratios leave [1 - clip, 1 + clip], so clipping takes part
    old_rows = [c + 0.4 * torch.randn(c.shape, generator=gen) for c in current]
    old = torch.zeros(action.shape)
    for i in range(len(rows)):
        old[i][action[i]] = old_rows[i]
    loss_fn = PolicyLoss(clip_eps_low=CLIP, clip_eps_high=CLIP)

    def gradient(loss):
        model.zero_grad(set_to_none=True)
        loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    results = {}
    for packed in (True, False):
        log_probs, entropy = forward(actor, packed, sequences, attention, action)
        loss = loss_fn(log_probs, old, adv, action_mask=action)[0]
        results[packed] = (loss.detach(), gradient(loss))
    lp_rows, _ = alone(model, rows, torch.float32)
    adv_rows = [adv[i][action[i]] for i in range(len(rows))]
    expected = ppo_loss_by_hand(lp_rows, old_rows, adv_rows)
    expected_grad = gradient(expected)
    clipped = sum(((lp - o).exp().sub(1).abs() > CLIP).sum() for lp, o in zip(lp_rows, old_rows))
    assert clipped > 0 and expected.abs() > 1e-3
    for packed, (loss, grads) in results.items():
        assert loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7), packed
        for name, g in grads.items():
            assert torch.allclose(g, expected_grad[name], rtol=1e-4, atol=1e-6), (packed, name)
    assert any(g.abs().max() > 0 for g in expected_grad.values())
