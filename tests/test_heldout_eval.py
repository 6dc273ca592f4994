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

from openrlhf_ada.args import EvalConfig, eval_config
from openrlhf_ada.cli.train_local import parse_local_args, run
from openrlhf_ada.trainer.heldout import EvalLoader, avg_at_k_metrics, describe, heldout_metrics
from openrlhf_ada.trainer.metrics_log import read_metrics

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


def test_standard_errors_by_hand():
    """The by-hand example above: per-problem shares 0.5, 0, 1 (mean 0.5, sample sd 0.5): SE 0.5 / sqrt(3). Greedy, 4
    problems, 3 right: the binomial SE with the n - 1 correction, sqrt(0.75 x 0.25 / 3) = 0.25."""
    loader = EvalLoader(_Dataset([("a", f"p{i}", "", None) for i in range(4)]))
    samples = [_sample("p1", 1, 1), _sample("p1", 0, 0), _sample("p2", 0, 0), _sample("p2", 0, 0),
               _sample("p3", 1, 1), _sample("p3", 1, 1)]
    m = heldout_metrics(samples, 2, 0.5, loader, temperature=0.7)
    assert m["eval/accuracy_se"] == pytest.approx(0.5 / math.sqrt(3))
    greedy = heldout_metrics([_sample(f"p{i}", r, r) for i, r in enumerate((1, 1, 0, 1))], 1, 0.5, loader,
                             temperature=0.0)
    assert greedy["eval/accuracy"] == pytest.approx(0.75)
    assert greedy["eval/accuracy_se"] == pytest.approx(math.sqrt(0.75 * 0.25 / 3)) == pytest.approx(0.25)
    assert "(SE 0.250)" in describe(greedy)
    one = heldout_metrics([_sample("p0", 1, 1)], 1, 0.5, loader, temperature=0.0)
    assert math.isnan(one["eval/accuracy_se"])  # one problem: no spread to estimate


def test_avg_at_k_by_hand():
    """3 problems x 4 samples with 4, 2 and 0 correct (a score equal to the threshold is wrong; no score: the
    reward): shares 1, 0.5, 0; avg@4 = 0.5; sample sd 0.5, SE 0.5 / sqrt(3); one failed prompt counted."""
    samples = ([_sample("p0", 1, 1)] * 4 + [_sample("p1", 1, 1), _sample("p1", 0, 0.5), _sample("p1", 1.0),
                                             _sample("p1", 0.0)] + [_sample("p2", 0, 0)] * 4)
    m = avg_at_k_metrics(samples, 4, 0.5, temperature=0.8, failures={"eval_failed_prompts": 1.0})
    assert m["eval/avg_at_k"] == pytest.approx(0.5)
    assert m["eval/avg_at_k_se"] == pytest.approx(0.5 / math.sqrt(3))
    assert m["eval/avg_k"] == 4 and m["eval/avg_temperature"] == 0.8 and m["eval/avg_problems"] == 3
    assert m["eval/avg_failed_prompts"] == 1.0
    loader = EvalLoader(_Dataset([("a", "p0", "", None)]))
    both = {**heldout_metrics([_sample("p0", 1, 1)], 1, 0.5, loader, temperature=0.0), **m}
    assert "avg@4 0.500 (SE 0.289) at temperature 0.8" in describe(both)
    with pytest.raises(ValueError, match="whole groups of 4"):
        avg_at_k_metrics(samples[:5], 4, 0.5, temperature=1.0)


def test_eval_config_defaults_off_and_checks():
    """avg@k is off unless asked for; k < 0 and a temperature <= 0 are refused (greedy is --eval.temperature)."""
    assert EvalConfig().avg_k == 0 and eval_config(SimpleNamespace()) == EvalConfig()
    assert eval_config(SimpleNamespace(eval=SimpleNamespace(avg_k=8, avg_temperature=0.6, avg_seed=3))) == \
        EvalConfig(avg_k=8, avg_temperature=0.6, avg_seed=3)
    with pytest.raises(ValueError, match="eval.avg_k=-1"):
        EvalConfig(avg_k=-1)
    for t in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="eval.avg_temperature"):
            EvalConfig(avg_k=4, avg_temperature=t)


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
    (["--eval.avg_k", "4"], "--eval.avg_k 4 without --eval.dataset"),
    (["--eval.dataset", "EVAL", "--eval.avg_k", "-2"], "--eval.avg_k=-2"),
    (["--eval.dataset", "EVAL", "--eval.avg_k", "4", "--eval.avg_temperature", "0"], "--eval.avg_temperature=0.0"),
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


