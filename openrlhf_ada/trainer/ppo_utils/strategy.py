"""The sampling strategy of the training steps, chosen once from the flags.

    fixed n   (--ada.enable off, n >= 2)  each prompt one round of n, every sample kept    `FixedN`     `FixedNStep`
    Seq       (--ada.enable)              rounds until the exit rule holds, n kept          `Seq`        `RoundStep`
    Est       (--ada.strategy est)        one round of an allocated count, every one kept   `Est`        `EstStep`
    upstream  (n = 1, or a reward model that scores after generation)                     None

Each strategy is a frozen config of its own (args.sampling_config builds it: no config carries another strategy's
settings, and the experience maker reads its baseline and prompt weight from the same build) and a step (round_loop.py, est_step.py); the transport (transport.py) is the
stream of `--ada.cancel` or one call per engine for a dispatch's rounds. The samples generator reads the choice, never the flags
again, and what comes after a step's build reads the groups from the samples (their `ada_group` ids).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from openrlhf_ada.algorithms.reinforce_ada import Est, FixedN, Seq
from openrlhf_ada.args import sampling_config
from openrlhf_ada.trainer.ppo_utils.est_step import EstStep
from openrlhf_ada.trainer.ppo_utils.round_loop import FixedNStep, RoundStep
from openrlhf_ada.trainer.ppo_utils.transport import RoundTransport, StreamTransport


@dataclass(frozen=True)
class Sampling:
    """A training step's strategy: its name, the config its pools or its allocation read, its step, its transport,
    whether a short step's leftover groups wait for the next episode (`carries_short_step`: fixed n and Seq; Est
    drops them, as a carried group of its own size would change the next step's total), and whether it keeps a
    per-prompt history across epochs (`keeps_history`: Est keeps its estimator there, Seq with --ada.history its
    plans; --ada.skip greso keeps one for any strategy, the generator's concern)."""

    name: str
    config: Union[FixedN, Seq, Est]
    step: type
    transport: type
    carries_short_step: bool
    keeps_history: bool


def choose_sampling(args) -> Optional[Sampling]:
    """The strategy the flags ask for; None: upstream's own generation (n = 1, or a reward model scores the samples
    after generation: the engines return no reward for a loop to judge, and the launcher refuses --ada.enable then)."""
    config = sampling_config(args)
    if isinstance(config, Est):
        return Sampling("est", config, EstStep, RoundTransport, carries_short_step=False, keeps_history=True)
    if isinstance(config, Seq):
        transport = StreamTransport if config.cancel else RoundTransport
        return Sampling("seq", config, RoundStep, transport, carries_short_step=True, keeps_history=config.history)
    if isinstance(config, FixedN):
        return Sampling("fixed_n", config, FixedNStep, RoundTransport, carries_short_step=True, keeps_history=False)
    return None
