"""The cluster launcher: project flags parsed, upstream flags and checks unchanged, misuse rejected before Ray starts,
and upstream's train() building the project's trainer actors (checked without GPUs)."""

import subprocess
import sys
from pathlib import Path

import openrlhf.trainer.ppo_trainer as sync_module
import openrlhf.trainer.ppo_trainer_async as async_module
import openrlhf.trainer.ray.vllm_engine as engine_module
import pytest
import ray
import ray.actor
import torch

from openrlhf_ada import launcher as project_launcher
from openrlhf_ada.launcher import main, parse_args
from openrlhf_ada.trainer.ppo_trainer import _AdoraPoolPPOTrainer
from openrlhf_ada.trainer.ppo_trainer_async import _AdoraPoolPPOTrainerAsync
from openrlhf_ada.trainer.ray.vllm_engine import _GuardedRolloutRayActor

REWARD = str(Path(__file__).resolve().parents[1] / "openrlhf_ada" / "rewards" / "toy.py")  # a real reward file
BASE = ["--actor.model_name_or_path", "some/model", "--reward.remote_url", REWARD,
        "--rollout.n_samples_per_prompt", "4", "--algo.advantage.estimator", "dr_grpo"]


def test_project_flags_and_defaults():
    args = parse_args(BASE + ["--ada.enable", "--ada.round_size", "8", "--adora.enable", "--adora.lam", "0.2",
                              "--ada.mode", "pos", "--ada.schedule", "sync"])
    assert (args.ada.enable, args.ada.round_size, args.ada.mode, args.ada.schedule) == (True, 8, "pos", "sync")
    assert (args.ada.max_rounds, args.ada.unresolved, args.ada.selection, args.ada.baseline) == (4, "keep", "first",
                                                                                                  "pool")
    assert (args.adora.enable, args.adora.lam, args.adora.boost, args.adora.variant) == (True, 0.2, 1.0, "llm")
    off = parse_args(BASE)
    assert not off.ada.enable and not off.adora.enable


def test_upstream_flags_pass_through_and_upstream_checks_still_run():
    args = parse_args(BASE + ["--actor.adam.lr", "3e-7", "--rollout.batch_size", "7", "--train.async_enable",
                              "--algo.kl.init_coef", "0.02"])
    assert args.actor.adam.lr == 3e-7 and args.rollout.batch_size == 7 and args.train.async_enable
    assert args.algo.kl.init_coef == 0.02
    assert args.reward.remote_url == [REWARD]  # upstream's own post-processing ran (split on commas)
    assert args.rollout.vllm_generate_batch_size == 7  # and so did its defaults logic
    with pytest.raises(AssertionError, match="requires --train.async_enable"):  # upstream's assertion
        parse_args(BASE + ["--train.partial_rollout_enable"])