@pytest.mark.parametrize("flags,message", [
    (["--actor.lr_scheduler", "reduce_lr_on_plateau"], "--actor.lr_scheduler 'reduce_lr_on_plateau'"),
    (["--actor.lr_scheduler", "cosine_schedule"], "--actor.lr_scheduler 'cosine_schedule'"),
    (["--actor.lr_warmup_ratio", "1.5"], "--actor.lr_warmup_ratio=1.5"),
    (["--actor.min_lr_ratio", "-0.1"], "--actor.min_lr_ratio=-0.1"),
])
def test_lr_schedule_flags_refused_before_start(base, capsys, flags, message):
    with pytest.raises(SystemExit):
        parse_local_args(base + flags)
    assert message in capsys.readouterr().err


def test_every_lr_schedule_train_local_accepts_builds_and_the_others_cannot():
    """train_local's list of --actor.lr_scheduler values against transformers itself: each builds and steps the way
    the trainer uses it (openrlhf_ada.trainer.local_trainer.lr_scheduler); the refused ones fail there."""
    from types import SimpleNamespace

    import torch
    from transformers import SchedulerType

    from openrlhf_ada.compatibility import LR_SCHEDULERS
    from openrlhf_ada.trainer.local_trainer import lr_scheduler

    for name in [t.value for t in SchedulerType]:
        optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        args = SimpleNamespace(actor=SimpleNamespace(lr_scheduler=name, lr_warmup_ratio=0.25, min_lr_ratio=0.1))
        try:
            scheduler = lr_scheduler(args, optimizer, 8)
            for _ in range(8):
                optimizer.step()
                scheduler.step()
            works = True
        except TypeError:
            works = False
        assert works == (name in LR_SCHEDULERS), name


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
        "--local.eval_tokens", "40", "--local.eval_at_tokens", "70", "--local.skip_base_eval"]))
    rows = read_metrics(str(out))
    totals = [r["generated_tokens_total"] for r in rows]
    assert rows[0]["step"] == 1  # --local.skip_base_eval: no row before training
    assert totals[-1] >= budget and totals[-2] < budget and len(rows) >= 3, totals
    assert totals == pytest.approx(list(itertools.accumulate(r["generated_tokens"] for r in rows)))
    # evaluated: the steps whose total first reaches 40, 70 (--local.eval_at_tokens, once) and 80, and the last step
    crossing = [next(r["step"] for r in rows if r["generated_tokens_total"] >= mark) for mark in (40, 70, 80)]
    assert [r["step"] for r in rows if "eval/accuracy" in r] == sorted({*crossing, rows[-1]["step"]})
    assert rows[-1]["eval/samples_per_problem"] == 2 and "eval/pass_at_2" in rows[-1]
    assert json.loads((out / "ckpt" / "latest" / "trainer_state.json").read_text())["global_step"] == rows[-1]["step"]


# -- the avg@k samples' seed, the held-out problems, the run's config ---------------------------------------------
def test_hf_engine_avg_seed_replaces_the_training_seed(tiny_llama_path):
    """The transformers engine draws the avg@k samples from --eval.avg_seed: engines started with different
    training seeds draw the same tokens after reseed(-1, avg_seed), different ones with their own seeds, and the
    next training step (reseed without a seed) is back on the engine's own seed."""
    import asyncio

    from openrlhf_ada.trainer.ray.hf_engine import HFRolloutActor

    gym = os.path.join(REPO, "openrlhf_ada", "rewards", "toy.py")
    engines = [HFRolloutActor.__ray_actor_class__(tiny_llama_path, remote_rm_url=gym, seed=seed) for seed in (1, 2)]
    params = SimpleNamespace(temperature=1.0, top_p=1.0, top_k=-1, max_tokens=8, min_tokens=0)

    def draw(engine, *reseed):
        async def go():
            await engine.reseed(*reseed)
            return [(await engine.generate([5, 6, 7], params)).outputs[0].token_ids for _ in range(3)]
        return asyncio.run(go())

    shared = [draw(e, -1, 7) for e in engines]
    assert shared[0] == shared[1]
    assert len({tuple(t) for t in shared[0]}) > 1  # the k-th sample of a prompt has a seed of its own
    assert draw(engines[0], -1, 8) != shared[0]
    own = [draw(e, -1) for e in engines]
    assert own[0] != own[1]
    assert draw(engines[0], 3) == draw(engines[0], 3) != draw(engines[1], 3)  # training steps: the engine's seed


