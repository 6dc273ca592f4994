"""The step ledger's sample identity (openrlhf_ada/trainer/ledger.py): samples handed to the trainer == samples the
actor ranks trained on.

- the check on hand-made counts: equal passes, one short stops naming the step, both terms and the ranks' counts;
- the rank-side count (`SampleCounter`): the rows of each micro-batch `training_step` trained, once per step when
  there are several epochs;
- the cluster trainer's check on a fake upstream: the ranks' counts become the two terms; a status without them (a
  policy actor that is not the project's) stops the step, a policy frozen for the critic's warm-up is said;
- what the identity is for: upstream's `balance_experiences` gives ranks unequal shares of a sample count that is not
  a multiple of the ranks (fewer batches than ranks when the count is below them), and upstream's replay buffer then
  trains on every rank only the whole --train.batch_size / ranks slices that the smallest share fills (its
  `setup_dynamic_batch`, run here on 2 real ranks of a gloo group): samples are lost without an error, and the
  ledger's check names them. The project's short-step cut (batching.short_step_unit) never hands it such a count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from openrlhf.trainer.ppo_utils.experience import Experience, balance_experiences

from openrlhf_ada.args import validate_sizes
from openrlhf_ada.trainer.ledger import (
    EPOCH_UNACCOUNTED,
    SAMPLES_TRAINED,
    SAMPLES_TRAINED_BY_RANKS,
    LedgerError,
    check_epoch,
    check_generated_samples,
    check_prompts,
    check_samples,
    count_samples,
    epoch_unaccounted,
    prompt_metric,
    rank_term,
    sample_metric,
)
from openrlhf_ada.trainer.ppo_utils.batching import short_step_unit, usable_samples
from openrlhf_ada.trainer.ray.ppo_actor import SampleCounter

ROOT = Path(__file__).resolve().parents[1]


# -- the check -------------------------------------------------------------------------------------------------------


def test_equal_terms_pass_and_become_the_step_metrics():
    assert check_samples(3, 32, 32, [16, 16]) == {SAMPLES_TRAINED: 32.0, SAMPLES_TRAINED_BY_RANKS: 32.0}
    assert check_samples(1, 0, 0) == {SAMPLES_TRAINED: 0.0, SAMPLES_TRAINED_BY_RANKS: 0.0}


def test_one_sample_short_stops_naming_the_step_both_terms_and_the_ranks():
    with pytest.raises(LedgerError) as caught:
        check_samples(7, 32, 31, [16, 15])
    message = str(caught.value)
    assert message.startswith("step 7: the sample ledger does not balance")
    assert f"{SAMPLES_TRAINED} = 32" in message and f"{SAMPLES_TRAINED_BY_RANKS} = 31" in message
    assert "(per rank: 16, 15)" in message and "1 sample(s) handed to the trainer were not trained on" in message
    with pytest.raises(LedgerError, match=r"step 2: .* = 8 .* = 9 .*trained 1 sample\(s\) more"):
        check_samples(2, 8, 9)


def test_per_rank_counts_that_do_not_add_up_are_a_programming_error():
    with pytest.raises(ValueError, match="do not sum"):
        check_samples(1, 8, 8, [4, 3])


def test_a_rank_counts_each_sample_once_per_step_whatever_the_epochs():
    assert rank_term([]) == 0  # no micro-batch trained at all
    assert rank_term([8, 8]) == 8  # two epochs over the same 8 samples
    assert rank_term([8, 7]) == 7  # a sample the second epoch left out is missing


def batch(rows: int, length: int = 3) -> Experience:
    return Experience(sequences=torch.zeros(rows, length, dtype=torch.long),
                      total_length=torch.full((rows,), float(length)), info={})


def test_the_counter_counts_the_rows_training_step_trained_per_epoch():
    """Two epochs of micro-batches of 2, 1 and 2 rows (upstream's ppo_train numbers each epoch's micro-batches from
    0); the trainer's own training_step is back afterwards."""

    class Trainer:
        def training_step(self, experience, kl_ctl, step, loss_batch_info=None):
            return {"num_samples": float(len(experience.sequences))}

    trainer = Trainer()
    with SampleCounter(trainer) as counter:
        for _ in range(2):
            for step, rows in enumerate([2, 1, 2]):
                assert trainer.training_step(batch(rows), 0.0, step, None) == {"num_samples": float(rows)}
    assert counter.epochs == [5, 5] and rank_term(counter.epochs) == 5
    assert "training_step" not in vars(trainer)
    assert count_samples([batch(2), batch(3)]) == 5


