"""Custom ADORA weight functions (`path.py:function`): loading, calling, and every failure naming file and function."""

import textwrap

import pytest
import torch

from openrlhf_ada.algorithms.adora import AdoraConfig, WeightFuncError, load_weight_func, ragged_sample_weights

S = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
ARGS = (S, S * 2, torch.tensor([[5.0, 3, 4], [1, 2, 3]]), torch.zeros(2, 3, dtype=torch.bool), 7)


def write(tmp_path, body, name="w.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_per_prompt_and_per_sample_weights(tmp_path):
    path = write(tmp_path, """
        import torch
        def per_prompt(scores, rewards, lengths, truncated, step):
            return scores.sum(-1) + step          # [P]
        def per_sample(scores, rewards, lengths, truncated, step):
            return lengths / 10                   # [P, n]
    """)
    assert load_weight_func(f"{path}:per_prompt")(*ARGS).tolist() == [8.0, 8.0]
    per_sample = load_weight_func(f"{path}:per_sample")(*ARGS)
    assert torch.allclose(per_sample, torch.tensor([[0.5, 0.3, 0.4], [0.1, 0.2, 0.3]]))
    # through the config and the trainers' call (two groups of 3 samples, flat): [P] broadcasts over each group,
    # inside the step window only
    fn = load_weight_func(f"{path}:per_prompt")
    cfg = AdoraConfig(enable=True, weight_func=f"{path}:per_prompt", start_step=7)
    flat = dict(scores=S.reshape(-1), rewards=S.reshape(-1), lengths=ARGS[2].reshape(-1),
                truncated=ARGS[3].reshape(-1), sizes=[3, 3], weight_func=fn)
    assert ragged_sample_weights(cfg, step=7, **flat).tolist() == [8.0] * 6
    assert ragged_sample_weights(cfg, step=6, **flat).tolist() == [1.0] * 6


@pytest.mark.parametrize(
    "body,call,words",
    [
        ("def f(*a):\n    return [1.0, 1.0]\n", "missing_function", ["no 'missing_function'"]),
        ("def f(:\n", "f", ["syntax error", "line 1"]),
        ("raise RuntimeError('boom at import')\n", "f", ["importing", "boom at import"]),
        ("f = 3\n", "f", ["not a function"]),
        ("def f(*a):\n    raise KeyError('oops')\n", "f", ["raised KeyError", "oops"]),
        ("def f(*a):\n    return [1.0, 1.0, 1.0]\n", "f", ["shape [3]", "[2] or [2, 3]"]),
        ("def f(*a):\n    return [[1.0], [1.0]]\n", "f", ["shape [2, 1]"]),
        ("def f(*a):\n    return 'heavy'\n", "f", ["returned str"]),
        ("def f(*a):\n    return [float('nan'), 1.0]\n", "f", ["NaN or inf"]),
        ("def f(*a):\n    return [float('inf'), 1.0]\n", "f", ["NaN or inf"]),
        ("def f(*a):\n    return [-0.5, 1.0]\n", "f", ["negative", "-0.5"]),
    ],
)
def test_failures_name_file_and_function(tmp_path, body, call, words):
    path = write(tmp_path, body)
    with pytest.raises(WeightFuncError) as e:
        load_weight_func(f"{path}:{call}")(*ARGS)
    msg = str(e.value)
    assert path in msg and repr(call) in msg
    for word in words:
        assert word in msg


def test_missing_file_and_bad_spec(tmp_path):
    with pytest.raises(WeightFuncError, match="file not found") as e:
        load_weight_func(f"{tmp_path}/nope.py:f")
    assert "nope.py" in str(e.value) and "'f'" in str(e.value)
    with pytest.raises(WeightFuncError, match="path/to/file.py:function_name"):
        load_weight_func("just_a_path.py")
    assert issubclass(WeightFuncError, ValueError)
