"""Pre-rollout skip rules (`--ada.skip`): which drawn prompts are skipped before they are rolled out, from what they
showed in earlier epochs. A skipped prompt generates nothing, is counted, and the next prompt of the data takes its
slot. Registered like the exit rules (registry.py), one decorated class each:

    @register_skip_rule("never_twice", "a prompt saturated last epoch is skipped")
    class NeverTwice(SkipRule):
        keeps_history = True

        def skips(self, history, key, epoch):
            return any(r.saturated for r in history.get(key) if r.epoch == epoch - 1)

The samples generator builds the rule of `--ada.skip` once per run, as `rule(args, seed=...)` (`args`: the parsed
flags, from which a rule reads its own settings; `seed`: the run's), and calls it as `SkipRule` says: the history
config it runs with, a decision per drawn prompt, the metrics and state after each step, the checkpoint.

The built-in rules:

- `none` (the default): the per-prompt history's own skip, nothing more; it acts only with `--ada.history` (a prompt
  saturated in its last `--ada.history_window` epochs skipped with probability `--ada.history_skip`, decided in the
  history's plan, history.py);
- `greso`: GRESO's (greso.py), which replaces the history's own skip and keeps the history for itself.

Pure python: no torch, no Ray, no vLLM."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Iterable, Optional, Tuple

from openrlhf_ada.algorithms.greso import GresoConfig, GresoState, adapt, decide_skip, skip_rng, zero_variance_counts
from openrlhf_ada.algorithms.history import HistoryConfig, PromptHistory
from openrlhf_ada.algorithms.registry import Registry

logger = logging.getLogger(__name__)

#: Skip rules by name (`--ada.skip`): classes built as rule(args, seed=...), subclasses of SkipRule.
SKIP_RULES = Registry("skip rule")
register_skip_rule = SKIP_RULES.register


class SkipRule:
    """What the samples generator asks of a skip rule; this base skips nothing itself and holds no state."""

    #: True: the run keeps the per-prompt history for this rule even without --ada.history or Est.
    keeps_history = False

    def __init__(self, args, *, seed: int):
        self.seed = seed

    def history_config(self, config: HistoryConfig) -> HistoryConfig:
        """The history's settings under this rule (unchanged: the history's own skip stays as its flags say)."""
        return config

    def skips(self, history: PromptHistory, key: str, epoch: int) -> bool:
        """Skip the drawn prompt `key` in `epoch`, before the history's plan? (`history`: None without one.)"""
        return False

    def after_step(self, groups: Iterable[Tuple[int, int]], epoch: int, skipped: int) -> dict:
        """The rule's metrics of a step whose rolled-out groups were `groups` ((num_pos, num_neg) each) and which
        skipped `skipped` prompts; a rule that adapts does it here."""
        return {}

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the rule (merged into the samples generator's state)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore from the samples generator's state."""


@register_skip_rule("none", "only --ada.history's own skip, with --ada.history_skip and --ada.history_window")
class HistorySkip(SkipRule):
    """The per-prompt history's own skip: decided in the history's plan (history.py `skip_decision`), so this rule
    changes nothing; with no history (no --ada.history) nothing is skipped."""


@register_skip_rule("greso", "GRESO's, from each prompt's zero-variance streak, replacing --ada.history's own")
class GresoSkip(SkipRule):
    """GRESO's skip (greso.py): a prompt on a streak of all-correct (all-wrong) groups skipped with probability
    1 - max(p_easy^z, keep_floor) (p_hard), p_easy and p_hard moved after each step toward the target share; the
    history's own skip off (GRESO's replaces it; its plan still sizes first rounds)."""

    keeps_history = True

    def __init__(self, args, *, seed: int):
        super().__init__(args, seed=seed)
        self.config = GresoConfig.from_flags(args)
        self.state = GresoState.initial(self.config)

    def history_config(self, config: HistoryConfig) -> HistoryConfig:
        return replace(config, skip=0.0)

    def skips(self, history: Optional[PromptHistory], key: str, epoch: int) -> bool:
        """From the prompt's groups of earlier epochs in the history and the current p_easy / p_hard, one draw keyed
        by (seed, epoch, key)."""
        groups = [(r.num_pos, r.num_neg) for r in history.get(key) if r.epoch < epoch]
        return decide_skip(groups, self.state, self.config, skip_rng(self.seed, epoch, key))

    def after_step(self, groups: Iterable[Tuple[int, int]], epoch: int, skipped: int) -> dict:
        """p_easy and p_hard moved by the step's groups; the step's skips, its epoch and the values the next step
        skips with, as metrics."""
        easy, hard, total = zero_variance_counts(groups)
        self.state = adapt(self.state, easy, hard, total, self.config, epoch=epoch)
        return {"ada/greso_skipped": float(skipped), "ada/epoch": float(epoch),
                "ada/greso_p_easy": self.state.p_easy, "ada/greso_p_hard": self.state.p_hard}

    def state_dict(self) -> dict:
        return {"greso": self.state.to_dict()}

    def load_state_dict(self, state: dict) -> None:
        saved = state.get("greso")
        self.state = GresoState.from_dict(saved) if saved is not None else GresoState.initial(self.config)
        if saved is None:
            logger.warning("--ada.skip greso: the checkpoint holds no GRESO state (written without --ada.skip "
                           "greso); p_easy and p_hard start from their initial value")