def test_heldout_problems_do_not_depend_on_the_run(tmp_path, tiny_llama_path):
    """The held-out problems are the eval file's rows in order, whatever the training seed, the algorithm or the
    training data: runs of every setting and seed are evaluated on the same problems (same digest in config.json),
    and compare refuses runs evaluated on different ones."""
    from transformers import AutoTokenizer

    from openrlhf_ada.data.loading import load_prompts, problems_digest
    from openrlhf_ada.trainer.local_setup import write_run_config
    from openrlhf_ada.trainer.local_trainer import LocalStrategy

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_path)
    rows = [{"input": f"Give a number {i}:", "label": str(i)} for i in range(9)]
    evaluation = _data(tmp_path / "eval.jsonl", rows)
    other = _data(tmp_path / "other.jsonl", rows[::-1])
    loaded = {}
    for name, extra in (("grpo1", ["--train.seed", "1"]), ("grpo2", ["--train.seed", "2"]),
                        ("ada3", ["--train.seed", "3", "--ada.enable", "--rollout.n_samples_per_prompt", "4"])):
        train = _data(tmp_path / f"train_{name}.jsonl", [{"input": f"Say {name} {i}:", "label": "x"} for i in range(5)])
        args = parse_local_args(["--actor.model_name_or_path", tiny_llama_path, "--data.prompt_dataset", train,
                                 "--data.label_key", "label", "--reward.remote_url", GYM,
                                 "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "2",
                                 "--local.output_dir", str(tmp_path / name), "--eval.dataset", evaluation,
                                 "--eval.avg_k", "4", *extra])
        dataset = load_prompts(args, LocalStrategy(args), tokenizer, evaluation=True)
        loaded[name] = (dataset.prompts, dataset.labels)
        write_run_config(args, str(tmp_path / name), dataset)
        (tmp_path / name / "metrics.jsonl").write_text(json.dumps({"step": 1, "eval/accuracy": 0.5}) + "\n")
    assert loaded["grpo1"] == loaded["grpo2"] == loaded["ada3"]
    assert loaded["grpo1"] == ([r["input"] for r in rows], [r["label"] for r in rows])  # file order
    configs = {name: json.loads((tmp_path / name / "config.json").read_text()) for name in loaded}
    assert {c["eval.problems_sha256"] for c in configs.values()} == {configs["grpo1"]["eval.problems_sha256"]}
    assert configs["grpo2"]["train.seed"] == 2 and configs["ada3"]["ada.enable"] is True
    assert configs["ada3"]["eval.avg_k"] == 4 and configs["grpo1"]["eval.problems"] == 9

    # compare reads the config.json of a metrics.jsonl run: grouped by a flag, paired by its train.seed
    from openrlhf_ada.analysis import compare, compare_settings

    runs = compare.load_runs([str(tmp_path / n) for n in loaded])
    assert compare.saved_config(runs[2])[0]["ada.enable"] is True
    options = compare_settings.make_options(group_by="ada.enable", name_pattern=None, setting=(),
                                            seed_pattern=compare.DEFAULT_SEED_PATTERN, reference=None, interval="t",
                                            resamples=10, bootstrap_seed=0, grid_points=5, metrics=None)
    settings = compare_settings.build_settings(runs, options)
    assert [(s.name, s.seeds) for s in settings] == [("ada.enable=false", (1, 2)), ("ada.enable=true", (3,))]

    # another order of the same rows: other problems for the paired comparison, refused
    args = parse_local_args(["--actor.model_name_or_path", tiny_llama_path, "--data.prompt_dataset", evaluation,
                             "--data.label_key", "label", "--reward.remote_url", GYM, "--algo.advantage.estimator",
                             "group_norm", "--rollout.n_samples_per_prompt", "2", "--local.output_dir",
                             str(tmp_path / "grpo4"), "--eval.dataset", other, "--train.seed", "4"])
    reordered = load_prompts(args, LocalStrategy(args), tokenizer, evaluation=True)
    assert problems_digest(reordered) != configs["grpo1"]["eval.problems_sha256"]
    write_run_config(args, str(tmp_path / "grpo4"), reordered)
    (tmp_path / "grpo4" / "metrics.jsonl").write_text(json.dumps({"step": 1, "eval/accuracy": 0.5}) + "\n")
    runs = compare.load_runs([str(tmp_path / n) for n in ("grpo1", "grpo4")])
    with pytest.raises(compare.CompareError, match="different held-out problems"):
        compare_settings.build_settings(runs, options)


