"""The generator's side of the step ledger, through the real `RoundsSamplesGenerator.generate_samples` with fake
engines (no Ray, no vLLM: tests/test_trainer_side_costs.py's `FakeRay`, tests/test_trained_batch_record.py's engine,
whose answer to the j-th request for a prompt depends only on (prompt, j), rewards of every kind).

For each strategy (fixed n, Seq with dynamic filtering and --ada.unresolved drop, Est with its short-step cut,
--ada.cancel, the history's skip, GRESO's skip) over three passes of a data set of 11 prompts (one of them twice),
in steps of 4 prompts and short steps cut to 8 samples (nothing divides evenly): every call's prompt and sample
identities are checked by the generator itself (a violation raises), every step's terms are logged beside its
samples and balance, and every epoch's coverage is checked with 0 unaccounted. One negative control per identity
shows that its check fires: a drawn prompt that never gets a pool (prompts), a kept sample taken out of its group
(samples), a loader restarted mid-epoch (coverage: a prompt drawn twice in one epoch, as an oversampling generator
that restarts an exhausted loader would). Upstream's dynamic-filtering report (accepted groups beyond the step
lost): with a generation batch twice the step, the groups upstream's buffer keeps are carried out and trained
in the next step, none lost.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from siblings import load

from openrlhf_ada.launcher import parse_args
from openrlhf_ada.trainer import ledger
from openrlhf_ada.trainer.ledger import LedgerError
from openrlhf_ada.trainer.ppo_utils import round_loop
from openrlhf_ada.trainer.ppo_utils.samples_generator import RoundsSamplesGenerator

costs = load("test_trainer_side_costs.py")
record = load("test_trained_batch_record.py")

N, BATCH, UNIT, EPOCHS = 4, 4, 8, 3
#: 11 prompts, "prompt 3" twice: no batch size divides it
PROMPTS = [f"prompt {i}" for i in range(10)] + ["prompt 3"]
GEN = record.GEN
SEQ = ["--ada.enable", "--ada.round_size", "4", "--ada.max_rounds", "3"]

CASES = {
    "fixed_n": [],
    "seq_filter_drop": [*SEQ, "--ada.mode", "pos", "--ada.unresolved", "drop",
                        "--algo.dynamic_filtering_enable"],
    "est_cut": ["--ada.enable", "--ada.strategy", "est", "--ada.est_preset", "paper"],
    "seq_cancel": [*SEQ, "--ada.mode", "pos", "--ada.cancel"],
    "seq_cancel_sync": [*SEQ, "--ada.mode", "pos", "--ada.cancel", "--ada.schedule", "sync"],
    "seq_history_skip": [*SEQ, "--ada.mode", "pos", "--ada.history", "--ada.history_skip", "1.0"],
    "greso": ["--ada.skip", "greso"],
}


fake_ray = record.fake_ray  # the round loop's and upstream's `ray`: references ready at once


@pytest.fixture
def epochs_checked(monkeypatch):
    """Every epoch coverage the generator checks: (epoch, metrics)."""
    seen = []
    real = ledger.check_epoch

    def spy(epoch, *args, **kwargs):
        metrics = real(epoch, *args, **kwargs)
        seen.append((epoch, metrics))
        return metrics

    monkeypatch.setattr(ledger, "check_epoch", spy)
    return seen


def make_generator(flags, prompts=PROMPTS, extra=()):
    args = parse_args([
        "--actor.model_name_or_path", "m", "--reward.remote_url", "http://localhost:5000/get_reward",
        "--algo.advantage.estimator", "dr_grpo", "--rollout.n_samples_per_prompt", str(N),
        "--rollout.batch_size", str(BATCH), "--actor.num_gpus_per_node", "1", "--train.seed", "7", *flags, *extra,
    ])
    loader = [([i], [p], [f"label {i}"], [None]) for i, p in enumerate(prompts)]
    gen = RoundsSamplesGenerator(strategy=SimpleNamespace(args=args), prompts_dataloader=loader,
                                 eval_dataloader=None, tokenizer=costs.CountingTokenizer(),
                                 vllm_engines=[record.Engine()])
    gen.batch_unit = UNIT  # a short step holds whole 8-sample train batches: its cut leaves groups over
    return gen


def balanced(metrics: dict) -> None:
    p = {t: metrics[ledger.prompt_metric(t)] for t in (*ledger.PROMPT_IN, *ledger.PROMPT_OUT)}
    s = {t: metrics[ledger.sample_metric(t)] for t in (*ledger.SAMPLE_IN, *ledger.SAMPLE_OUT)}
    assert p["drawn"] + p["carried_in"] == sum(p[t] for t in ledger.PROMPT_OUT), p
    assert s["generated"] + s["carried_in"] == sum(s[t] for t in ledger.SAMPLE_OUT), s


def run_epochs(gen, epochs=EPOCHS, max_calls=60):
    """Steps until `epochs` passes are done, and the next pass's first step (which trains the groups the last short
    step carried, closing the last epoch): [(samples, ledger)] of the steps that returned samples."""
    steps, done = [], False
    for _ in range(max_calls):
        samples, _, _, exhausted = gen.generate_samples(**GEN)
        if samples:
            steps.append((samples, dict(samples.ledger)))
            if done:
                break
        done = done or (exhausted and gen.epoch >= epochs - 1)
    return steps


@pytest.mark.parametrize("case", list(CASES))
def test_every_step_balances_and_every_epoch_is_covered(case, fake_ray, epochs_checked):
    gen = make_generator(CASES[case])
    steps = run_epochs(gen)
    assert steps
    totals = {}
    for samples, metrics in steps:
        balanced(metrics)
        assert metrics[ledger.sample_metric("trained")] == len(samples)
        for key, value in metrics.items():
            totals[key] = totals.get(key, 0.0) + value
    assert [e for e, _ in epochs_checked] == list(range(EPOCHS)), epochs_checked
    for epoch, metrics in epochs_checked:
        assert metrics[ledger.EPOCH_UNACCOUNTED] == 0.0
        assert metrics["ledger/epoch_prompts_drawn"] == len(PROMPTS), (epoch, metrics)
    # each case exercises the paths it names
    P = lambda term: totals.get(ledger.prompt_metric(term), 0.0)  # noqa: E731
    assert EPOCHS * len(PROMPTS) < P("drawn") <= (EPOCHS + 1) * len(PROMPTS)
    if case == "est_cut":
        assert P("cut") > 0 and P("carried_out") == 0
    elif case not in ("seq_filter_drop",):
        assert P("carried_out") > 0 and P("cut") == 0
    if case == "seq_filter_drop":
        assert P("filtered") > 0 and P("dropped") > 0
    if case.startswith("seq_cancel"):
        assert totals[ledger.SAMPLES_CANCELLED] > 0 or totals[ledger.sample_metric("released")] > 0
    if case in ("seq_history_skip", "greso"):
        assert P("skipped") > 0


def test_upstreams_buffer_of_accepted_groups_beyond_the_step_loses_none(fake_ray, epochs_checked):
    """Seq with dynamic filtering and a generation batch of twice the step: the groups accepted beyond the step wait
    in upstream's buffer (carried out), are trained in the next step (carried in), and every epoch is covered."""
    gen = make_generator(CASES["seq_filter_drop"], extra=["--rollout.vllm_generate_batch_size", str(2 * BATCH),
                                                               "--train.async_enable"])
    steps = run_epochs(gen)
    carried = [m[ledger.prompt_metric("carried_out")] for _, m in steps]
    assert any(c > 0 for c in carried), carried
    for _, metrics in steps:
        balanced(metrics)
    assert [(e, m[ledger.EPOCH_UNACCOUNTED]) for e, m in epochs_checked] == [(e, 0.0) for e in range(EPOCHS)]