@pytest.mark.parametrize(
    "extra,words",
    [
        (["--ada.enable", "--rollout.n_samples_per_prompt", "1"],
         ["--rollout.n_samples_per_prompt 1 with --ada.enable", "n_samples_per_prompt >= 2"]),
        (["--adora.enable", "--rollout.n_samples_per_prompt", "1", "--algo.advantage.estimator", "reinforce"],
         ["--rollout.n_samples_per_prompt 1 with --adora.enable", "no group"]),
        (["--ada.enable", "--ada.round_size", "0"], ["--ada.round_size=0", ">= 1"]),
        (["--ada.enable", "--ada.max_rounds", "0"], ["--ada.max_rounds=0"]),
        (["--ada.enable", "--ada.round_size", "1", "--ada.max_rounds", "2"], ["2 samples", "n=4"]),
        (["--ada.enable", "--algo.advantage.estimator", "reinforce"], ["--ada.baseline pool", "reinforce"]),
        (["--adora.enable", "--adora.weight_func", "missing.py:f"], ["missing.py", "'f'", "file not found"]),
        (["--adora.enable", "--adora.end_step", "0"], ["--adora.end_step=0"]),
        (["--ada.mode", "both"], ["--ada.mode", "invalid choice", "'both'"]),
        (["--adora.variant", "text"], ["--adora.variant", "invalid choice"]),
        (["--ada.bogus", "1"], ["unrecognized arguments", "--ada.bogus"]),
        (["--fault.max_failed_share", "1.5"], ["--fault.max_failed_share=1.5", "0 to 1"]),
        (["--fault.reward_timeout", "0"], ["--fault.reward_timeout=0"]),
        # upstream assertions and late failures, named by their flags
        (["--rollout.batch_size", "0"], ["--rollout.batch_size=0", ">= 1"]),
        (["--rollout.n_samples_per_prompt", "1", "--algo.advantage.estimator", "group_norm"],
         ["--algo.advantage.estimator group_norm", "--rollout.n_samples_per_prompt >= 2", "got 1", "reinforce"]),
        (["--data.max_len", "32", "--rollout.max_new_tokens", "64"],
         ["--data.max_len=32", "--rollout.max_new_tokens=64", "prompt + response"]),
        (["--reward.remote_url", "openrlhf_ada/rewards/kk"], ["'openrlhf_ada/rewards/kk'", "neither a .py",
                                                               "http(s)://"]),
        (["--reward.remote_url", "nowhere/reward.py"], ["'nowhere/reward.py'", "reward file not found"]),
        (["--reward.remote_url", "http://"], ["needs a host"]),
        (["--reward.remote_url", f"{REWARD},http://localhost:5000"], ["must be the only entry"]),
    ],
)
def test_misuse_fails_with_a_clear_message(extra, words, refused):
    refused(parse_args, BASE + extra, words)


def test_ada_without_a_reward_function_is_refused(capsys):
    argv = ["--actor.model_name_or_path", "m", "--rollout.n_samples_per_prompt", "4",
            "--algo.advantage.estimator", "dr_grpo", "--ada.enable"]
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert "--reward.remote_url" in capsys.readouterr().err
    assert parse_args(argv + ["--train.agent_func_path", "agent.py"]).ada.enable  # an agent is a reward source


