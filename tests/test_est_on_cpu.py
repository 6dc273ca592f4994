"""Reinforce-Ada-Est end to end in train_local (the hf engine): the allocation from the estimator, the groups of
varying size trained, and a resume that carries the estimator's state. The runs are train_local's `run` in this
process, on the suite's local Ray (no interpreter and Ray start-up of their own)."""

from __future__ import annotations

import json
import textwrap
from hashlib import sha256

import pytest

from openrlhf_ada.cli.train_local import parse_local_args
from openrlhf_ada.cli.train_local import run as train_local
from openrlhf_ada.trainer.metrics_log import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REWARD = textwrap.dedent('''
    import threading
    import torch

    _lock, _seen = threading.Lock(), {}

    def reward_func(queries, prompts, labels):
        label = labels[0]
        if label == "mix":  # alternate per prompt: 0, 1, 0, 1, ... over all its samples so far
            with _lock:
                k = _seen.get(prompts[0], 0)
                _seen[prompts[0]] = k + 1
            value = float(k % 2)
        else:
            value = float(label)
        t = torch.tensor([value])
        return {"rewards": t, "scores": t, "extra_logs": {}}
''')
LABELS = ["1", "0", "mix", "mix", "mix", "mix"]


def argv(tmp_path, model, out, steps):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"input": f"Count to {i}:", "label": lab}) + "\n"
                            for i, lab in enumerate(LABELS)))
    (tmp_path / "reward.py").write_text(REWARD)
    return ["--actor.model_name_or_path", model,
            "--data.prompt_dataset", str(data), "--data.label_key", "label", "--reward.remote_url",
            str(tmp_path / "reward.py"), "--algo.advantage.estimator", "dr_grpo", "--rollout.n_samples_per_prompt",
            "4", "--rollout.batch_size", "6", "--rollout.max_new_tokens", "2", "--data.max_len", "32",
            "--local.engine", "hf", "--local.max_steps", str(steps), "--local.output_dir", str(out),
            "--ckpt.save_steps", "-1", "--ada.enable", "--ada.strategy", "est"]


def test_train_local_runs_est_and_resumes_its_estimator(tmp_path, tiny_llama_path, ray_local):
    """One step is one epoch (6 prompts, batch 6). Step 1: every prompt unseen, p_hat 1/2 for all -> 4 each (24).
    Recorded: '1' (4 of 4 correct), '0' (0 of 4), each 'mix' (2 of 4). Step 2: p_hat = 5/6, 1/6 and 1/2; weights
    1/sqrt(p) + 0.01 = 1.1054, 2.4595, 1.4242 (x4), sum 9.2617; shares of 24: 2.864, 6.373, 3.691 (x4); floors 2, 6,
    3 (x4) = 20; the 4 missing go to the largest fractions (.864, then three of the .691) -> sizes 3, 6, 4, 4, 4, 3.
    Rewards: '1' 1.0, '0' 0.0, the mix prompts with 4 samples 0.5, the one with 3 (its 5th-7th: 0, 1, 0) 1/3.
    Cov(N, r) = mean((N - 4)(r - 17/36)) = (-(1 - 17/36) - 2 (17/36) + (-1)(1/3 - 17/36)) / 6 = -2/9."""

    def run(out, steps, *extra):
        train_local(parse_local_args(argv(tmp_path, tiny_llama_path, out, steps) + list(extra)))
        return read_metrics(str(out))

    straight = run(tmp_path / "straight", 2)
    first, second = straight
    assert (first["ada/alloc_min"], first["ada/alloc_max"], first["ada/samples_generated"]) == (4, 4, 24)
    assert first["ada/alloc_cov_n_r"] == pytest.approx(0.0)
    assert first["ada/est_p_hat_mean"] == pytest.approx(0.5)
    # no prompt had history at step 1, every one at step 2 (its second visit): the allocation spreads from there on
    assert (first["ada/est_seen_share"], second["ada/est_seen_share"]) == (0.0, 1.0)
    assert (second["ada/alloc_min"], second["ada/alloc_median"], second["ada/alloc_max"]) == (3, 4, 6)
    assert second["ada/samples_generated"] == 24 and second["prompts"] == 6
    assert second["ada/alloc_cov_n_r"] == pytest.approx(-2 / 9, abs=1e-6)
    assert second["ada/est_p_hat_mean"] == pytest.approx((5 / 6 + 1 / 6 + 4 * 0.5) / 6)
    # 4 of 6 groups have signal: the mix ones
    assert second["zero_adv_group_share"] == pytest.approx(2 / 6)

    out = tmp_path / "resumed"
    run(out, 1)
    state = json.loads((out / "ckpt" / "latest" / "trainer_state.json").read_text())
    ema = state["generator"]["history"]["ema"]
    key = {i: sha256(f"Count to {i}:".encode()).hexdigest() for i in range(6)}
    assert ema[key[0]] == [4.0, 4.0] and ema[key[1]] == [4.0, 0.0]
    assert all(ema[key[i]] == [4.0, 2.0] for i in range(2, 6))
    resumed = run(out, 2, "--ckpt.load_enable")
    keys = ["step", "ada/alloc_min", "ada/alloc_median", "ada/alloc_max", "ada/alloc_cov_n_r", "ada/samples_generated"]
    assert [{k: r[k] for k in keys} for r in resumed] == [{k: r[k] for k in keys} for r in straight]


AUTHORS_LABELS = ["0", "1", "mix", "mix", "mix", "mix"]


