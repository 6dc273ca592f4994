"""A sample's light record holds what upstream's own `Experience` of the sample would hold (checked against upstream's
`_process_response_into_experience` on generated responses), its penalised reward is upstream's length penalty
(worked by hand), and the failure log counts records by reason and builds its example only for the error."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

from openrlhf_ada.trainer.ppo_utils.sample_failures import FailureLog, reward_failed, sample_score, scalar
from openrlhf_ada.trainer.ppo_utils.sample_record import penalised, penalised_rewards, record_of
from openrlhf_ada.trainer.ray.reward_guard import FAIL_CODES

NUMBERS = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.integers(-2**63, 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True), st.floats(-1e40, 1e40), st.sampled_from([0.1, 1 / 3, 3.4028236e38]),
)


@st.composite
def responses(draw):
    length = draw(st.integers(0, 30))
    ranges = draw(st.lists(st.tuples(st.integers(-5, 35), st.integers(-5, 35)), max_size=3))
    reward, score = draw(NUMBERS), draw(st.one_of(st.none(), NUMBERS))
    logs = draw(st.one_of(st.just({}), st.builds(lambda c: {"reward_failed": 1.0, "reward_fail_code": c},
                                                 st.one_of(st.sampled_from(sorted(FAIL_CODES.values())),
                                                           st.floats(0, 9), st.just(0.0)))))
    return {"prompt": "p", "label": "l", "observation_tokens": list(range(length)), "action_ranges": ranges,
            "reward": reward, "scores": score, "rollout_log_probs": None, "truncated": draw(st.booleans()),
            "extra_logs": logs}


def same(a, b) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and (a == b or (math.isnan(a) and math.isnan(b))))


@settings(max_examples=400, deadline=None)
@given(responses(), st.one_of(st.none(), st.integers(1, 40)))
def test_the_record_holds_what_upstreams_experience_holds(response, max_len):
    kwargs = {} if max_len is None else {"max_len": max_len}
    e = SamplesGenerator._process_response_into_experience(None, response, **kwargs)
    r = record_of(response, kwargs)
    assert r.response is response
    assert same(r.reward, scalar(e.rewards)), (r.reward, e.rewards)
    assert same(r.score, sample_score(e)), (r.score, e.scores, e.rewards)
    assert r.length == int(e.response_length.item())
    assert r.truncated == bool(e.truncated.item())
    assert r.failed == reward_failed(e)
    if r.failed:  # the code the failure log counted from the experience's info before there were records
        assert r.fail_code == (int(scalar(e.info["reward_fail_code"]) or 1) if "reward_fail_code" in e.info else 1)


def test_float_rewards_are_held_as_float32():
    r = record_of({"observation_tokens": [1, 2, 3], "action_ranges": [(1, 3)], "reward": 0.1, "scores": None}, {})
    assert r.reward == r.score == float(torch.tensor(0.1, dtype=torch.float32)) != 0.1
    assert r.length == 2 and not r.truncated and not r.failed


def args_with(**reward):
    base = dict(overlong_buffer_len=None, overlong_penalty_factor=1.0, stop_properly_penalty_coef=None)
    return SimpleNamespace(reward=SimpleNamespace(**{**base, **reward}),
                           rollout=SimpleNamespace(max_new_tokens=8), data=SimpleNamespace(max_len=64))


def test_penalised_rewards_by_hand():
    rewards, lengths, truncated = [1.0, 1.0, None, 0.0, 1.0], [3, 7, 8, 8, 8], [False, False, True, True, True]
    assert penalised_rewards(rewards, lengths, truncated, args_with()) == rewards  # no penalty configured
    # DAPO overlong: max_new_tokens 8, buffer 4 -> a length L over 4 loses (L - 4) / 4 (at most 1)
    assert penalised_rewards(rewards, lengths, truncated, args_with(overlong_buffer_len=4)) == \
        [1.0, 0.25, None, -1.0, 0.0]
    # ProRL stop properly: a truncated sample's reward scaled by 0.5, or set to a negative coefficient
    assert penalised_rewards(rewards, lengths, truncated, args_with(stop_properly_penalty_coef=0.5)) == \
        [1.0, 1.0, None, 0.0, 0.5]
    assert penalised_rewards(rewards, lengths, truncated, args_with(stop_properly_penalty_coef=-0.5)) == \
        [1.0, 1.0, None, -0.5, -0.5]
    assert penalised_rewards([None], [3], [True], args_with(stop_properly_penalty_coef=-0.5)) == [None]
    records = [record_of({"observation_tokens": list(range(12)), "action_ranges": [(4, 4 + L)], "reward": r,
                          "truncated": t}, {}) for r, L, t in zip(rewards, lengths, truncated)]
    assert penalised(records, args_with(overlong_buffer_len=4)) == [1.0, 0.25, None, -1.0, 0.0]


def test_the_failure_log_counts_records_by_reason_and_builds_only_its_example():
    built = []

    def build(response):
        built.append(response)
        return SamplesGenerator._process_response_into_experience(None, response)

    def response(reward, code=None):
        logs = {} if code is None else {"reward_failed": 1.0, "reward_fail_code": float(code)}
        return {"prompt": "p", "label": "l", "observation_tokens": [5, 6, 7], "action_ranges": [(1, 3)],
                "reward": reward, "scores": None, "rollout_log_probs": None, "extra_logs": logs}

    log = FailureLog(build=build)
    log.record([record_of(response(r, c), {}) for r, c in
                [(1.0, None), (None, FAIL_CODES["timeout"]), (None, None), (math.inf, None), (0.0, None)]])
    assert (log.total, log.failed, log.by_reason) == (5, 3, {"timeout": 1, "raised": 2})
    assert log.metrics()["fault/failed_share"] == 3 / 5 and not built
    log.check(0.6, "http://r", tokenizer=None)  # 60% is not over 60%
    tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens: " ".join(str(int(i)) for i in ids))
    with pytest.raises(RuntimeError, match=r"3 of 5 samples.*response='6 7'"):
        log.check(0.5, "http://r", tokenizer)
    assert len(built) == 1 and built[0]["extra_logs"]["reward_fail_code"] == FAIL_CODES["timeout"]
