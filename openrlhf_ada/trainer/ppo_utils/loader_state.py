"""The prompt loader's order and position, and the sampler's state, checkpointed together."""

from __future__ import annotations

import torch


class LoaderWithSamplerState:
    """Upstream's prompt dataloader with the samples generator's state inside its state_dict.

    Both upstream trainers checkpoint `prompts_dataloader.state_dict()` with every step (sync: PPOTrainer.fit;
    async: GenerateSamplesActor.fit builds the client states) and give it back to `load_state_dict` on resume. The
    sampler's state belongs to the same moment as the data position, so it travels with it, under one key that
    this wrapper adds and removes; everything else is the loader's. `generator`: anything with `state_dict()` and
    `load_state_dict(state)` (the project's samples generator)."""

    KEY = "openrlhf_ada_sampler"

    def __init__(self, loader, generator):
        self._loader, self._generator = loader, generator

    def state_dict(self) -> dict:
        return {**self._loader.state_dict(), self.KEY: self._generator.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        state = dict(state)
        sampler = state.pop(self.KEY, None)
        self._loader.load_state_dict(state)
        if sampler is not None:
            self._generator.load_state_dict(sampler)

    def __iter__(self):
        return iter(self._loader)

    def __len__(self):
        return len(self._loader)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def seed_prompt_order(loader, seed: int) -> bool:
    """Make the order in which the cluster trainer draws prompts a function of `seed` (`--train.seed`).

    Upstream's controller builds its prompt loader with `shuffle=True` and never seeds torch in that process, so the
    loader's sampler seeds its own generator from torch's unseeded global RNG: every run, same seed or not, sees the
    prompts in a different order. Seeding the sampler's generator before the first epoch fixes the order; its state
    then travels in the loader's state_dict as before, so a resumed run continues the same order. Returns whether
    the loader had such a generator (a loader without shuffling, or with a distributed sampler, has none)."""
    generator = getattr(getattr(loader, "sampler", None), "generator", None)
    if not isinstance(generator, torch.Generator):
        return False
    generator.manual_seed(int(seed))
    return True
