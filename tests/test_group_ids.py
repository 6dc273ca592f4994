"""Groups are values: every training path stamps each trained sample with its group's id, and nothing after the
build asks which strategy sampled the groups.

The generator runs on the fixed engine of tests/test_trained_batch_record.py (no Ray, no vLLM); each case's groups
are checked against what the strategy keeps: n samples per prompt for fixed n and Seq, every sample with a reward
(its pool's count) for Est, one sample per prompt on upstream's path at n = 1.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from siblings import load
from transformers import AutoTokenizer

from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer.ppo_utils.batching import trained_group_sizes
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator

record = load("test_trained_batch_record.py")
structure = load("test_step_structure.py")
fake_ray = record.fake_ray
PACKAGE = Path(__file__).resolve().parent.parent / "openrlhf_ada"


def steps(flags, n, tokenizer, count=3):
    """`count` training steps of 4 prompts (8 prompts in all, so the third starts the next pass)."""
    args = parse_args([
        "--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward",
        "--rollout.n_samples_per_prompt", str(n), "--rollout.batch_size", "4", "--rollout.micro_batch_size", "2",
        "--rollout.max_new_tokens", "8", "--actor.num_gpus_per_node", "1", "--train.seed", "7",
        "--algo.advantage.estimator", "group_norm" if n > 1 else "reinforce", *flags,
    ])
    loader = [([i], [f"prompt {i}"], [f"label {i}"], [None]) for i in range(8)]
    gen = RoundsSamplesGenerator(strategy=SimpleNamespace(args=args), prompts_dataloader=loader, eval_dataloader=None,
                                 tokenizer=tokenizer, vllm_engines=[record.Engine()])
    out = []
    while len(out) < count:
        samples, *_ = gen.generate_samples(**record.GEN)
        if samples:
            out.append(samples)
    return out


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_path):
    return AutoTokenizer.from_pretrained(tiny_llama_path)


@pytest.mark.parametrize("name, flags, n", [
    ("fixed n", [], 4),
    ("seq", [*record.SEQ, "--ada.mode", "balance"], 4),
    ("est", [*record.EST, "--ada.est_preset", "authors"], 4),
    ("upstream", [], 1),
])
def test_every_path_stamps_each_sample_with_its_groups_id(name, flags, n, tokenizer, fake_ray):
    seen = set()
    for samples in steps(flags, n, tokenizer):
        ids = [int(e.info["ada_group"]) for e in samples]
        runs = [ids[0]] + [b for a, b in zip(ids, ids[1:]) if b != a]
        assert len(runs) == len(set(runs)), ids  # each group's samples contiguous
        assert not seen & set(runs), "a group id was reused by a later step"
        seen |= set(runs)
        sizes = trained_group_sizes(samples)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        if name == "est":  # every sample with a reward is trained: the group is the whole pool
            assert sizes == [int(samples[a].info["ada_pool_count"]) for a in starts]
        else:
            assert sizes == [n] * 4


#: The modules that act after a step is built: they read the groups from the samples, never the strategy.
AFTER_THE_BUILD = ["trainer/ppo_utils/experience_maker.py", "trainer/ppo_utils/batching.py",
                   "trainer/local_trainer.py", "trainer/ppo_trainer.py", "trainer/ppo_trainer_async.py"]
#: The modules that run a step: the strategy was chosen for them (trainer/ppo_utils/strategy.py).
RUN_THE_STEP = ["trainer/ppo_utils/samples_generator.py", "trainer/ppo_utils/round_loop.py",
                "trainer/ppo_utils/transport.py"]
STRATEGY_TEST = re.compile(r"""["']est["']|strategy\s*[!=]=|\.est\b""")
GROUP_GUESS = re.compile(r"""//\s*(n|[\w.]*\bn_samples_per_prompt)\b|\bn_samples_per_prompt\b.*//""")


@pytest.mark.parametrize("module", AFTER_THE_BUILD + RUN_THE_STEP)
def test_no_module_but_the_choice_asks_for_the_strategy(module):
    """No test of `--ada.strategy` outside strategy.py (and the strategies' own configs and steps)."""
    found = [line.strip() for line in structure.code_of(PACKAGE / module).splitlines() if STRATEGY_TEST.search(line)]
    assert not found, found


@pytest.mark.parametrize("module", AFTER_THE_BUILD)
def test_nothing_after_the_build_guesses_the_groups(module):
    """No group guessed as i // n where the groups are read: they are the samples' ids."""
    found = [line.strip() for line in structure.code_of(PACKAGE / module).splitlines() if GROUP_GUESS.search(line)]
    assert not found, found


def test_the_guards_find_what_they_are_for():
    """The patterns above catch what they are for."""
    for line in ('if ada.strategy == "est":', "est = config.strategy != 'seq'", "sizes = gen.last_sizes if self.est"):
        assert STRATEGY_TEST.search(line), line
    for line in ("group = torch.arange(k) // n", "groups = len(samples) // self.args.rollout.n_samples_per_prompt"):
        assert GROUP_GUESS.search(line), line
    assert not STRATEGY_TEST.search("sizes = trained_group_sizes(samples)")
    assert not GROUP_GUESS.search("sizes = trained_group_sizes(samples)")
