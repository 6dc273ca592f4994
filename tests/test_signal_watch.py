"""The reward file's extra_logs reach the metrics, and a wrong training signal (bad labels, every
reward identical for several steps) is reported. Pure functions over per-sample info dicts, as Experience.info holds
them (upstream stores each value as tensor([v]))."""

import pytest
import torch

from openrlhf_ada.trainer.signal_watch import (
    SignalState,
    SignalWatchConfig,
    bad_label_reason,
    observe,
    reward_file_logs,
)


def info(reward, **extra):
    base = {"reward": torch.tensor([reward]), "score": torch.tensor([reward]), "response_clip_ratio": torch.tensor([0.0]),
            "reward_failed": torch.tensor([0.0]), "reward_fail_code": torch.tensor([0.0]),
            "ada_pool_count": torch.tensor([8.0]), "adora_weight": torch.tensor([0.1])}
    return {**base, **{k: torch.tensor([float(v)]) for k, v in extra.items()}}


def test_reward_file_logs_are_the_means_of_the_reward_files_own_keys():
    infos = [info(1.0, kk_answer_found=1, kk_reason=0), info(0.0, kk_answer_found=1, kk_reason=1),
             info(0.0, kk_answer_found=0, kk_reason=2), info(0.0, kk_answer_found=0, kk_reason=8)]
    # by hand: answer_found 2 of 4 = 0.5; reason codes (0 + 1 + 2 + 8) / 4 = 2.75; trainer keys are left out
    assert reward_file_logs(infos) == {"reward_file/kk_answer_found": 0.5, "reward_file/kk_reason": 2.75}
    assert reward_file_logs([]) == {}


def test_bad_labels_are_recognised_by_reason_code_or_by_name():
    assert bad_label_reason(info(0.0, math_reason=8)) == "math_reason = bad_label"
    assert bad_label_reason(info(0.0, math_reason=1)) is None  # a wrong answer is the model's, not the data's
    assert bad_label_reason(info(0.0, bad_label=1)) == "bad_label > 0"
    assert bad_label_reason(info(0.0, my_task_bad_label=1)) == "my_task_bad_label > 0"
    assert bad_label_reason(info(0.0, my_task_bad_label=0)) is None
    assert bad_label_reason(info(0.0, reward_fail_code=8)) is None  # the reward guard's code 8 means something else


def test_bad_label_warning_names_an_example_and_is_rate_limited():
    config = SignalWatchConfig(constant_steps=99, bad_label_every=3)
    infos = [info(0.0, gym_reason=8), info(1.0, gym_reason=0), info(0.0, gym_reason=8), info(0.0, gym_reason=1)]
    labels = [None, '{"ok": 1}', None, "7"]
    state, metrics, warnings = observe(SignalState(), step=1, rewards=[0, 1, 0, 0], infos=infos, labels=labels,
                                       config=config)
    assert metrics["signal/bad_label_share"] == 0.5 and state.bad_label_samples == 2
    assert len(warnings) == 1 and "2 of 4 samples" in warnings[0] and "label None" in warnings[0]
    assert "gym_reason = bad_label" in warnings[0] and "--data.label_key" in warnings[0]
    warned_at = []
    for step in range(2, 8):
        state, _, warnings = observe(state, step=step, rewards=[0, 1, 0, 0], infos=infos, labels=labels,
                                     config=config)
        warned_at += [step] * len(warnings)
    assert warned_at == [4, 7] and state.bad_label_samples == 14  # every 3 steps after step 1; 7 steps x 2


def test_constant_rewards_warn_after_k_steps_and_a_change_resets():
    config = SignalWatchConfig(constant_steps=3)
    state, warned = SignalState(), []
    sequence = [[0, 0], [0, 0], [0, 0], [0, 0], [1, 0], [1, 1], [1, 1], [0, 0], [0, 0], [0, 0]]
    streaks = []
    for step, rewards in enumerate(sequence, 1):
        infos = [info(r) for r in rewards]
        state, metrics, warnings = observe(state, step=step, rewards=rewards, infos=infos, config=config)
        streaks.append(metrics["signal/constant_reward_steps"])
        warned += [(step, w) for w in warnings]
    # by hand: 0,0 x4 -> streaks 1 2 3 4; mixed -> 0; 1,1 x2 -> 1 2; then 0,0 x3 -> 1 2 3 (a new value restarts)
    assert streaks == [1, 2, 3, 4, 0, 1, 2, 1, 2, 3]
    assert [step for step, _ in warned] == [3, 10]
    assert "last 3 steps was 0" in warned[0][1] and "reward file matches the dataset" in warned[0][1]


def test_config_is_checked():
    with pytest.raises(ValueError, match="constant_steps"):
        SignalWatchConfig(constant_steps=0)
