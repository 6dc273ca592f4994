"""`HFRolloutActor`: an engine with RolloutRayActor's interface, backed by transformers' `generate` instead of vLLM.

It subclasses upstream's RolloutRayActor and replaces only the engine underneath: `generate_responses` (upstream's)
still runs upstream's SingleTurnAgentExecutor (tokenisation, truncation, reward file, response dicts), each
response handed back in the project's compact format (responses.py), as the vLLM actor's, and `generate_rounds`
runs several prompts' rounds in one call as the vLLM actor's does (rounds_call.py); this class answers its
`generate(prompt_token_ids, sampling_params)` calls. For machines where vLLM cannot run a model, and for exactly
reproducible runs: the k-th sample of a prompt within a step is drawn with a seed derived from
(seed, step, prompt tokens, k) (`request_seeds.py`), so it does not depend on other prompts or on scheduling.

It has no `generate_stream` / `cancel_stream`: `--ada.cancel` is refused with `--local.engine hf` when the flags are
parsed (its `generate` runs one request at a time and blocks the event loop, so a request could not be interrupted,
and which waiting ones a cancel reached would depend on timing). `--ada.history` works with it.
"""

from types import SimpleNamespace

import ray
import torch
from openrlhf.trainer.ray.vllm_engine import RolloutRayActor, _load_agent_executor
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from openrlhf_ada.trainer.ray.request_seeds import RequestSeeds
from openrlhf_ada.trainer.ray.responses import compact_response
from openrlhf_ada.trainer.ray.reward_guard import GuardedRewardExecutor
from openrlhf_ada.trainer.ray.rounds_call import generate_rounds
from openrlhf_ada.trainer.ray.vllm_engine import reward_timeout_from_env


class _HFRolloutActor(RolloutRayActor.__ray_actor_class__):
    def __init__(self, model: str, *, remote_rm_url=None, agent_func_path=None, seed: int = 0, reward_timeout=None,
                 **_ignored):
        torch.set_num_threads(1)
        self.executor = (
            _load_agent_executor(agent_func_path)
            if agent_func_path
            else GuardedRewardExecutor(remote_rm_url, timeout=reward_timeout_from_env(reward_timeout))
        )
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        tokenizer = AutoTokenizer.from_pretrained(model)
        self.eos_token_id = tokenizer.eos_token_id
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_id
        self.seeds, self._unfinished = RequestSeeds(seed), 0

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        if multi_modal_data:
            raise NotImplementedError("HFRolloutActor generates text only; use the vLLM engine for images")
        seed = self.seeds.next(prompt_token_ids)
        self._unfinished += 1
        try:
            torch.manual_seed(seed)
            with torch.no_grad():
                out = self.model.generate(
                    torch.tensor([prompt_token_ids]),
                    attention_mask=torch.ones(1, len(prompt_token_ids), dtype=torch.long),
                    do_sample=sampling_params.temperature > 0,
                    temperature=sampling_params.temperature or None,
                    top_p=sampling_params.top_p,
                    top_k=sampling_params.top_k if sampling_params.top_k and sampling_params.top_k > 0 else None,
                    max_new_tokens=sampling_params.max_tokens,
                    min_new_tokens=sampling_params.min_tokens or 0,
                    eos_token_id=self.eos_token_id,
                    pad_token_id=self.pad_token_id,
                )
        finally:
            self._unfinished -= 1
        tokens = out[0, len(prompt_token_ids) :].tolist()
        if self.eos_token_id in tokens:
            tokens = tokens[: tokens.index(self.eos_token_id) + 1]
            reason = "stop"
        else:
            reason = "length"
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=tokens, finish_reason=reason, logprobs=None)])

    async def generate_responses(self, *args, **kwargs):
        """Upstream's, each response compact (`compact_response`: token ids and log-probs as arrays)."""
        return [compact_response(r) for r in await super().generate_responses(*args, **kwargs)]

    async def generate_rounds(self, rounds, sampling_params, max_length: int, hf_tokenizer):
        """Several prompts' rounds in one call, each handed back once all its samples are back (rounds_call.py)."""
        async for message in generate_rounds(self, rounds, sampling_params, max_length, hf_tokenizer):
            yield message

    def get_num_unfinished_requests(self) -> int:
        return self._unfinished

    def check_health(self) -> None:
        """The engine is this actor: answering is being healthy."""

    async def load_weights_from_file(self, path: str) -> None:
        self.model.load_state_dict(load_file(path), strict=True)

    async def reseed(self, epoch: int, seed=None) -> None:
        """Start a new step: per-prompt sample counters restart, seeds depend on this epoch (the step) and on `seed`
        (None: the engine's own, --train.seed; the held-out avg@k pass passes --eval.avg_seed)."""
        self.seeds.reseed(epoch, seed)


HFRolloutActor = ray.remote(_HFRolloutActor)