def test_a_prompt_lost_between_draw_and_pool_stops_the_step(fake_ray, monkeypatch):
    real = round_loop.RoundStep.open_pools
    monkeypatch.setattr(round_loop.RoundStep, "open_pools", lambda self, drawn: real(self, drawn[:-1]))
    gen = make_generator(CASES["seq_cancel"])
    with pytest.raises(LedgerError, match=r"step 1: the prompt ledger does not balance: drawn \+ carried_in = 4 but "
                                          r".* = 3 .*ledger/prompts_drawn = 4.*: 1 prompt unaccounted for"):
        gen.generate_samples(**GEN)


def test_a_kept_sample_lost_from_its_group_stops_the_step(fake_ray, monkeypatch):
    real = round_loop.RoundStep.settle

    def settle(self, item):
        out = real(self, item)
        if self.accepted.get(item.uid) and not getattr(self, "_lost_one", False):
            self.accepted[item.uid].pop()
            self._lost_one = True
        return out

    monkeypatch.setattr(round_loop.RoundStep, "settle", settle)
    gen = make_generator(CASES["fixed_n"])
    with pytest.raises(LedgerError, match=r"step 1: the sample ledger does not balance: generated \+ carried_in = 16 "
                                          r"but .* = 15 .*: 1 sample unaccounted for"):
        gen.generate_samples(**GEN)


