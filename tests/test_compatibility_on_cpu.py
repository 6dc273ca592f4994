"""Upstream features that change the data path, run together with the project's settings through the whole CPU
pipeline (the launcher, Ray, vLLM engines, DeepSpeed): the "tested" cells of docs/compatibility.md.

Each run switches on several upstream features at once and checks each of them for what it should do:
- an HTTP reward server (`--reward.remote_url http://127.0.0.1:PORT/get_reward`, upstream's remote RM protocol: a POST
  of {"query", "prompts", "labels"}, an answer of {"rewards", "scores", "extra_logs"}) started by the test: it was
  called for every generated sample, and its rewards (2.5 for a correct sample, 0.5 otherwise: values no reward
  file of the project gives) are the ones trained;
- a multi-turn agent (`--train.agent_func_path`): two turns per sample, the environment's feedback between them;
- a critic (`--algo.advantage.estimator gae`): it trains (critic loss logged);
- the DAPO overlong penalty with a buffer as long as `--rollout.max_new_tokens` (16): every sample loses
  factor x length / 16, so the mean trained reward is the mean server reward minus factor x mean length / 16, both
  logged;
- IS correction (`--algo.advantage.is_correction_level token`): the rollout log-probs reach the actor (`vllm_kl`
  logged at every step; near zero after every weight sync in the sync trainer, at step 1 in the async one, whose
  later steps may come from weights one sync behind);
- evaluation (`--eval.dataset`, `--eval.steps 1`): the eval samples go to the reward server and the eval metrics are
  logged;
- dynamic filtering: a prompt that is never solved is filtered and replaced;
- async training with partial rollout (`--train.async_enable --train.partial_rollout_enable`): the steps train, and
  the engines are paused for the weight syncs (vLLM's scheduler logs it) instead of drained;
- packing (`--ds.packing_samples`, or dynamic batching, which turns it on): the CPU mode kept it on, with eager
  attention in place of flash_attention_2 (its log line); each sample's log-probs are those of the sample alone
  (tests/test_packing.py), and the engines' log-probs match the trained policy's after every sync (`vllm_kl`);
- dynamic batching (`--train.dynamic_batch_enable`): the policy trains each step in micro-batches cut by tokens, more
  of them than --train.micro_batch_size makes (its progress bar's count);
- ZeRO-2 (`--ds.zero_stage 2`, upstream's default; the other pipeline runs use ZeRO-3): the actors ran it (the
  arguments upstream prints), under every setting: features off, ADORA + Seq, Est, ADORA + Seq + cancel.
"""

from __future__ import annotations

import json
import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import siblings
import torch

_p = siblings.load("test_pipeline_on_cpu.py")
assert_ok, common_flags, jsonl_rows, launch, sync_is_real, write_prompts = (
    _p.assert_ok, _p.common_flags, _p.jsonl_rows, _p.launch, _p.sync_is_real, _p.write_prompts)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

N = 4
BATCH = 4
MAX_NEW = 16
OVERLONG_FACTOR = 0.5
RIGHT, WRONG = 2.5, 0.5  # the server's rewards; scores are 1 and 0
EVAL_PROMPTS, EVAL_N = 4, 2