def test_help_lists_upstream_and_project_flags_with_defaults():
    out = subprocess.run([sys.executable, "-m", "openrlhf_ada.cli.train_ppo_ray", "--help"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    for flag in ["--actor.model_name_or_path", "--algo.advantage.estimator", "--adora.lam", "--ada.round_size",
                 "--ada.schedule {async,sync}"]:
        assert flag in text
    assert "Rounds before a prompt counts as unresolved (default: 4)" in text
    assert "Weight of groups that are not advantageous (default: 0.1)" in text


class _Built(Exception):
    def __init__(self, actor_class):
        self.actor_class = actor_class


@pytest.mark.parametrize("async_enable,expected", [(False, _AdoraPoolPPOTrainer), (True, _AdoraPoolPPOTrainerAsync)])
def test_train_builds_the_project_trainer(monkeypatch, async_enable, expected):
    """Run upstream's train() through the launcher with Ray and the GPU actor groups stubbed out; the first actor it
    creates is the trainer: it must be the project's class, and ray.init must carry the worker setup hook. The
    launcher as on a GPU cluster: without the CPU mode the tests' process otherwise runs in."""
    import openrlhf.trainer.ray.launcher as launcher

    from openrlhf_ada.cpu.patches import CPU_ENV

    monkeypatch.setenv(CPU_ENV, "0")  # this venv asks for the CPU mode unless told not to

    monkeypatch.setattr(sync_module, "PPOTrainer", sync_module.PPOTrainer)  # restored after the test
    monkeypatch.setattr(async_module, "PPOTrainerAsync", async_module.PPOTrainerAsync)
    monkeypatch.setattr(engine_module, "RolloutRayActor", engine_module.RolloutRayActor)
    init_calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda *a, **kw: init_calls.append(kw))
    monkeypatch.setattr(launcher, "RayActorGroup", lambda *a, **kw: object())

    def remote(self, *args, **kwargs):
        raise _Built(self.__ray_actor_class__)

    monkeypatch.setattr(ray.actor.ActorClass, "remote", remote)
    argv = BASE + ["--ada.enable", "--adora.enable"] + (["--train.async_enable"] if async_enable else [])
    with pytest.raises(_Built) as built:
        main(argv)
    assert built.value.actor_class is expected
    assert init_calls and init_calls[0]["runtime_env"]["worker_process_setup_hook"] == project_launcher.WORKER_SETUP_HOOK
    assert init_calls[0]["runtime_env"]["env_vars"]["RAY_ENABLE_ZERO_COPY_TORCH_TENSORS"]  # upstream's env kept
    assert init_calls[0]["runtime_env"]["env_vars"]["OPENRLHF_ADA_REWARD_TIMEOUT"] == "60.0"
    assert engine_module.RolloutRayActor.__ray_actor_class__ is _GuardedRolloutRayActor  # engines get the reward guard


def test_misuse_stops_before_ray_starts(monkeypatch):
    started = []
    monkeypatch.setattr(ray, "init", lambda *a, **kw: started.append(kw))
    with pytest.raises(SystemExit):
        main(BASE + ["--ada.enable", "--ada.round_size", "0"])
    assert started == []


def test_cluster_trainer_writes_standard_metric_rows(tmp_path):
    from openrlhf_ada.trainer.metrics_log import read_metrics
    from openrlhf_ada.trainer.ppo_trainer import AdoraPoolTrainerMixin

    class Upstream:
        def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
            self.upstream_called = global_step

    class Trainer(AdoraPoolTrainerMixin, Upstream):
        args = parse_args(BASE + ["--ckpt.path", str(tmp_path)])

    trainer = Trainer()
    status = {"rollout/reward_mean": 0.25, "rollout/response_length_mean": 10.0, "rollout/num_samples": 8.0,
              "generated_samples": ["text", 1.0], "policy_loss": 0.5}
    trainer.save_logs_and_checkpoints(1, dict(status))
    trainer.save_logs_and_checkpoints(2, {**status, "ada_tokens_generated": 100.0, "ada_eta": 0.4,
                                          "ada_samples_per_prompt_mean": 6.0, "ada_nonzero_adv_group_share": 0.75})
    rows = read_metrics(str(tmp_path))
    assert trainer.upstream_called == 2
    assert rows[0]["reward_mean"] == 0.25 and rows[0]["generated_tokens"] == 80 and rows[0]["samples_per_prompt"] == 4
    assert rows[1]["generated_tokens_total"] == 180 and rows[1]["eta"] == 0.4 and rows[1]["samples_per_prompt"] == 6
    assert rows[1]["zero_adv_group_share"] == 0.25 and "generated_samples" not in rows[0]


def test_a_resumed_cluster_run_does_not_duplicate_steps(tmp_path):
    """A run logged steps 1-5 but its last checkpoint is step 3; resumed, it redoes step 4 on.
    The rows of the redone steps go, and the running token total continues from step 3's."""
    import json

    from openrlhf_ada.trainer.ppo_trainer import AdoraPoolTrainerMixin

    class Upstream:
        def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
            pass

    class Trainer(AdoraPoolTrainerMixin, Upstream):
        args = parse_args(BASE + ["--ckpt.path", str(tmp_path)])

    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": k, "generated_tokens_total": 100.0 * k}) + "\n" for k in range(1, 6)))
    Trainer().save_logs_and_checkpoints(4, {"rollout/response_length_mean": 10.0, "rollout/num_samples": 8.0})
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[-1]["generated_tokens_total"] == 300.0 + 80.0


def test_the_cluster_trainer_warns_when_every_reward_is_the_same(monkeypatch):
    """In the cluster trainer: three steps whose rewards are all 0 -> a warning in the log (the
    trainer actor's log reaches the driver) and the streak in the step's metrics."""
    import torch
    from openrlhf.trainer.ppo_utils.experience import Experience

    import openrlhf_ada.trainer.ppo_trainer as trainer_module
    from openrlhf_ada.trainer.ppo_trainer import AdoraPoolTrainerMixin
    from openrlhf_ada.trainer.signal_watch import SignalState

    class Upstream:
        def train_step(self, rollout_samples, global_step):
            return {"policy_loss": 0.0}, global_step + 1

    class Trainer(AdoraPoolTrainerMixin, Upstream):
        pass

    warnings = []
    monkeypatch.setattr(trainer_module.logger, "warning", lambda message: warnings.append(message))
    trainer = Trainer()
    trainer._sync_engines, trainer._signal_state = [], SignalState()
    trainer.experience_maker = type("Maker", (), {})()
    samples = [Experience(sequences=torch.zeros(1, 3, dtype=torch.long), rewards=torch.tensor([0.0]), labels=["l"],
                          info={}) for _ in range(4)]
    statuses = [trainer.train_step(samples, step)[0] for step in range(3)]
    assert [s["signal/constant_reward_steps"] for s in statuses] == [1.0, 2.0, 3.0]
    assert len(warnings) == 1 and "every reward of the last 3 steps was 0" in warnings[0]


def test_the_cluster_checkpoint_carries_the_samplers_state_with_the_data_position():
    """Upstream checkpoints prompts_dataloader.state_dict() with every step and hands it back on resume; the
    wrapper adds the sampler's state under its own key and gives the loader only its own."""
    from openrlhf_ada.trainer.ppo_utils.loader_state import LoaderWithSamplerState

    class Loader:
        loaded = None

        def state_dict(self):
            return {"position": 7}

        def load_state_dict(self, state):
            Loader.loaded = state

    class Generator:
        restored = None

        def state_dict(self):
            return {"step": 3}

        def load_state_dict(self, state):
            Generator.restored = state

    wrapped = LoaderWithSamplerState(Loader(), Generator())
    state = wrapped.state_dict()
    assert state == {"position": 7, LoaderWithSamplerState.KEY: {"step": 3}}
    wrapped.load_state_dict(state)
    assert Loader.loaded == {"position": 7} and Generator.restored == {"step": 3}
    wrapped.load_state_dict({"position": 2})  # a checkpoint written before the wrapper: the loader's part only
    assert Loader.loaded == {"position": 2} and Generator.restored == {"step": 3}


def _upstream_prompt_loader(count: int, global_seed: int):
    """The prompt loader as upstream's controller builds it (strategy.setup_dataloader without a process group:
    a shuffling StatefulDataLoader), with torch's global RNG in some state nobody chose."""
    from types import SimpleNamespace

    from openrlhf.utils.deepspeed.deepspeed import DeepspeedStrategy

    torch.manual_seed(global_seed)
    return DeepspeedStrategy.setup_dataloader(SimpleNamespace(seed=0), list(range(count)), 1, True, True,
                                              collate_fn=lambda rows: rows[0])


def test_the_launchers_prompt_order_follows_the_seed_and_survives_a_resume():
    """Upstream's loader shuffles from an unseeded generator: two runs see different orders. Seeded from
    --train.seed, every run of a seed sees the permutation torch.randperm draws from that seed, and a loader restored
    from a state_dict taken mid-epoch goes on with the same order."""
    from openrlhf_ada.trainer.ppo_utils.loader_state import seed_prompt_order

    unseeded = [list(_upstream_prompt_loader(9, g)) for g in (1, 2)]
    assert unseeded[0] != unseeded[1]  # the order upstream's controller gets depends on an RNG it never seeds
    expected = torch.randperm(9, generator=torch.Generator().manual_seed(42)).tolist()
    orders = []
    for global_seed in (1, 2):
        loader = _upstream_prompt_loader(9, global_seed)
        assert seed_prompt_order(loader, 42)
        orders.append(list(loader))
    assert orders == [expected, expected]
    other = _upstream_prompt_loader(9, 1)
    seed_prompt_order(other, 7)
    assert list(other) != expected

    loader = _upstream_prompt_loader(9, 3)
    seed_prompt_order(loader, 42)
    it = iter(loader)
    first = [next(it) for _ in range(4)]
    state = loader.state_dict()
    resumed = _upstream_prompt_loader(9, 4)
    seed_prompt_order(resumed, 42)
    resumed.load_state_dict(state)
    assert first + list(resumed) == expected
    assert not seed_prompt_order(object(), 42)  # nothing to seed: said so, nothing touched