# -- upstream's balance_experiences and replay buffer on a count the ranks cannot split ------------------------------


def dp_args(ranks: int):
    return SimpleNamespace(actor=SimpleNamespace(num_nodes=1, num_gpus_per_node=ranks),
                           ds=SimpleNamespace(ring_attn_size=1, tensor_parallel_size=1))


def one_sample_experiences(count: int) -> list:
    """`count` one-sample experiences of distinct lengths (balance_experiences sorts by length)."""
    return [Experience(sequences=torch.full((1, 2), i), total_length=torch.tensor([float(10 + i)]), info={})
            for i in range(count)]


def test_balance_experiences_gives_ranks_unequal_shares_of_an_uneven_count():
    """5 one-sample experiences over 4 ranks: each goes to a batch (5 in, 5 out), but the shares are 2, 1, 1, 1;
    3 over 4 ranks make 3 batches of 1, fewer batches than ranks (upstream's async_run_method_batch then refuses:
    "Insufficient batch size")."""
    out = balance_experiences(one_sample_experiences(5), dp_args(4))
    assert [len(e.sequences) for e in out] == [2, 1, 1, 1] and count_samples(out) == 5
    out = balance_experiences(one_sample_experiences(3), dp_args(4))
    assert [len(e.sequences) for e in out] == [1, 1, 1]


# Upstream's NaiveReplayBuffer.setup_dynamic_batch on one rank of a 2-rank gloo group, then the micro-batches its
# DataLoader hands ppo_train (one list of buffer indices each): prints the samples the rank would train.
RANK_SCRIPT = textwrap.dedent("""
    import json, sys
    from types import SimpleNamespace
    import torch, torch.distributed as dist
    from openrlhf_ada.cpu.patches import CpuDevice
    torch.cuda.current_device = CpuDevice
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer

    rank, store, share, config = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    group = dist.group.WORLD

    def all_reduce(tensor, op="mean"):
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return tensor

    args = SimpleNamespace(
        train=SimpleNamespace(batch_size=config["train_batch"], max_tokens_per_gpu=64),
        rollout=SimpleNamespace(batch_size=config["rollout_batch"], n_samples_per_prompt=config["n"]),
        ds=SimpleNamespace(ring_attn_size=1, tensor_parallel_size=1))
    strategy = SimpleNamespace(args=args, all_reduce=all_reduce,
                               ds_device_mesh={"dp": SimpleNamespace(get_group=lambda: group)})
    buffer = NaiveReplayBuffer(1, packing_samples=True, dynamic_batch=True)
    for i in range(share):
        buffer.items.append(Experience(sequences=torch.ones(8, dtype=torch.long), action_mask=torch.ones(4),
                                       total_length=torch.tensor(8.0), info={}))
    buffer.setup_dynamic_batch(strategy)
    print(json.dumps(sum(len(buffer[i]) for i in range(len(buffer)))))
    dist.destroy_process_group()
""")


def trained_by_two_ranks(tmp_path: Path, shares: list, *, n: int, rollout_batch: int, train_batch: int) -> list:
    """The samples each of 2 ranks trains of its share (upstream's replay buffer with dynamic batching)."""
    store = tmp_path / "store"
    config = json.dumps({"n": n, "rollout_batch": rollout_batch, "train_batch": train_batch})
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(rank), str(store), str(share), config],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
             for rank, share in enumerate(shares)]
    outs = [proc.communicate(timeout=300) for proc in procs]
    for proc, (_, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-3000:]
    return [int(out.strip().splitlines()[-1]) for out, _ in outs]


