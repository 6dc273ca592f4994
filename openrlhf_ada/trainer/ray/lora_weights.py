"""What a vLLM engine gets from a LoRA policy: the merged model, under the base model's own parameter names.

With `--ds.lora.rank > 0` upstream's actor is a peft `PeftModel`: each adapted layer holds its frozen base weight
(`...q_proj.base_layer.weight`, the model's dtype) and the adapter's matrices (`...q_proj.lora_A.default.weight`,
float32, peft's default), all under the prefix `base_model.model.`. The vLLM engines hold the plain base model in
the engine dtype and load weights by the base model's names, so they can load neither the adapter's matrices nor
the prefixed names (upstream's weight sync sends `named_parameters()` as they are). What the policy computes is the
base weight plus `scaling * B @ A` for every active adapter (peft's `get_delta_weight`): that sum, computed in
float32 and rounded once to the base weight's dtype, is what each adapted layer sends, named as the base model names
it (`model.layers.0.self_attn.q_proj.weight`). Every other parameter is sent as it is, under the base model's name.

`sync_units` lists what to send, in `named_parameters()` order, each with the parameters that must be gathered
(ZeRO-3) before `unit_tensor` can compute it. Pure torch and peft: no Ray, DeepSpeed or vLLM here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch

_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def is_lora_model(model) -> bool:
    """Is `model` (a DeepSpeed engine's module) a peft model with LoRA layers?"""
    from peft.tuners.lora import LoraLayer

    return hasattr(model, "get_base_model") and any(isinstance(m, LoraLayer) for m in model.modules())


@dataclass(frozen=True)
class SyncUnit:
    """One tensor for the engines: its name in the base model, the parameters it is computed from (to gather
    first), and the LoRA layer whose merged weight it is (None: a parameter sent as it is)."""

    name: str
    params: Tuple[torch.nn.Parameter, ...]
    layer: Optional[torch.nn.Module] = None

    @property
    def trainable(self) -> bool:
        return self.layer is not None or any(p.requires_grad for p in self.params)


def sync_units(model) -> List[SyncUnit]:
    """The tensors that make up the merged model (module docstring), for a peft LoRA model."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    layers = {name: module for name, module in base.named_modules() if isinstance(module, LoraLayer)}
    units = []
    for name, param in base.named_parameters():
        parts = name.split(".")
        owner = next((".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1) if ".".join(parts[:i]) in layers),
                     None)
        if owner is None:
            units.append(SyncUnit(name, (param,)))
            continue
        rest = name[len(owner) + 1:]
        if rest == "base_layer.weight":
            units.append(SyncUnit(f"{owner}.weight", tuple(layers[owner].parameters()), layers[owner]))
        elif rest.startswith("base_layer."):  # e.g. the base layer's bias: unchanged by the adapter
            units.append(SyncUnit(f"{owner}.{rest[len('base_layer.'):]}", (param,)))
        # else: the adapter's own matrices, already in the merged weight
    return units


def unit_tensor(unit: SyncUnit) -> torch.Tensor:
    """The tensor to send for `unit` (its parameters gathered): a parameter's data, or base + the active
    adapters' deltas, summed in float32 and rounded once to the base weight's dtype."""
    if unit.layer is None:
        return unit.params[0].data
    layer = unit.layer
    weight = layer.get_base_layer().weight
    if weight.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"LoRA weight sync: the base weight of {unit.name} is {weight.dtype} (a quantized base, "
                         "--ds.load_in_4bit?); the vLLM engines need it merged in a float dtype")
    if layer.merged or layer.disable_adapters:  # the base weight already is what the layer computes
        return weight.data
    merged = weight.data.float()
    for adapter in layer.active_adapters:
        if adapter not in layer.lora_A and adapter not in getattr(layer, "lora_embedding_A", {}):
            continue
        if layer.use_dora.get(adapter) or layer.lora_bias.get(adapter):
            raise ValueError(f"LoRA weight sync: {unit.name} uses DoRA or a LoRA bias, which the merged sync does "
                             "not compute")
        merged = merged + layer.get_delta_weight(adapter).float()
    return merged.to(weight.dtype)
