"""The merged model a LoRA policy sends to its vLLM engines (openrlhf_ada.trainer.ray.lora_weights), checked against
peft's own `merge_and_unload` and against the LoRA model's own forward pass."""

from __future__ import annotations

import copy

import pytest
import torch


@pytest.fixture
def lora_model(tiny_llama_path):
    """The tiny Llama in bfloat16 wrapped as upstream's Actor wraps it (peft LoRA, all linear layers, r=8), with
    non-zero adapters (B starts at zero: a merged sync would then equal the base model)."""
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_llama_path, dtype=torch.bfloat16)
    model = get_peft_model(base, LoraConfig(task_type=TaskType.CAUSAL_LM, r=8, lora_alpha=16,
                                            target_modules="all-linear", lora_dropout=0, bias="none"))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    return model


def test_sync_units_are_the_base_models_names_and_dtypes_merged_as_peft_merges(lora_model, tiny_llama_path):
    from transformers import AutoModelForCausalLM

    from openrlhf_ada.trainer.ray.lora_weights import is_lora_model, sync_units, unit_tensor

    assert is_lora_model(lora_model)
    plain = AutoModelForCausalLM.from_pretrained(tiny_llama_path, dtype=torch.bfloat16)
    assert not is_lora_model(plain)
    expected = copy.deepcopy(lora_model).merge_and_unload()  # peft's own merge, in place on a copy
    sent = {unit.name: unit_tensor(unit) for unit in sync_units(lora_model)}
    # what the engines load for the plain model (upstream's sync without LoRA), name for name
    assert list(sent) == [name for name, _ in plain.named_parameters()]
    merged_layers = 0
    for name, tensor in sent.items():
        reference = dict(expected.named_parameters())[name]
        assert tensor.dtype == torch.bfloat16 and tensor.shape == reference.shape, name
        # peft adds the delta in bf16; here it is added in float32 and rounded once: at most one bf16 step apart
        assert torch.allclose(tensor.float(), reference.float(), rtol=1e-2, atol=1e-3), name
        merged_layers += not torch.equal(tensor, dict(plain.named_parameters())[name])
    assert merged_layers == 7 * plain.config.num_hidden_layers  # q, k, v, o, gate, up, down of every layer


def test_the_merged_model_computes_what_the_lora_model_computes(lora_model, tiny_llama_path):
    from transformers import AutoModelForCausalLM

    from openrlhf_ada.trainer.ray.lora_weights import sync_units, unit_tensor

    engine = AutoModelForCausalLM.from_pretrained(tiny_llama_path, dtype=torch.bfloat16)
    before = {name: p.detach().clone() for name, p in engine.named_parameters()}
    engine.load_state_dict({u.name: unit_tensor(u) for u in sync_units(lora_model)}, strict=False)
    ids = torch.randint(3, engine.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = torch.log_softmax(lora_model(input_ids=ids).logits.float(), -1)
        got = torch.log_softmax(engine(input_ids=ids).logits.float(), -1)
        stale = torch.log_softmax(AutoModelForCausalLM.from_pretrained(tiny_llama_path, dtype=torch.bfloat16)(
            input_ids=ids).logits.float(), -1)
    assert any(not torch.equal(before[n], p) for n, p in engine.named_parameters())
    gap, stale_gap = (got - want).abs().max().item(), (stale - want).abs().max().item()
    assert gap < 0.05 < stale_gap, (gap, stale_gap)  # the adapters matter, and the merged model has them


def test_train_local_refuses_lora_it_would_ignore(tmp_path, refused):
    """train_local trains every weight in plain PyTorch: a LoRA rank would change nothing, so it is refused."""
    from openrlhf_ada.cli.train_local import parse_local_args

    data = tmp_path / "data.jsonl"
    data.write_text('{"input": "1+1", "label": "2"}\n')
    argv = ["--actor.model_name_or_path", str(tmp_path), "--data.prompt_dataset", str(data),
            "--reward.remote_url", "openrlhf_ada/rewards/toy.py", "--algo.advantage.estimator", "group_norm",
            "--rollout.n_samples_per_prompt", "4", "--local.output_dir", str(tmp_path / "run"), "--ds.lora.rank", "8"]
    refused(parse_local_args, argv, ["--ds.lora.rank 8", "train_local", "openrlhf_ada.cli.train_ppo_ray"])