@pytest.mark.slow  # fresh interpreters that import openrlhf: about 40 s
@pytest.mark.timeout(600)
def test_uneven_shares_lose_samples_in_upstreams_replay_buffer_and_the_ledger_names_them(tmp_path):
    """One run of 2 real ranks for two counts:

    - 5 samples (one step's worth: --rollout.batch_size 5, n 1, --train.batch_size 2, 1 sample a rank per slice):
      balance_experiences shares them 3 + 2; each rank trains min over ranks of (share // 1 slice) = 2 slices of 1,
      so 2 + 2 = 4 of the 5 are trained and no error is raised. The ledger's identity 5 != 4 stops the step;
    - 12 samples, a full step of --rollout.batch_size 3 x n 4 with --train.batch_size 8 (not a multiple of it):
      shares 6 + 6, slices of 4 a rank, 12 // 8 = 1 slice a step: 4 + 4 = 8 of 12 trained, every step (this the
      project does not refuse at start-up; the ledger stops such a run at its first step)."""
    shares = [len(e.sequences) for e in balance_experiences(one_sample_experiences(5), dp_args(2))]
    assert shares == [3, 2]
    trained = trained_by_two_ranks(tmp_path, shares, n=1, rollout_batch=5, train_batch=2)
    assert trained == [2, 2]
    with pytest.raises(LedgerError, match=r"step 1: .* = 5 .* = 4 .*\(per rank: 2, 2\): 1 sample"):
        check_samples(1, 5, sum(trained), trained)

    shares = [len(e.sequences) for e in balance_experiences(one_sample_experiences(12), dp_args(2))]
    assert shares == [6, 6]
    (tmp_path / "full").mkdir()
    trained = trained_by_two_ranks(tmp_path / "full", shares, n=4, rollout_batch=3, train_batch=8)
    assert trained == [4, 4]
    with pytest.raises(LedgerError, match=r"= 12 .* = 8 .*4 sample"):
        check_samples(1, 12, sum(trained), trained)


def cut_args(*, n, dp, train_batch, rollout_micro=4):
    return SimpleNamespace(
        rollout=SimpleNamespace(n_samples_per_prompt=n, micro_batch_size=rollout_micro),
        train=SimpleNamespace(batch_size=train_batch, dynamic_batch_enable=True),
        ds=SimpleNamespace(ring_attn_size=1, tensor_parallel_size=1),
        actor=SimpleNamespace(num_nodes=1, num_gpus_per_node=dp),
        critic=SimpleNamespace(model_name_or_path=None),
        algo=SimpleNamespace(kl=SimpleNamespace(init_coef=0.0)),
    )