def test_train_local_runs_the_authors_est_with_adora_over_three_epochs(tmp_path, tiny_llama_path, ray_local):
    """--ada.est_preset authors with --adora.enable, n = 2, 6 prompts a step = an epoch, three epochs.
    Step 1: every prompt unseen (p_hat 1/17): R = 12 - 6 = 6 split evenly, 2 each. Recorded: '0' (2, 0), '1' (2, 2),
    each mix (2, 1) (its samples 0, 1). Step 2: p_hat = 1/19, 3/19, 2/19 -> w = 19, 6.333, 9.5 (x4), sum 63.33;
    shares of R = 6: 1.8, 0.6, 0.9 (x4); floors 1, 0, 0 (x4); the 5 left to the fractions .9 (the four mix), .8
    ('0'): counts 3, 1, 2, 2, 2, 2 -- the '1' prompt is a group of ONE sample (the authors' advantage: its reward).
    Step 3: counts (4.8, 0), (2.8, 2.8), (3.8, 1.9): p_hat 1/21.8, 3.8/19.8, 2.9/20.8 -> w 21.8, 5.21, 7.17 (x4),
    shares of 6: 2.35, 0.56, 0.77 (x4); floors 2, 0, 0; the 4 left to the four mix (.77): 3, 1, 2, 2, 2, 2 again.
    ADORA on these groups: the '0' group has no positive (1 of 6 groups, weight lam), every other group has one."""
    out = tmp_path / "authors"
    data = tmp_path / "authors.jsonl"
    data.write_text("".join(json.dumps({"input": f"Count to {i}:", "label": lab}) + "\n"
                            for i, lab in enumerate(AUTHORS_LABELS)))
    args = argv(tmp_path, tiny_llama_path, out, 3)
    args[args.index("--data.prompt_dataset") + 1] = str(data)
    args[args.index("--rollout.n_samples_per_prompt") + 1] = "2"
    train_local(parse_local_args(args + ["--ada.est_preset", "authors", "--adora.enable"]))
    rows = read_metrics(str(out))
    assert [r["step"] for r in rows] == [1, 2, 3] and all(r["ada/samples_generated"] == 12 for r in rows)
    spread = [(r["ada/alloc_min"], r["ada/alloc_median"], r["ada/alloc_max"]) for r in rows]
    assert spread == [(2, 2, 2), (1, 2, 3), (1, 2, 3)]
    assert [r["ada/est_seen_share"] for r in rows] == [0.0, 1.0, 1.0]
    assert rows[0]["ada/est_p_hat_mean"] == pytest.approx(1 / 17)
    assert rows[1]["ada/est_p_hat_mean"] == pytest.approx((1 / 19 + 3 / 19 + 4 * 2 / 19) / 6)
    for row in rows:
        assert row["adora/no_pos_share"] == pytest.approx(1 / 6)
        assert 0.1 - 1e-6 <= row["adora/weight_mean"] <= 1.0 + 1e-6 and row["adora/attenuated_share"] >= 1 / 6 - 1e-6
        assert row["prompts"] == 6 and row.get("ada/prompt_weight", 1.0) == 1.0  # the authors': no explicit weight


def test_train_local_runs_est_with_knapsack_and_without_a_prompt_weight(tmp_path, tiny_llama_path, ray_local):
    """--ada.est_allocation knapsack with --ada.prompt_weight none (a documented choice), two steps (two epochs): the
    groups are trained with the plain ragged baseline, no pass rate is needed and no weight is logged. Step 1 as
    above: every prompt unseen, p_hat 1/2 for all, equal increments -> 4 each. Step 2: p_hat 5/6, 1/6, 1/2 (x4),
    the paper's bounds [2, 32], 24 samples: every prompt 2, and the 12 left to the largest increments of
    v(p, N) = (1 - p^N - (1 - p)^N) p (1 - p)^2: for p = 1/2 (p (1 - p)^2 = 1/8) 1/32, 1/64, 1/128 from N = 2;
    for p = 1/6 (25/216) 0.01608, 0.01161, 0.00938, 0.00776; for p = 5/6 (5/216) 0.00322 and less. The 12 largest:
    four 1/32, four 1/64, 0.01608, 0.01161, 0.00938 and one 1/128 (> 0.00776): sizes 2, 5, 5, 4, 4, 4 (min 2,
    median 4, max 5; inv_sqrt's were 3, 4, 6). Rewards: '1' 1.0, '0' 0.0, the mix prompt with 5 samples (its
    5th-9th: 0, 1, 0, 1, 0) 2/5, the others 1/2: Cov(N, r) = mean((N - 4) r) = (-2 x 1 + 1 x 0 + 1 x 2/5) / 6
    = -4/15."""
    out = tmp_path / "knapsack"
    train_local(parse_local_args(argv(tmp_path, tiny_llama_path, out, 2)
                                 + ["--ada.prompt_weight", "none", "--ada.est_allocation", "knapsack"]))
    first, second = read_metrics(str(out))
    assert (first["ada/alloc_min"], first["ada/alloc_max"], first["ada/samples_generated"]) == (4, 4, 24)
    assert first["zero_adv_group_share"] == pytest.approx(2 / 6)  # '1' and '0' have no signal, the mix ones do
    assert "ada/prompt_weight" not in first
    assert (second["ada/alloc_min"], second["ada/alloc_median"], second["ada/alloc_max"]) == (2, 4, 5)
    assert second["ada/samples_generated"] == 24 and second["prompts"] == 6
    assert second["ada/alloc_cov_n_r"] == pytest.approx(-4 / 15, abs=1e-6)