class RewardServer:
    """Upstream's remote reward protocol on 127.0.0.1: each label's calls alternate correct, wrong, correct, ... (so a
    round of 4 holds 2 + 2); labels starting with "never" are always wrong. Records every label it scored."""

    def __init__(self):
        self.lock, self.seen, self.labels = threading.Lock(), {}, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                scores = [server.score(label) for label in body["labels"]]
                answer = json.dumps({"rewards": [RIGHT if s else WRONG for s in scores], "scores": scores,
                                     "extra_logs": {}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/get_reward"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def score(self, label: str) -> float:
        with self.lock:
            k = self.seen.get(label, 0)
            self.seen[label] = k + 1
            self.labels.append(label)
        return 0.0 if label.startswith("never") else float(k % 2 == 0)

    def calls(self, prefix: str) -> int:
        return sum(label.startswith(prefix) for label in self.labels)


@pytest.fixture
def reward_server():
    server = RewardServer()
    yield server
    server.httpd.shutdown()


def write_eval(path: Path) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(EVAL_PROMPTS):
            f.write(json.dumps({"input": f"Name a colour {i}:", "label": f"eval-{i}"}) + "\n")
    return str(path)


def feature_flags(tmp_path: Path, reward: str) -> list:
    """What every run switches on: the overlong penalty, IS correction, evaluation at every step."""
    return [
        "--reward.remote_url", reward, "--reward.overlong_buffer_len", str(MAX_NEW),
        "--reward.overlong_penalty_factor", str(OVERLONG_FACTOR), "--algo.advantage.is_correction_level", "token",
        "--eval.dataset", write_eval(tmp_path / "eval.jsonl"), "--eval.steps", "1",
        "--eval.n_samples_per_prompt", str(EVAL_N), "--eval.temperature", "1.0",
        "--actor.num_gpus_per_node", "1", "--vllm.num_engines", "1", "--algo.kl.init_coef", "0",
    ]


def flags_for(tiny_llama_path, tmp_path, data, reward, extra) -> list:
    flags = common_flags(tiny_llama_path, data, tmp_path, n=N, batch=BATCH) + feature_flags(tmp_path, reward) + extra
    return flags


# Packing and dynamic batching. Every shipped text script packs (--ds.packing_samples); the CPU mode keeps it on with
# eager attention in place of flash_attention_2 and says so in the log. --train.dynamic_batch_enable (which turns
# packing on) cuts each rank's share of a step into micro-batches of at most MAX_TOKENS tokens (prompt + response)
# instead of --train.micro_batch_size samples: a sample here is about 25 tokens (a 9-token prompt, up to 16 response
# tokens), so a micro-batch holds one sample, or two short ones: 14 to 16 micro-batches for a rank's 16 samples of a
# step (8 for 8 with two ranks) where 4 samples a micro-batch make 4 (2).
MAX_TOKENS = 48
DYNAMIC_BATCH = ["--train.dynamic_batch_enable", "--train.max_tokens_per_gpu", str(MAX_TOKENS)]
PACKING = ["--ds.packing_samples"]
ZERO2 = ["--ds.zero_stage", "2"]  # after common_flags' 3: the last one counts


def check_zero2(run) -> None:
    """The actors ran ZeRO-2 (upstream prints the parsed arguments every actor gets)."""
    assert "zero_stage=2," in run.log and "zero_stage=3," not in run.log


def check_packed(run) -> None:
    """Packing reached the actors: the CPU mode kept --ds.packing_samples on (its line) and put eager attention in
    place of the flash_attention_2 that upstream forces with packing."""
    assert "--ds.attn_implementation flash_attention_2 -> eager" in run.log and "packing stays on" in run.log


def train_micro_batches(run, actor: str = "PolicyModelActor") -> list:
    """The micro-batches `actor` (its rank 0) trained per training epoch, from its progress bar ("Train epoch [1/1]
    ... k/k"), in order (one epoch a step here). Ray prefixes each line an actor prints with its class (the critic
    has a bar too); the bar's updates within that line, split at tqdm's carriage returns, follow it unprefixed."""
    stream, owner = [], None
    for line in run.log.split("\n"):
        prefix = re.match(r"(?:\x1b\[\d+m)?\((\w+) pid=\d+", line)
        if prefix:
            owner = prefix.group(1)
        elif not line.startswith("Train epoch"):
            owner = None
        if owner and actor in owner:
            stream.append(line)
    counts = []
    for chunk in "".join(stream).split("Train epoch [1/1]")[1:]:
        done = re.search(r"\|\s*(\d+)/(\d+) \[", chunk)
        if done and done.group(1) == done.group(2):
            counts.append(int(done.group(2)))
    return counts


def check_dynamic_batches(run, samples_per_rank: int) -> None:
    """Dynamic batching cut the steps: the policy's rank 0 trained its share of a step (`samples_per_rank`) in more
    micro-batches than --train.micro_batch_size (4) would make of it, at most one a sample (every finished bar)."""
    counts = train_micro_batches(run)
    assert counts and all(samples_per_rank // 4 < c <= samples_per_rank for c in counts), counts


def check_penalised_rewards(row: dict, server_mean: float) -> None:
    """The trained rewards are the server's, each minus the overlong penalty factor x length / 16 (the buffer is the
    whole response budget, so every token counts): their mean is the server's mean minus factor x mean length / 16."""
    expected = server_mean - OVERLONG_FACTOR * row["rollout/response_length_mean"] / MAX_NEW
    assert row["rollout/reward_mean"] == pytest.approx(expected, abs=1e-4), (row["rollout/reward_mean"], expected)


def test_adora_and_seq_with_http_rewards_critic_penalty_is_correction_eval_and_filtering(tmp_path, tiny_llama_path,
                                                                                        reward_server):
    """Sync trainer, ADORA + Reinforce-Ada Seq (group baseline: a critic has no group) with a critic (gae), the HTTP
    reward server, the overlong penalty, IS correction, evaluation, dynamic filtering, dynamic batching (so packing)
    and ZeRO-2 (policy and critic). 8 prompts solved half the time and 1 never solved: each mixed prompt's round of
    4 holds 2 + 2 (resolved in round 1); the never-solved one stays unresolved after 2 rounds, is kept
    (--ada.unresolved keep) and then removed by dynamic filtering (its mean score 0 is outside (0, 1)) and replaced:
    8 groups of 4 = 2 steps of 16 samples."""
    data = write_prompts(tmp_path / "prompts.jsonl", 9, never=1)
    flags = flags_for(tiny_llama_path, tmp_path, data, reward_server.url, [
        "--algo.advantage.estimator", "gae", "--critic.num_gpus_per_node", "1",
        "--algo.dynamic_filtering_enable", "--adora.enable", "--ada.enable", "--ada.baseline", "group",
        "--ada.round_size", "4", "--ada.max_rounds", "2", *DYNAMIC_BATCH, *ZERO2,
    ])
    run = launch("openrlhf_ada.cli.train_ppo_ray", flags, tmp_path / "run.log")
    assert_ok(run)
    check_packed(run)
    check_dynamic_batches(run, 16)
    check_zero2(run)
    rows = step_rows(tmp_path)
    assert sorted(rows) == [1, 2] and [rows[s]["rollout/num_samples"] for s in (1, 2)] == [16, 16]
    check_ledger(run, rows, 9)
    # the server scored every generated training sample (8 mixed prompts x 4, the never-solved one 2 rounds x 4)
    generated = sum(rows[s]["ada_samples_generated"] for s in rows)
    assert reward_server.calls("mixed") + reward_server.calls("never") == generated == 8 * 4 + 2 * 4
    # the prompt order is the permutation the launcher's default --train.seed (42) draws: step 1 is its first 4
    # (all mixed), the never-solved prompt (index 8) comes in step 2, and its replacement is the 9th
    order = torch.randperm(9, generator=torch.Generator().manual_seed(42)).tolist()
    assert order.index(8) in range(4, 8)
    training = [label for label in reward_server.labels if not label.startswith("eval")]
    assert {int(label.split("-")[1]) for label in training[:16]} == set(order[:4])
    assert sum(rows[s]["ada_dynamic_filtered"] for s in rows) == 1  # the never-solved prompt, replaced
    for row in rows.values():
        check_penalised_rewards(row, (RIGHT + WRONG) / 2)  # every trained group 2 + 2
        assert row["adora_weight_mean"] > 0  # ADORA weighed the Seq groups
        assert row["critic_loss"] > 0  # the critic trained on the same samples
        assert row["eval/problems"] == EVAL_PROMPTS and 0 <= row["eval/accuracy"] <= 1, row
    assert sync_is_real({s: rows[s]["vllm_kl"] for s in rows})  # IS correction had the rollout log-probs
    assert reward_server.calls("eval") == 2 * EVAL_PROMPTS * EVAL_N  # one evaluation after each step


AGENT_REWARD = 1.25  # the agent's reward for every finished sample (its score says right or wrong)
STOP_COEF = 0.5  # --reward.stop_properly_penalty_coef: a truncated sample's reward is multiplied by it
TURN_TOKENS = 8

# A two-turn agent on upstream's MultiTurnAgentExecutor: turn 1 gets the feedback "Again:" and no reward, turn 2 is
# scored like RewardServer (each label's finished samples alternate right, wrong; "never-*" always wrong) with the
# reward AGENT_REWARD either way. Each turn generates at most TURN_TOKENS tokens (upstream gives a turn the whole rest
# of --data.max_len, which a random model fills: there would be no second turn).
AGENT = f"""
import threading

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

_lock, _seen = threading.Lock(), {{}}


class AgentInstance(AgentInstanceBase):
    def __init__(self, *args, **kwargs):
        self.turn = 0

    async def reset(self, states, **kwargs):
        return {{"observation": states["observation"]}}

    async def step(self, states, **kwargs):
        self.turn += 1
        if self.turn == 1:
            return {{"rewards": torch.tensor(0.0), "scores": torch.tensor(0.0), "environment_feedback": " Again:",
                    "done": False, "extra_logs": {{"agent_turns": 1.0}}}}
        label = states["label"]
        with _lock:
            k = _seen.get(label, 0)
            _seen[label] = k + 1
        score = 0.0 if label.startswith("never") else float(k % 2 == 0)
        return {{"rewards": torch.tensor({AGENT_REWARD}), "scores": score, "environment_feedback": "", "done": True,
                "extra_logs": {{"agent_turns": 2.0}}}}


class _ShortTurns:
    def __init__(self, engine):
        self.engine = engine

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        sampling_params.max_tokens = min(sampling_params.max_tokens, {TURN_TOKENS})
        return await self.engine.generate(prompt_token_ids, sampling_params, multi_modal_data=multi_modal_data)

    def __getattr__(self, name):
        return getattr(self.engine, name)


class AgentExecutor(MultiTurnAgentExecutor):
    def __init__(self):
        super().__init__(AgentInstance)

    async def execute(self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images=None):
        return await super().execute(prompt, label, sampling_params, max_length, hf_tokenizer,
                                     _ShortTurns(llm_engine), images)
"""


def agent_flags(tmp_path: Path) -> list:
    """The agent instead of a reward file, and the stop-properly penalty instead of the overlong one (a two-turn
    sample's length is not bounded by --rollout.max_new_tokens)."""
    (tmp_path / "agent.py").write_text(AGENT)
    flags = feature_flags(tmp_path, "unused.py")
    for name in ("--reward.remote_url", "--reward.overlong_buffer_len", "--reward.overlong_penalty_factor"):
        i = flags.index(name)
        del flags[i : i + 2]
    return flags + ["--train.agent_func_path", str(tmp_path / "agent.py"),
                    "--reward.stop_properly_penalty_coef", str(STOP_COEF)]


def check_agent_rewards(row: dict) -> None:
    """Every sample ran two turns and got the agent's reward, multiplied by the penalty coefficient when its last turn
    was cut: the mean trained reward is AGENT_REWARD x (1 - (1 - coef) x truncated rate)."""
    assert row["agent_turns"] == 2.0, row
    # the penalty met truncated samples: the random model rarely ends a turn within its TURN_TOKENS (seen: 94-100%)
    assert row["rollout/truncated_rate"] > 0, row
    expected = AGENT_REWARD * (1 - (1 - STOP_COEF) * row["rollout/truncated_rate"])
    assert row["rollout/reward_mean"] == pytest.approx(expected, abs=1e-4), (row["rollout/reward_mean"], expected)


def step_rows(tmp_path: Path) -> dict:
    """{step: metrics row}, a step's evaluation (written as the step's row again) merged into it."""
    rows = {}
    for row in jsonl_rows(tmp_path / "ckpt" / "metrics.jsonl"):
        rows.setdefault(row["step"], {}).update(row)
    return rows


def check_async_run(run, rows: dict, tmp_path: Path) -> None:
    """Async trainer with partial rollout: the engines were paused (vLLM's scheduler logs it), not drained, for the
    weight syncs; IS correction had the rollout log-probs at every step (vllm_kl logged and finite). A step generated
    while the previous one trained comes from the weights one sync behind, which is what IS correction corrects, so
    vllm_kl is near zero only at step 1 (engine and actor both at the start weights). Evaluation was logged."""
    assert "setting pause state to PAUSED_ALL" in run.log
    assert all(math.isfinite(rows[s]["vllm_kl"]) for s in rows) and sync_is_real({1: rows[1]["vllm_kl"]})
    assert async_eval_logged(tmp_path).get("eval/eval_num_samples"), async_eval_logged(tmp_path)


PROMPT_OUT = ("trained", "skipped", "filtered", "failed", "dropped", "cut", "left_at_end", "carried_out")
SAMPLE_OUT = ("trained", "released", "cut", "left_at_end", "carried_out")


def check_ledger(run, rows: dict, prompts: int, prompt_terms: bool = True, epochs: int = 1) -> None:
    """The step ledger as logged (the rows' keys, not the project's checker): every step's samples handed to the
    trainer were trained by the ranks; the generator's prompt and sample identities balance on every step; each of
    the run's `epochs` passes drew every one of the data's `prompts` once and its coverage was checked with none
    unaccounted (the run's log line per epoch; the metrics of every epoch but the last, which closes in the call that
    finds the data exhausted, after the last step's row). Upstream's own generation path (`prompt_terms` False) logs
    the sample terms only."""
    for step, row in rows.items():
        assert row["ledger/samples_trained"] == row["ledger/samples_trained_by_ranks"] == row["rollout/num_samples"], \
            (step, row)
        samples_in = row["ledger/samples_generated"] + row["ledger/samples_carried_in"]
        assert samples_in == sum(row[f"ledger/samples_{t}"] for t in SAMPLE_OUT), (step, row)
        if prompt_terms:
            drawn = row["ledger/prompts_drawn"] + row["ledger/prompts_carried_in"]
            assert drawn == sum(row[f"ledger/prompts_{t}"] for t in PROMPT_OUT), (step, row)
    if prompt_terms:
        assert sum(row["ledger/prompts_drawn"] for row in rows.values()) == prompts * epochs, rows
        covered = [row for row in rows.values() if "ledger/epoch_prompts_unaccounted" in row]
        assert [row["ledger/epoch"] for row in covered] == list(range(epochs - 1)), covered
        for row in covered:
            assert row["ledger/epoch_prompts_unaccounted"] == 0 and row["ledger/epoch_prompts_drawn"] == prompts, row
        for epoch in range(epochs):
            assert f"ledger: epoch {epoch} covered: {prompts} prompts drawn," in run.log, run.tail()
        lines = [line for line in run.log.splitlines() if "ledger: epoch " in line and " covered: " in line]
        assert all(line.rstrip().endswith(" 0 unaccounted") for line in lines), lines


def async_eval_logged(tmp_path: Path) -> dict:
    """The async trainer logs evaluation to tensorboard only (upstream's log_eval: eval/<key>)."""
    scalars = _p.tensorboard_scalars(tmp_path / "tb")
    return {tag: values for tag, values in scalars.items() if tag.startswith("eval/")}


def test_est_async_partial_rollout_with_http_rewards_penalty_is_correction_and_eval(tmp_path, tiny_llama_path,
                                                                                   reward_server):
    """Reinforce-Ada-Est in the async trainer with partial rollout (engines paused, not drained, for each weight
    sync), the HTTP reward server, the overlong penalty, IS correction, evaluation and dynamic batching (so
    packing), on ZeRO-2, with Knapsack-RL's allocation and GRESO's skip switched on, over three epochs. 12 prompts,
    all unseen at first: each gets alpha / (alpha + beta) = 1/2 as its pass-rate estimate, so 4 samples (n = 4 on
    average; the knapsack's increments tie for equal estimates), 2 + 2 from the server: 3 steps of 16 an epoch. Each
    later epoch's estimate stays 1/2 ((1 + 2) / (2 + 4) after one epoch, (1 + 3.8) / (2 + 7.6) after two): 4 each
    again. GRESO skips only prompts whose groups had one outcome, and every group here holds both: nothing skipped;
    in the first epoch it has no history and does not adapt (p_easy = p_hard = 0.5, logged every step). The step
    ledger balances on all 9 steps and each epoch's coverage is 12 prompts, none unaccounted. The generator
    evaluates when it is handed step 1's token (after its third batch)."""
    data = write_prompts(tmp_path / "prompts.jsonl", 12)
    flags = flags_for(tiny_llama_path, tmp_path, data, reward_server.url, [
        "--algo.advantage.estimator", "dr_grpo", "--ada.enable", "--ada.strategy", "est",
        "--ada.est_allocation", "knapsack", "--ada.skip", "greso", "--train.num_episodes", "3",
        "--train.async_enable", "--train.partial_rollout_enable", "--logger.tensorboard_dir", str(tmp_path / "tb"),
        *DYNAMIC_BATCH, *ZERO2,
    ])
    run = launch("openrlhf_ada.cli.train_ppo_ray", flags, tmp_path / "run.log")
    assert_ok(run)
    check_packed(run)
    check_dynamic_batches(run, 16)
    check_zero2(run)
    rows = step_rows(tmp_path)
    assert sorted(rows) == list(range(1, 10)) and all(rows[s]["rollout/num_samples"] == 16 for s in rows)
    check_ledger(run, rows, 12, epochs=3)
    assert reward_server.calls("mixed") == sum(rows[s]["ada_samples_generated"] for s in rows) == 3 * 12 * 4
    for step, row in rows.items():
        assert (row["ada_alloc_min"], row["ada_alloc_max"]) == (4, 4)
        assert row["ada_greso_skipped"] == 0 and row["ledger/prompts_skipped"] == 0, row
        if step <= 3:
            assert (row["ada_greso_p_easy"], row["ada_greso_p_hard"]) == (0.5, 0.5), row
        check_penalised_rewards(row, (RIGHT + WRONG) / 2)
    check_async_run(run, rows, tmp_path)
    evals = reward_server.calls("eval")
    assert evals and evals % (EVAL_PROMPTS * EVAL_N) == 0


def test_adora_seq_cancel_async_partial_rollout_with_an_agent_critic_penalty_is_correction_eval_and_filtering(
        tmp_path, tiny_llama_path):
    """ADORA + Reinforce-Ada Seq with --ada.cancel (rounds of 8: a prompt's rest is cancelled once 2 + 2 are back) in
    the async trainer with partial rollout, a two-turn agent, a critic (gae, group baseline), the stop-properly
    penalty, IS correction, evaluation, dynamic filtering, dynamic batching (so packing) and ZeRO-2. 12 prompts
    solved half the time and one never solved (unresolved after 2 rounds, kept, filtered, replaced): 3 steps of 4
    groups."""
    data = write_prompts(tmp_path / "prompts.jsonl", 13, never=1)
    flags = common_flags(tiny_llama_path, data, tmp_path, n=N, batch=BATCH) + agent_flags(tmp_path) + [
        "--algo.advantage.estimator", "gae", "--critic.num_gpus_per_node", "1", "--algo.dynamic_filtering_enable",
        "--adora.enable", "--ada.enable", "--ada.baseline", "group", "--ada.round_size", "8", "--ada.max_rounds", "2",
        "--ada.cancel", "--train.async_enable", "--train.partial_rollout_enable",
        "--logger.tensorboard_dir", str(tmp_path / "tb"), *DYNAMIC_BATCH, *ZERO2,
    ]
    run = launch("openrlhf_ada.cli.train_ppo_ray", flags, tmp_path / "run.log")
    assert_ok(run)
    check_packed(run)
    check_dynamic_batches(run, 16)
    check_zero2(run)
    rows = step_rows(tmp_path)
    assert sorted(rows) == [1, 2, 3] and all(rows[s]["rollout/num_samples"] == 16 for s in rows)
    assert sum(rows[s]["ada_dynamic_filtered"] for s in rows) == 1
    check_ledger(run, rows, 13)
    assert sum(rows[s]["ledger/prompts_filtered"] for s in rows) == 1 and sum(
        rows[s]["ledger/samples_cancelled"] + rows[s]["ledger/samples_released"] for s in rows) > 0
    for row in rows.values():
        check_agent_rewards(row)
        assert row["adora_weight_mean"] > 0 and row["critic_loss"] > 0
        # each mixed prompt: 8 requests, 4 of them admitted; the rest cancelled or discarded
        assert row["ada_cancelled_requests"] + row["ada_discarded_samples"] > 0, row
    check_async_run(run, rows, tmp_path)


def test_features_off_async_partial_rollout_with_http_rewards_critic_penalty_is_correction_eval_and_filtering(
        tmp_path, tiny_llama_path, reward_server):
    """The project's launcher without --adora/--ada (one round of n per prompt through the project's generator) in
    the async trainer with partial rollout, a critic (gae), the HTTP reward server, the overlong penalty, IS
    correction, evaluation, dynamic filtering and dynamic batching (so packing), with 2 policy ranks (ZeRO-3) and 2
    engines: the ranks agree on each step's micro-batch count, each training its 8 samples in micro-batches cut by
    tokens (the step ledger: 16 handed, 16 trained). 12 prompts solved half the time (their 4 samples 2 + 2) and one never solved (filtered, replaced): 3
    steps of 16."""
    data = write_prompts(tmp_path / "prompts.jsonl", 13, never=1)
    flags = flags_for(tiny_llama_path, tmp_path, data, reward_server.url, [
        "--algo.advantage.estimator", "gae", "--critic.num_gpus_per_node", "1", "--algo.dynamic_filtering_enable",
        "--train.async_enable", "--train.partial_rollout_enable", "--logger.tensorboard_dir", str(tmp_path / "tb"),
        *DYNAMIC_BATCH, "--actor.num_gpus_per_node", "2", "--vllm.num_engines", "2",
    ])
    run = launch("openrlhf_ada.cli.train_ppo_ray", flags, tmp_path / "run.log")
    assert_ok(run)
    check_packed(run)
    check_dynamic_batches(run, 8)  # each of the 2 ranks: 8 samples a step
    rows = step_rows(tmp_path)
    assert sorted(rows) == [1, 2, 3] and all(rows[s]["rollout/num_samples"] == 16 for s in rows)
    assert reward_server.calls("mixed") + reward_server.calls("never") == 13 * 4
    assert sum(rows[s]["ada_dynamic_filtered"] for s in rows) == 1
    for row in rows.values():
        check_penalised_rewards(row, (RIGHT + WRONG) / 2)
        assert row["critic_loss"] > 0 and not [k for k in row if k.startswith("adora")]
        # the step ledger (async trainer, 2 ranks): every sample handed to the step trained, 8 on each rank
        assert row["ledger/samples_trained"] == row["ledger/samples_trained_by_ranks"] == 16, row
    scalars = _p.tensorboard_scalars(tmp_path / "tb")  # and through upstream's logging, as train/<key>
    for key in ("ledger/samples_trained", "ledger/samples_trained_by_ranks"):
        assert scalars.get(f"train/{key}") == {1: 16.0, 2: 16.0, 3: 16.0}, (key, scalars.get(f"train/{key}"))
    # the generator's side, carried beside the samples through upstream's async queue: 13 prompts drawn, 12 trained,
    # 1 filtered (its 4 samples released), 52 samples generated; every step balances
    total = lambda key: sum(rows[s][key] for s in rows)  # noqa: E731
    assert [total(f"ledger/prompts_{t}") for t in ("drawn", "trained", "filtered")] == [13, 12, 1], rows
    assert [total(f"ledger/samples_{t}") for t in ("generated", "trained", "released")] == [52, 48, 4], rows
    for row in rows.values():
        assert row["ledger/prompts_drawn"] + row["ledger/prompts_carried_in"] == sum(
            row[f"ledger/prompts_{t}"] for t in ("trained", "skipped", "filtered", "failed", "dropped", "cut",
                                                 "left_at_end", "carried_out")), row
    assert sum(scalars.get("train/ledger/prompts_trained", {}).values()) == 12, scalars.get("train/ledger/prompts_trained")
    check_ledger(run, rows, 13)
    # the step's metrics, beside the samples too, reach tensorboard under the names they had as info keys (1 group
    # filtered in all), as in metrics.jsonl
    assert sum(scalars.get("train/ada_dynamic_filtered", {}).values()) == 1, scalars.get("train/ada_dynamic_filtered")
    assert scalars.get("train/ada_samples_generated") == {s: rows[s]["ada_samples_generated"] for s in rows}, scalars
    check_async_run(run, rows, tmp_path)
    evals = reward_server.calls("eval")
    assert evals and evals % (EVAL_PROMPTS * EVAL_N) == 0


def test_features_off_with_an_agent_and_one_sample_per_prompt(tmp_path, tiny_llama_path):
    """The project's launcher without --adora/--ada, `reinforce` with one sample per prompt (no group: upstream's
    generation path), a two-turn agent, the stop-properly penalty, IS correction, evaluation, packing and ZeRO-2, in
    the sync trainer. 8 prompts, 4 a step: 2 steps of 4 samples, every one of them two turns long."""
    data = write_prompts(tmp_path / "prompts.jsonl", 8)
    flags = common_flags(tiny_llama_path, data, tmp_path, n=1, batch=BATCH) + agent_flags(tmp_path) + [
        "--algo.advantage.estimator", "reinforce", *PACKING, *ZERO2]
    run = launch("openrlhf_ada.cli.train_ppo_ray", flags, tmp_path / "run.log")
    assert_ok(run)
    check_packed(run)
    check_zero2(run)
    rows = step_rows(tmp_path)
    assert sorted(rows) == [1, 2] and [rows[s]["rollout/num_samples"] for s in (1, 2)] == [BATCH, BATCH]
    check_ledger(run, rows, 8, prompt_terms=False)  # upstream's generation path: its sample terms
    for row in rows.values():
        check_agent_rewards(row)
        assert not [k for k in row if k.startswith("adora")], row
        assert row["eval/problems"] == EVAL_PROMPTS and 0 <= row["eval/accuracy"] <= 1, row
    assert sync_is_real({s: rows[s]["vllm_kl"] for s in rows})


def test_est_with_an_agent_and_dynamic_filtering(tmp_path, tiny_llama_path):
    """Reinforce-Ada-Est (dr_grpo) with a two-turn agent, dynamic filtering, the stop-properly penalty, IS correction,
    evaluation, packing and ZeRO-2, in the sync trainer. 8 prompts solved half the time and one never solved, all
    unseen: each gets the prior's pass rate and so 4 samples (n = 4 on average), 2 + 2 from the agent; the
    never-solved group (mean score 0, outside (0, 1)) is filtered and replaced by the next prompt with its count: 2
    steps of 4 groups of 4."""
    data = write_prompts(tmp_path / "prompts.jsonl", 9, never=1)
    flags = common_flags(tiny_llama_path, data, tmp_path, n=N, batch=BATCH) + agent_flags(tmp_path) + [
        "--algo.advantage.estimator", "dr_grpo", "--ada.enable", "--ada.strategy", "est",
        "--algo.dynamic_filtering_enable", *PACKING, *ZERO2]
    run = launch("openrlhf_ada.cli.train_ppo_ray", flags, tmp_path / "run.log")
    assert_ok(run)
    check_packed(run)
    check_zero2(run)
    rows = step_rows(tmp_path)
    assert sorted(rows) == [1, 2] and [rows[s]["rollout/num_samples"] for s in (1, 2)] == [16, 16]
    assert sum(rows[s]["ada_dynamic_filtered"] for s in rows) == 1  # the never-solved prompt, replaced
    check_ledger(run, rows, 9)
    for row in rows.values():
        assert (row["ada_alloc_min"], row["ada_alloc_max"]) == (4, 4)
        check_agent_rewards(row)
        assert row["eval/problems"] == EVAL_PROMPTS and 0 <= row["eval/accuracy"] <= 1, row
    assert sync_is_real({s: rows[s]["vllm_kl"] for s in rows})