# -- the cluster trainer's evaluation ----------------------------------------------------------------------------------
class _ScriptedGenerator:
    """generate_eval_samples answering from a script keyed by (temperature, n): fixed samples per pass."""

    def __init__(self, script):
        self.script, self.calls = script, []

    def generate_eval_samples(self, **kwargs):
        self.calls.append((kwargs["temperature"], kwargs["n_samples_per_prompt"]))
        self.last_eval_failures = {"eval_failed_samples": 0.0, "eval_failed_prompts": 0.0}
        return self.script[(kwargs["temperature"], kwargs["n_samples_per_prompt"])]


def _cluster_args(avg_k):
    return SimpleNamespace(ada=SimpleNamespace(positive_threshold=0.5),
                           eval=SimpleNamespace(avg_k=avg_k, avg_temperature=0.9, avg_seed=0))


def test_cluster_evaluation_adds_accuracy_se_and_avg_at_k(tmp_path):
    """The cluster trainer's evaluation: upstream's keys as upstream names them (its best-checkpoint metric still
    picks upstream's pass1), plus accuracy, its SE and avg@k; the step's metrics.jsonl row gets them under
    train_local's names; wandb gets them through upstream's log_eval. Greedy: 2 problems, 1 right (accuracy 0.5,
    SE sqrt(0.25 / 1) = 0.5); avg@3 at T 0.9: 3 and 1 of 3 right (shares 1, 1/3: mean 2/3, sd sqrt(2/9), SE 1/3)."""
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    from openrlhf_ada.trainer.metrics_log import MetricsWriter
    from openrlhf_ada.trainer.ppo_trainer import AdoraPoolTrainerMixin, cluster_evaluation

    loader = [(["a"], ["p0"], [""], [None]), (["a"], ["p1"], [""], [None])]
    script = {(0.0, 1): [_sample("p0", 1, 1), _sample("p1", 0, 0)],
              (0.9, 3): [_sample("p0", 1, 1)] * 3 + [_sample("p1", 1, 1), _sample("p1", 0, 0), _sample("p1", 0, 0)]}
    generator = _ScriptedGenerator(script)
    kwargs = {"temperature": 0.0, "n_samples_per_prompt": 1, "max_new_tokens": 8}
    logs, named = cluster_evaluation(generator, loader, _cluster_args(3), kwargs)
    assert generator.calls == [(0.0, 1), (0.9, 3)]
    assert logs["eval_a_pass1"] == pytest.approx(0.5) and "eval_num_samples" in logs  # upstream's, unchanged
    assert logs["accuracy"] == pytest.approx(0.5) and logs["accuracy_se"] == pytest.approx(0.5)
    assert logs["avg_at_k"] == pytest.approx(2 / 3) and logs["avg_at_k_se"] == pytest.approx(1 / 3)
    assert named["eval/avg_at_k"] == logs["avg_at_k"] and named["eval/a_pass1"] == logs["eval_a_pass1"]
    assert "a_pass1" not in logs and "num_samples" not in logs  # upstream's keys are not repeated
    picker = SimpleNamespace(best_eval_metric_key="")
    assert BasePPOTrainer._detect_eval_metric_key(picker, logs) == "eval_a_pass1"

    off = _ScriptedGenerator(script)
    logs_off, named_off = cluster_evaluation(off, loader, _cluster_args(0), kwargs)
    assert off.calls == [(0.0, 1)] and "avg_at_k" not in logs_off and "eval/avg_at_k" not in named_off

    logged = []
    path = tmp_path / "metrics.jsonl"
    trainer = SimpleNamespace(samples_generator=_ScriptedGenerator(script), eval_dataloader=loader,
                              args=_cluster_args(3), tensorboard_logger=None,
                              wandb_logger=SimpleNamespace(log_eval=lambda step, row: logged.append((step, row))),
                              _metrics_writer=MetricsWriter(str(path)), _last_metrics_row=(4, {"reward_mean": 0.25}))
    trainer._metrics_writer.write(4, {"reward_mean": 0.25})
    returned = AdoraPoolTrainerMixin.evaluate(trainer, 4, **kwargs)
    trainer._metrics_writer.close()
    assert returned["avg_at_k"] == pytest.approx(2 / 3) and logged == [(4, returned)]
    (row,) = read_metrics(str(path))
    assert row["step"] == 4 and row["reward_mean"] == 0.25 and row["eval/avg_at_k"] == pytest.approx(2 / 3)
    assert row["eval/accuracy_se"] == pytest.approx(0.5) and row["timing/eval"] >= 0


