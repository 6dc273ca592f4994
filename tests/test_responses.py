"""The engine actors' compact responses (trainer/ray/responses.py) build the same `Experience` as upstream's lists,
bit for bit: upstream's `_process_response_into_experience` on a list response against the project's generator's on
the compact one. Log-probs are drawn as float64 values (not only float32 ones, as vLLM's are): torch's float32
rounding of the list and numpy's of the array must agree. Token ids outside int32 are refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator
from openrlhf_ada.trainer.ray.responses import compact_response, listed_response, log_prob_array, token_array

LOG_PROBS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(-50, 0),
                      st.floats(-50, 0, width=32), st.sampled_from([0.0, -0.0, 1e-45, -3.5e38, -3.5e39, 1 / 3]))


@st.composite
def responses(draw):
    prompt = draw(st.integers(0, 6))
    length = draw(st.integers(0, 12))
    tokens = draw(st.lists(st.integers(0, 2**31 - 1), min_size=prompt + length, max_size=prompt + length))
    log_probs = draw(st.one_of(st.none(), st.just([0.0] * prompt + draw(
        st.lists(LOG_PROBS, min_size=length, max_size=length)))))
    return {"prompt": "p", "label": "l", "images": None, "mm_train_inputs": None, "observation_tokens": tokens,
            "action_ranges": [(prompt, prompt + length)], "rollout_log_probs": log_probs, "truncated": False,
            "reward": 1.0, "scores": 1.0, "extra_logs": {}}


def bits(t: torch.Tensor) -> list:
    """A tensor's values as their bit patterns (NaN and -0.0 compared exactly)."""
    if t.dtype == torch.float32:
        return t.view(torch.int32).tolist()
    return t.tolist()


@settings(max_examples=300, deadline=None)
@given(responses(), st.sampled_from([4, 10, 2048]))
def test_a_compact_response_builds_upstreams_experience_bit_for_bit(response, max_len):
    expected = SamplesGenerator._process_response_into_experience(None, response, max_len=max_len)
    compact = compact_response(response)
    assert compact["observation_tokens"].dtype == np.int32
    assert response["rollout_log_probs"] is None or compact["rollout_log_probs"].dtype == np.float32
    project = object.__new__(RoundsSamplesGenerator)
    got = project._process_response_into_experience(compact, max_len=max_len)
    for name in ("sequences", "attention_mask", "action_mask", "rollout_log_probs", "response_length",
                 "total_length"):
        a, b = getattr(expected, name), getattr(got, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.dtype == b.dtype and a.shape == b.shape and bits(a) == bits(b), name


def test_upstream_keeps_list_log_probs_as_float32():
    """What the float32 arrays rest on: upstream's tensor of a list of Python floats is float32, rounded to nearest
    (1/3 is not a float32; its nearest float32 is 11184811 / 2**25)."""
    e = SamplesGenerator._process_response_into_experience(
        None, {"prompt": "p", "label": "l", "observation_tokens": [1, 2, 3], "action_ranges": [(1, 3)],
               "rollout_log_probs": [0.0, 1 / 3, -1.0]}, max_len=8)
    assert e.rollout_log_probs.dtype == torch.float32
    assert e.rollout_log_probs[0, 0].item() == 11184811 / 2**25
    assert log_prob_array([1 / 3])[0] == np.float32(11184811 / 2**25)


def test_token_ids_must_fit_int32():
    assert token_array([0, 2**31 - 1]).tolist() == [0, 2**31 - 1]
    assert token_array(np.array([5], dtype=np.int64)).dtype == np.int32
    for bad in ([2**31], [-(2**31) - 1], np.array([2**40])):
        with pytest.raises(ValueError, match="outside int32"):
            token_array(bad)


def test_what_is_not_a_float_list_stays_as_it_is():
    """None stays None; integer log-probs (a custom executor's) stay a list, since upstream makes integers of them."""
    assert log_prob_array(None) is None
    ints = [0, 0, -1]
    assert log_prob_array(ints) is ints
    r = {"observation_tokens": [3, 4], "rollout_log_probs": ints, "action_ranges": [(1, 2)]}
    assert compact_response(r)["rollout_log_probs"] is ints
    assert r["observation_tokens"] == [3, 4]  # the input is not changed


def test_listed_response_gives_the_lists_back():
    compact = compact_response({"observation_tokens": [7, 8, 9], "rollout_log_probs": [0.0, -0.25, -math.inf]})
    listed = listed_response(compact)
    assert listed["observation_tokens"] == [7, 8, 9] and listed["rollout_log_probs"] == [0.0, -0.25, -math.inf]
    assert all(type(x) is int for x in listed["observation_tokens"])
    assert all(type(x) is float for x in listed["rollout_log_probs"])
    assert isinstance(compact["observation_tokens"], np.ndarray)  # the compact one unchanged
