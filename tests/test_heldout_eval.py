"""Held-out evaluation in train_local: the metrics on hand-made samples, the --eval.* checks before
anything starts, and a real run (local Ray, the transformers engine, a tiny llama) whose logged accuracy is checked
against greedy decoding done here, independently, with transformers on the saved weights."""

from __future__ import annotations

import itertools
import json
import math
import os
import textwrap
from types import SimpleNamespace

import pytest
import torch

from openrlhf_ada.cli.train_local import parse_local_args, run
from openrlhf_ada.utils.heldout import EvalLoader, describe, heldout_metrics
from openrlhf_ada.utils.metrics_log import read_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GYM = os.path.join(REPO, "openrlhf_ada", "rewards", "gym.py")


# -- the metrics -------------------------------------------------------------------------------------------------
class _Dataset:
    """(datasource, prompt, label, image) items, with PromptDataset's collate_fn."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def collate_fn(self, items):
        return tuple(list(x) for x in zip(*items))


def _sample(prompt, reward, score=None, length=5, truncated=False):
    return SimpleNamespace(prompts=[prompt], rewards=torch.tensor([float(reward)]),
                           scores=None if score is None else torch.tensor([float(score)]),
                           response_length=torch.tensor([float(length)]), truncated=torch.tensor([truncated]))


def test_metrics_by_hand():
    """3 problems x 2 samples, sources a, a, b; scores (1, 0), (0, 0), (1, 1): 3 of 6 samples correct, 2 of 3
    problems solved; upstream's per-source pass1 is the mean reward per problem: a (0.5 + 0) / 2, b 1."""
    loader = EvalLoader(_Dataset([("a", "p1", "", None), ("a", "p2", "", None), ("b", "p3", "", None)]))
    samples = [_sample("p1", 1, 1, length=4), _sample("p1", 0, 0, length=8, truncated=True),
               _sample("p2", 0, 0), _sample("p2", 0, 0), _sample("p3", 1, 1), _sample("p3", 1, 1)]
    m = heldout_metrics(samples, 2, 0.5, loader, temperature=0.7, failures={"eval_failed_samples": 1.0})
    assert m["eval/accuracy"] == pytest.approx(0.5)
    assert m["eval/pass_at_2"] == pytest.approx(2 / 3)
    assert m["eval/all_correct_share"] == pytest.approx(1 / 3)  # only p3
    assert m["eval/problems"] == 3 and m["eval/samples_per_problem"] == 2 and m["eval/temperature"] == 0.7
    assert m["eval/a_pass1"] == pytest.approx(0.25) and m["eval/b_pass1"] == pytest.approx(1.0)
    assert m["eval/a_pass2"] == pytest.approx(0.5) and m["eval/b_pass2"] == pytest.approx(1.0)
    assert m["eval/a_response_length_mean"] == pytest.approx((4 + 8 + 5 + 5) / 4)
    assert m["eval/a_truncated_rate"] == pytest.approx(0.25)
    assert m["eval/num_samples"] == 6 and m["eval/failed_samples"] == 1.0
    assert "pass@2 0.667" in describe(m) and "temperature 0.7" in describe(m)


def test_accuracy_uses_the_score_and_a_strict_threshold():
    """Shaped rewards (3 / -0.5) with 0/1 scores: accuracy follows the score; a score equal to the threshold is
    not correct; without scores the reward is used."""
    loader = EvalLoader(_Dataset([("d", f"p{i}", "", None) for i in range(4)]))
    samples = [_sample("p0", 3.0, 1), _sample("p1", -0.5, 0), _sample("p2", 3.0, 0.5), _sample("p3", 1.0)]
    m = heldout_metrics(samples, 1, 0.5, loader, temperature=0.0)
    assert m["eval/accuracy"] == pytest.approx(2 / 4)  # p0 (score 1) and p3 (reward 1, no score)
    assert "eval/pass_at_1" not in m and "greedy" in describe(m)


def test_metrics_refuse_partial_groups():
    with pytest.raises(ValueError, match="whole groups of 2"):
        heldout_metrics([_sample("p", 1, 1)] * 3, 2, 0.5, EvalLoader(_Dataset([])), temperature=1.0)


def test_no_samples_left():
    """Every prompt lost to failed rewards: no accuracy (NaN, written as null), the counts say why."""
    m = heldout_metrics([], 1, 0.5, EvalLoader(_Dataset([])), temperature=0.0, failures={"eval_failed_prompts": 3.0})
    assert math.isnan(m["eval/accuracy"]) and m["eval/problems"] == 0 and m["eval/failed_prompts"] == 3