LOGGING_REWARD = textwrap.dedent('''
    import json

    import torch

    def reward_func(queries, prompts, labels):
        out = []
        with open(LOG, "a") as f:
            for q, p, label in zip(queries, prompts, labels):
                response = q[len(p):]
                out.append(1.0 if response[:1] and ord(response[0]) % 2 == 0 else 0.0)
                f.write(json.dumps({"prompt": p, "response": response, "label": label, "reward": out[-1]}) + "\\n")
        t = torch.tensor(out)
        return {"rewards": t, "scores": t, "extra_logs": {}}
''')


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_avg_at_k_run_is_seeded_apart_from_the_training_seed(tmp_path, tiny_llama_path, ray_local):
    """Real runs (local Ray, the transformers engine, a tiny llama), one training step each, evaluated before it
    and after it: greedy and avg@4 at temperature 1. The reward file logs every sample it scores; avg@4 and its SE
    are recomputed here from the logged avg@4 pass (mean over problems of the share of rewarded samples; sample sd
    over sqrt(problems)). Before training the weights are the same, so runs with training seeds 1 and 2 draw the very
    same avg@4 samples (--eval.avg_seed), and another --eval.avg_seed draws others."""
    import statistics

    prompts = [f"Give a number {i}:" for i in range(10)]
    train = _data(tmp_path / "train.jsonl", [{"input": f"Say a number {i}:", "label": "train"} for i in range(16)])
    evaluation = _data(tmp_path / "eval.jsonl", [{"input": p, "label": "eval"} for p in prompts])
    k = 4

    def one_run(name, seed, avg_seed):
        log = tmp_path / f"{name}.rewards.jsonl"
        (tmp_path / f"{name}_reward.py").write_text(f"LOG = {str(log)!r}\n" + LOGGING_REWARD)
        out = tmp_path / name
        run(parse_local_args([
            "--actor.model_name_or_path", tiny_llama_path, "--data.prompt_dataset", train, "--data.label_key",
            "label", "--reward.remote_url", str(tmp_path / f"{name}_reward.py"), "--algo.advantage.estimator",
            "group_norm", "--rollout.n_samples_per_prompt", "2", "--rollout.batch_size", "4",
            "--rollout.max_new_tokens", "3", "--data.max_len", "64", "--actor.adam.lr", "1e-2", "--local.engine", "hf",
            "--local.max_steps", "1", "--local.output_dir", str(out), "--ckpt.save_steps", "-1",
            "--train.seed", str(seed), "--eval.dataset", evaluation, "--eval.temperature", "0",
            "--eval.n_samples_per_prompt", "1", "--eval.avg_k", str(k), "--eval.avg_temperature", "1.0",
            "--eval.avg_seed", str(avg_seed)]))
        scored = [json.loads(line) for line in log.read_text().splitlines()]
        evals = [r for r in scored if r["label"] == "eval"]
        per_eval = len(prompts) * (1 + k)  # each evaluation: the greedy pass, then the avg@k pass
        assert len(evals) == 2 * per_eval and sum(r["label"] == "train" for r in scored) == 4 * 2
        passes = [evals[i * per_eval + len(prompts) : (i + 1) * per_eval] for i in range(2)]
        return {r["step"]: r for r in read_metrics(str(out))}, passes, json.loads((out / "config.json").read_text())

    rows1, passes1, config1 = one_run("seed1", 1, 0)
    for step, samples in zip((0, 1), passes1):
        assert sorted(r["prompt"] for r in samples) == sorted(p for p in prompts for _ in range(k))
        shares = [sum(r["reward"] for r in samples if r["prompt"] == p) / k for p in prompts]
        assert rows1[step]["eval/avg_at_k"] == pytest.approx(sum(shares) / len(shares))
        assert rows1[step]["eval/avg_at_k_se"] == pytest.approx(statistics.stdev(shares) / math.sqrt(len(prompts)))
        assert rows1[step]["eval/avg_k"] == k and rows1[step]["eval/avg_problems"] == len(prompts)
        assert rows1[step]["eval/samples_per_problem"] == 1 and rows1[step]["eval/temperature"] == 0
        p = rows1[step]["eval/accuracy"]
        assert rows1[step]["eval/accuracy_se"] == pytest.approx(math.sqrt(p * (1 - p) / (len(prompts) - 1)))
    assert 0 < rows1[0]["eval/avg_at_k"] < 1  # the check above had both outcomes to count

    rows2, passes2, config2 = one_run("seed2", 2, 0)
    key = lambda r: (r["prompt"], r["response"])  # noqa: E731
    assert sorted(map(key, passes2[0])) == sorted(map(key, passes1[0]))  # same weights, same avg@k samples
    assert rows2[0]["eval/avg_at_k"] == rows1[0]["eval/avg_at_k"]
    assert config1["eval.problems_sha256"] == config2["eval.problems_sha256"]
    assert (config1["train.seed"], config2["train.seed"], config1["eval.avg_k"]) == (1, 2, k)

    _, passes3, _ = one_run("avgseed1", 1, 1)
    assert sorted(map(key, passes3[0])) != sorted(map(key, passes1[0]))