@pytest.mark.parametrize("n, dp, train_batch", [
    (4, 2, 8), (4, 2, 16), (4, 4, 16), (4, 3, 12), (6, 4, 8), (1, 4, 4), (8, 8, 512), (5, 2, 10),
])
def test_the_short_step_cut_hands_balance_experiences_only_counts_every_rank_splits_into_whole_slices(
        n, dp, train_batch):
    """Every count a short step can reach (whole groups of n, up to four train batches), cut to whole
    short_step_unit's: a multiple of the ranks and of --train.batch_size, so balance_experiences shares it equally
    (at least one sample a rank, or nothing at all) and each share is whole train.batch_size / ranks slices: upstream's
    replay buffer leaves none of it untrained."""
    unit = short_step_unit(cut_args(n=n, dp=dp, train_batch=train_batch))
    for groups in range(0, 4 * train_batch // n + 2):
        kept = usable_samples([n] * groups, unit)  # the generator's cut, groups of n
        assert kept % dp == 0 and kept % train_batch == 0 and kept % n == 0, (groups, kept)
        if kept:
            shares = [len(e.sequences) for e in balance_experiences(one_sample_experiences(kept), dp_args(dp))]
            assert shares == [kept // dp] * dp, (groups, kept, shares)
            assert all(share % (train_batch // dp) == 0 for share in shares)


# -- the cluster trainer's check, on a fake upstream -----------------------------------------------------------------


def trainer_with_upstream_status(status: dict, *, freezing_steps: int = -1):
    """AdoraPoolTrainerMixin over an upstream whose ppo_train returns `status` (what the actor ranks' fit returned),
    after a step handed 16 samples."""
    from openrlhf_ada.trainer.ppo_trainer import AdoraPoolTrainerMixin

    class Upstream:
        def ppo_train(self, global_steps):
            return dict(status)

    class Trainer(AdoraPoolTrainerMixin, Upstream):
        pass

    trainer = Trainer()
    trainer.args = SimpleNamespace(critic=SimpleNamespace(freezing_steps=freezing_steps))
    trainer.actor_model_group = object()
    trainer._ledger_step, trainer._ledger_samples_trained = 3, 16
    return trainer


def test_the_cluster_trainer_checks_the_ranks_counts_and_refuses_a_step_without_them(monkeypatch):
    """The ranks' counts leave the status (they are not a metric) and become the two terms; a short rank stops the
    step; a status without counts (a policy actor that is not the project's) stops it too, unless the policy was
    frozen for the critic's warm-up (said in the log)."""
    from openrlhf_ada.trainer import ppo_trainer
    from openrlhf_ada.trainer.ledger import RANK_COUNTS

    status = trainer_with_upstream_status({"policy_loss": 0.5, RANK_COUNTS: [8, 8]}).ppo_train(2)
    assert status == {"policy_loss": 0.5, SAMPLES_TRAINED: 16.0, SAMPLES_TRAINED_BY_RANKS: 16.0}
    with pytest.raises(LedgerError, match=r"step 3: .* = 16 .* = 15 .*\(per rank: 8, 7\)"):
        trainer_with_upstream_status({RANK_COUNTS: [8, 7]}).ppo_train(2)
    with pytest.raises(LedgerError, match="step 3: the policy's ranks reported no count"):
        trainer_with_upstream_status({"policy_loss": 0.5}).ppo_train(2)
    warnings = []
    monkeypatch.setattr(ppo_trainer.logger, "warning", warnings.append)
    assert trainer_with_upstream_status({"critic_loss": 1.0}, freezing_steps=5).ppo_train(2) == {"critic_loss": 1.0}
    assert len(warnings) == 1 and "the policy is frozen (--critic.freezing_steps 5)" in warnings[0]


def dynamic_batch_args(*, n, rollout_batch, train_batch, dp):
    return SimpleNamespace(
        rollout=SimpleNamespace(n_samples_per_prompt=n, batch_size=rollout_batch, micro_batch_size=1),
        train=SimpleNamespace(batch_size=train_batch, micro_batch_size=1, dynamic_batch_enable=True),
        ds=SimpleNamespace(ring_attn_size=1, tensor_parallel_size=1),
        actor=SimpleNamespace(num_nodes=1, num_gpus_per_node=dp),
        data=SimpleNamespace(max_len=None), )


@pytest.mark.parametrize("n, rollout_batch, train_batch, dp, lost", [
    # a step of 12 over 2 ranks, slices of 8 / 2 = 4: one slice each, 4 of 12 never trained (the replay buffer above)
    (4, 3, 8, 2, 4),
    # 12 over 4 ranks, train batches of 6: slices of 6 // 4 = 1, at most 12 // 6 = 2 of them a rank: 8 trained
    (4, 3, 6, 4, 4),
    # 8 over 3 ranks (shares 3, 3, 2), slices of 8 // 3 = 2, one train batch a step: 6 trained
    (4, 2, 8, 3, 2),
])
def test_a_full_step_that_dynamic_batching_would_cut_is_refused_at_start_up(n, rollout_batch, train_batch, dp, lost):
    """What the ledger would stop at step 1 is refused before anything starts, with the samples a step would lose
    (worked by hand in each case's comment from the replay buffer's rule: min(step // train batch, smallest share //
    slice) slices of train batch // ranks samples a rank)."""
    args = dynamic_batch_args(n=n, rollout_batch=rollout_batch, train_batch=train_batch, dp=dp)
    with pytest.raises(ValueError, match=rf"so {lost} of every {n * rollout_batch} samples would never be trained"):
        validate_sizes(args)
    args.train.dynamic_batch_enable = False  # upstream's fixed micro-batches: not this rule
    validate_sizes(args)


@pytest.mark.parametrize("n, rollout_batch, train_batch, dp", [(4, 4, 8, 2), (4, 4, 16, 4), (8, 3, 24, 3)])
def test_a_full_step_of_whole_train_batches_passes(n, rollout_batch, train_batch, dp):
    validate_sizes(dynamic_batch_args(n=n, rollout_batch=rollout_batch, train_batch=train_batch, dp=dp))


# -- the generator's side: prompt and sample identities, epoch coverage -------------------------------------------------


def test_the_prompt_identity_on_hand_made_counts():
    counts = dict(drawn=11, carried_in=1, trained=7, skipped=2, filtered=1, failed=0, dropped=1, cut=0, carried_out=1)
    metrics = check_prompts(4, counts)
    assert metrics[prompt_metric("drawn")] == 11.0 and metrics[prompt_metric("carried_out")] == 1.0
    assert len(metrics) == 10  # every term, missing ones as 0
    assert check_prompts(1, {})[prompt_metric("cut")] == 0.0
    with pytest.raises(LedgerError) as caught:
        check_prompts(4, {**counts, "trained": 6})
    message = str(caught.value)
    assert message.startswith("step 4: the prompt ledger does not balance: drawn + carried_in = 12 but trained + "
                              "skipped + filtered + failed + dropped + cut + left_at_end + carried_out = 11")
    assert "ledger/prompts_trained = 6" in message and "1 prompt unaccounted for" in message
    with pytest.raises(LedgerError, match="1 prompt counted twice"):
        check_prompts(4, {**counts, "cut": 1})
    with pytest.raises(ValueError, match="unknown prompt ledger terms"):
        check_prompts(4, {"lost": 1})


def test_the_sample_identity_on_hand_made_counts():
    # Seq: 3 prompts, 20 generated, 12 kept of which 4 carried out, 8 released; 4 carried in from the last step
    counts = dict(generated=20, carried_in=4, trained=12, released=8, cut=0, carried_out=4)
    assert check_generated_samples(2, counts)[sample_metric("released")] == 8.0
    with pytest.raises(LedgerError, match=r"step 2: the sample ledger does not balance: generated \+ carried_in = 24 "
                                          r"but trained \+ released \+ cut \+ left_at_end \+ carried_out = 23 .*ledger/samples_cut = 0"):
        check_generated_samples(2, {**counts, "released": 7})


def test_epoch_coverage_counts_duplicates_by_key():
    data = Counter({"a": 2, "b": 1, "c": 1})  # "a" twice in the data
    drawn = Counter({"a": 2, "b": 1, "c": 1})
    outcomes = {"trained": Counter({"a": 1, "c": 1}), "skipped": Counter({"a": 1}), "cut": Counter({"b": 1})}
    metrics = check_epoch(0, drawn, outcomes, data, whole=True)
    assert metrics[EPOCH_UNACCOUNTED] == 0.0 and metrics["ledger/epoch_prompts_trained"] == 2.0
    assert metrics["ledger/epoch_prompts_drawn"] == 4.0 and metrics["ledger/epoch_prompts_cut"] == 1.0
    # by hand: "a" settled once of twice (1), "b" settled twice (1)
    assert epoch_unaccounted(drawn, Counter({"a": 1, "b": 2, "c": 1})) == 2
    # drawn three times, held twice (a restarted loader): 1 over the data, 1 not settled
    assert epoch_unaccounted(Counter({"a": 3}), Counter({"a": 2}), Counter({"a": 2})) == 2
    # a whole epoch that never drew "c": 1; an epoch resumed mid-way is not held to the whole data
    assert epoch_unaccounted(Counter({"a": 2, "b": 1}), Counter({"a": 2, "b": 1}), data, whole=True) == 1
    assert epoch_unaccounted(Counter({"a": 2, "b": 1}), Counter({"a": 2, "b": 1}), data, whole=False) == 0
    with pytest.raises(LedgerError, match=r"epoch 3: the prompt coverage does not balance: 1 prompt\(s\) .*"
                                          r"ledger/epoch_prompts_unaccounted = 1.*a: data 2, drawn 2, settled 1"):
        check_epoch(3, drawn, {"trained": Counter({"a": 1, "b": 1, "c": 1})}, data, whole=True)


def test_an_epochs_coverage_reads_as_one_line():
    """The line the generator logs for each epoch it checks (the run's last epoch reaches no tracker otherwise)."""
    from openrlhf_ada.trainer.ledger import check_epoch, describe_epoch

    drawn = Counter({"a": 2, "b": 1, "c": 1})
    metrics = check_epoch(3, drawn, {"trained": Counter({"a": 2}), "skipped": Counter({"b": 1}),
                                     "left_at_end": Counter({"c": 1})})
    assert describe_epoch(metrics) == ("ledger: epoch 3 covered: 4 prompts drawn, 2 trained, 1 skipped, 0 filtered, "
                                       "0 failed, 0 dropped, 0 cut, 1 left_at_end, 0 unaccounted")