def test_a_loader_restarted_mid_epoch_is_caught_by_the_epochs_coverage(fake_ray, monkeypatch):
    """An oversampling generator that restarts an exhausted (or any) loader inside an epoch draws prompts twice in
    that epoch: the epoch's coverage counts them against the data and stops the run at the epoch's end."""
    gen = make_generator(CASES["fixed_n"])
    gen.generate_samples(**GEN)
    gen._dataloader_iter = iter(gen.prompts_dataloader)  # restarted, the epoch not reopened
    with pytest.raises(LedgerError, match=r"epoch 0: the prompt coverage does not balance: 4 prompt\(s\) .*"
                                          r"ledger/epoch_prompts_drawn = 15"):
        run_epochs(gen, epochs=1)


@pytest.mark.parametrize("last_pass", [0, None], ids=["run_ends", "run_goes_on"])
def test_what_the_runs_last_step_holds_back_is_named_not_carried(last_pass, fake_ray, epochs_checked, caplog):
    """Fixed n, one pass of 11 prompts in steps of 4: 4, 4, then 3 prompts (12 samples), cut to 8 (2 groups) with
    one group of 4 samples held back. When that pass ends the run (the cluster trainers: --train.num_episodes 1), the
    group is left at the end, named in the ledger and a warning, and the epoch's coverage closes in the same call;
    when the run goes on (train_local, or a later episode), it is carried out and the coverage waits for it."""
    gen = make_generator(CASES["fixed_n"])
    gen.last_pass = last_pass
    ledgers = []
    exhausted = False
    while not exhausted:
        samples, _, _, exhausted = gen.generate_samples(**GEN)
        ledgers.append(dict(samples.ledger))
    last = ledgers[-1]
    balanced(last)
    assert [m[ledger.sample_metric("trained")] for m in ledgers] == [16.0, 16.0, 8.0]
    if last_pass == 0:
        assert last[ledger.prompt_metric("left_at_end")] == 1.0 and last[ledger.sample_metric("left_at_end")] == 4.0
        assert last[ledger.prompt_metric("carried_out")] == 0.0 and gen._carry == []
        assert [e for e, _ in epochs_checked] == [0]
        assert last["ledger/epoch_prompts_left_at_end"] == 1.0 and last[ledger.EPOCH_UNACCOUNTED] == 0.0
        assert last["ledger/epoch_prompts_trained"] == 10.0
        assert "1 prompt group(s) (4 samples) generated and never trained" in caplog.text
    else:
        assert last[ledger.prompt_metric("left_at_end")] == 0.0 and last[ledger.prompt_metric("carried_out")] == 1.0
        assert len(gen._carry) == 4 and epochs_checked == []
        assert "never trained" not in caplog.text