def test_eval_at_tokens_evaluates_once_where_the_run_first_reaches_the_count():
    """--local.eval_at_tokens B: the step whose running total goes from below B to B or more is evaluated, and no
    later one for it (worked by hand: steps of 40 tokens, B = 100: step 3, 80 -> 120)."""
    from openrlhf_ada.trainer.local_trainer import LocalConfig, LocalTrainer

    trainer = object.__new__(LocalTrainer)
    trainer.args = SimpleNamespace(eval=SimpleNamespace(steps=-1))
    trainer.config = LocalConfig(max_steps=10, eval_at_tokens=100.0)
    trainer._stop_signal = None
    evaluated = []
    for step in range(1, 10):
        trainer.global_step, trainer._tokens_before_step = step, 40.0 * (step - 1)
        trainer.generated_tokens_total = 40.0 * step
        if trainer.should_evaluate():
            evaluated.append(step)
    assert evaluated == [3]
    trainer.generated_tokens_total = trainer._tokens_before_step = 100.0  # exactly at B before the step: not again
    assert not trainer.should_evaluate()


def test_request_seeds_and_eval_at_tokens_flags_reach_the_config(tmp_path, tiny_llama_path, capsys):
    from openrlhf_ada.cli.train_local import parse_local_args
    from openrlhf_ada.trainer.local_setup import local_config

    (tmp_path / "reward.py").write_text(REWARD)
    rows = [{"input": f"Say a number {i}:", "label": "d"} for i in range(4)]
    train, evaluation = _data(tmp_path / "train.jsonl", rows), _data(tmp_path / "eval.jsonl", rows)
    base = ["--actor.model_name_or_path", tiny_llama_path, "--data.prompt_dataset", train, "--data.label_key", "label",
            "--reward.remote_url", str(tmp_path / "reward.py"), "--algo.advantage.estimator", "group_norm",
            "--rollout.n_samples_per_prompt", "2"]
    config = local_config(parse_local_args(base + ["--eval.dataset", evaluation, "--local.eval_at_tokens", "1500",
                                                   "--local.request_seeds"]))
    assert (config.eval_at_tokens, config.request_seeds) == (1500.0, True)
    assert local_config(parse_local_args(base)).request_seeds is False
    with pytest.raises(SystemExit):
        parse_local_args(base + ["--local.eval_at_tokens", "10"])
    assert "--local.eval_at_tokens without --eval.dataset" in capsys.readouterr().err