def test_trackers_name_eval_metrics_by_themselves(tmp_path):
    """tensorboard/wandb: training metrics under train/, evaluations under their own eval/ names."""
    from openrlhf_ada.trainer.local_trainer import _Trackers

    logged = []
    trackers = _Trackers(SimpleNamespace(logger=SimpleNamespace(tensorboard_dir=None, wandb=SimpleNamespace())),
                         str(tmp_path))
    trackers.wandb = SimpleNamespace(log=lambda row, step: logged.append((step, row)))
    trackers.log(3, {"reward_mean": 0.5, "eval/accuracy": 0.25})
    assert logged == [(3, {"train/reward_mean": 0.5, "eval/accuracy": 0.25})]


# -- checks before anything starts -------------------------------------------------------------------------------
def _data(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return str(path)


@pytest.fixture
def base(tmp_path):
    data = _data(tmp_path / "train.jsonl", [{"input": "What is 1 + 1?", "label": "x"}])
    return ["--actor.model_name_or_path", str(tmp_path), "--data.prompt_dataset", data, "--data.label_key", "label",
            "--reward.remote_url", GYM, "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt",
            "2", "--local.output_dir", str(tmp_path / "run")]


@pytest.mark.parametrize("flags,message", [
    (["--eval.steps", "5"], "--eval.steps 5 without --eval.dataset"),
    (["--eval.dataset", "EVAL", "--eval.steps", "0"], "--eval.steps=0"),
    (["--eval.dataset", "EVAL", "--eval.steps", "-3"], "--eval.steps=-3"),
    (["--eval.dataset", "EVAL", "--eval.temperature", "0"], "would all be the same answer"),  # upstream's n = 4
    (["--eval.dataset", "EVAL", "--eval.temperature", "-1", "--eval.n_samples_per_prompt", "1"], "must be >= 0"),
    (["--eval.dataset", "EVAL", "--eval.n_samples_per_prompt", "0"], "--eval.n_samples_per_prompt=0"),
    (["--eval.dataset", "MISSING.jsonl"], "--eval.dataset 'MISSING.jsonl' does not exist"),
    (["--eval.dataset", "BAD"], "--eval.dataset: "),
    (["--local.max_steps", "0"], "0 only with --eval.dataset"),
    (["--local.max_generated_tokens", "-5"], "--local.max_generated_tokens=-5.0"),
])
def test_eval_flags_refused_before_start(tmp_path, base, capsys, flags, message):
    good = _data(tmp_path / "eval.jsonl", [{"input": "What is 2 + 2?", "label": "y"}])
    bad = _data(tmp_path / "bad.jsonl", [{"input": "What is 2 + 2?", "label": "y"}, {"input": None, "label": "z"}])
    flags = [good if f == "EVAL" else bad if f == "BAD" else f for f in flags]
    with pytest.raises(SystemExit):
        parse_local_args(base + flags)
    err = capsys.readouterr().err
    assert message in err, err
    if "BAD" in flags or bad in flags:
        assert "bad.jsonl:2:" in err and "is null" in err


def test_eval_flags_accepted(tmp_path, base):
    evaluation = _data(tmp_path / "eval.jsonl", [{"input": "What is 2 + 2?", "label": "y"}])
    args = parse_local_args(base + ["--eval.dataset", evaluation, "--eval.temperature", "0",
                                    "--eval.n_samples_per_prompt", "1", "--local.max_steps", "0"])
    assert args.eval.dataset == evaluation and args.local.max_steps == 0


# -- a real run ----------------------------------------------------------------------------------------------------
REWARD = textwrap.dedent('''
    import torch

    def reward_func(queries, prompts, labels):
        out = [1.0 if q[len(p):][:1].isdigit() else 0.0 for q, p in zip(queries, prompts)]
        t = torch.tensor(out)
        return {"rewards": t, "scores": t, "extra_logs": {}}
''')


def _greedy_accuracy(model_dir, prompts, max_new_tokens):
    """Greedy decoding with transformers, scored with the reward's rule, written here without the trainer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    correct = 0
    for prompt in prompts:
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_token_id,
                                 pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        new = out[0, len(ids):].tolist()
        if tokenizer.eos_token_id in new:
            new = new[: new.index(tokenizer.eos_token_id) + 1]
        text = tokenizer.decode(ids + new, skip_special_tokens=False)
        correct += text[len(prompt):][:1].isdigit()
    return correct / len(prompts)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_run_evaluates_before_every_k_steps_and_at_the_end(tmp_path, tiny_llama_path, ray_local):
    (tmp_path / "reward.py").write_text(REWARD)
    train = _data(tmp_path / "train.jsonl", [{"input": f"Say a number {i}:", "label": "d"} for i in range(32)])
    prompts = [f"Give a number {i}:" for i in range(12)]
    evaluation = _data(tmp_path / "eval.jsonl", [{"input": p, "label": "d", "datasource": f"src{i % 2}"}
                                                 for i, p in enumerate(prompts)])
    out = tmp_path / "run"
    argv = ["--actor.model_name_or_path", tiny_llama_path, "--data.prompt_dataset", train, "--data.label_key", "label",
            "--reward.remote_url", str(tmp_path / "reward.py"), "--algo.advantage.estimator", "group_norm",
            "--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", "4", "--rollout.max_new_tokens", "3",
            "--data.max_len", "64", "--actor.adam.lr", "1e-2", "--local.engine", "hf", "--local.max_steps", "3",
            "--local.output_dir", str(out), "--ckpt.save_steps", "-1", "--eval.dataset", evaluation,
            "--eval.steps", "2", "--eval.temperature", "0", "--eval.n_samples_per_prompt", "1",
            "--logger.tensorboard_dir", str(tmp_path / "tb")]
    run(parse_local_args(argv))
    rows = {r["step"]: r for r in read_metrics(str(out))}
    assert sorted(rows) == [0, 1, 2, 3]
    assert [s for s, r in rows.items() if "eval/accuracy" in r] == [0, 2, 3]  # before, every 2nd step, the last
    assert "reward_mean" not in rows[0] and rows[0]["generated_tokens_total"] == 0
    for step in (0, 2, 3):
        assert rows[step]["eval/problems"] == 12 and rows[step]["eval/temperature"] == 0
        # greedy, one sample per problem: upstream's per-source pass1 averages to the overall accuracy
        per_source = (rows[step]["eval/src0_pass1"] + rows[step]["eval/src1_pass1"]) / 2
        assert per_source == pytest.approx(rows[step]["eval/accuracy"])
    assert rows[3]["eval/accuracy"] == pytest.approx(_greedy_accuracy(str(out / "ckpt" / "latest" / "model"),
                                                                      prompts, 3))
    assert rows[0]["eval/accuracy"] == pytest.approx(_greedy_accuracy(tiny_llama_path, prompts, 3))
    assert (out / "heldout.png").stat().st_size > 0

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb" / "run"))
    events.Reload()
    logged = [(e.step, e.value) for e in events.Scalars("eval/accuracy")]
    assert logged == [(s, pytest.approx(rows[s]["eval/accuracy"])) for s in (0, 2, 3)]

    # continued to step 4 from the checkpoint of step 3: no second evaluation before training, step 4 evaluated
    argv[argv.index("--local.max_steps") + 1] = "4"
    run(parse_local_args(argv + ["--ckpt.load_enable"]))
    raw = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert raw == [0, 1, 2, 3, 4]
    resumed = {r["step"]: r for r in read_metrics(str(out))}
    assert [s for s, r in resumed.items() if "eval/accuracy" in r] == [0, 2, 3, 4]
    assert resumed[3] == rows[3]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_token_budget_stops_the_run_and_evaluates_its_last_step(tmp_path, tiny_llama_path, ray_local):
    (tmp_path / "reward.py").write_text(REWARD)
    train = _data(tmp_path / "train.jsonl", [{"input": f"Say a number {i}:", "label": "d"} for i in range(32)])
    evaluation = _data(tmp_path / "eval.jsonl", [{"input": f"Give a number {i}:", "label": "d"} for i in range(4)])
    out = tmp_path / "run"
    budget = 100  # 16 samples of at most 3 tokens per step: at most 48 tokens a step, so at least 3 steps
    run(parse_local_args([
        "--actor.model_name_or_path", tiny_llama_path, "--data.prompt_dataset", train, "--data.label_key", "label",
        "--reward.remote_url", str(tmp_path / "reward.py"), "--algo.advantage.estimator", "group_norm",
        "--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", "4", "--rollout.max_new_tokens", "3",
        "--data.max_len", "64", "--local.engine", "hf", "--local.max_steps", "50", "--local.output_dir", str(out),
        "--ckpt.save_steps", "-1", "--eval.dataset", evaluation, "--eval.temperature", "1.0",
        "--eval.n_samples_per_prompt", "2", "--local.max_generated_tokens", str(budget),
        "--local.eval_tokens", "40"]))
    rows = read_metrics(str(out))
    totals = [r["generated_tokens_total"] for r in rows]
    assert totals[-1] >= budget and totals[-2] < budget and len(rows) >= 4, totals
    assert totals[1:] == pytest.approx(list(itertools.accumulate(r["generated_tokens"] for r in rows[1:])))
    # evaluated: before training, the steps whose total first reaches 40 and 80, and the last step
    crossing = [next(r["step"] for r in rows if r["generated_tokens_total"] >= mark) for mark in (40, 80)]
    assert [r["step"] for r in rows if "eval/accuracy" in r] == sorted({0, *crossing, rows[-1]["step"]})
    assert rows[-1]["eval/samples_per_problem"] == 2 and "eval/pass_at_2" in rows[-1]
    assert json.loads((out / "ckpt" / "latest" / "trainer_state.json").read_text())["global_step"] == rows[-1]["step"]
