"""One training generation step of Reinforce-Ada-Est (`--ada.strategy est`): allocate -> one dispatch -> collect ->
build.

`EstStep(generator, ...).run()` is the step. It shares the round loop's phases (round_loop.py: drawing with the
history's skips, dispatch to the engines, collection, failed rewards, lost engines, settling and the built batch)
and changes only what Est decides:

    allocate   each drawn prompt's count from its estimated pass rate (the Ada-EMA counts in the generator's
               `PromptHistory`), read once for the step's prompts before any of them is recorded: one round of that
               many samples, every one kept as the prompt's group (`FixedN`)
    replace    a prompt settled without a group (dropped, failed, filtered) passes its count to its replacement, so
               the step's total stays the budget (a replacement beyond those gets the budget per prompt)
    metrics    the allocation's (`ada/est_p_hat_mean`, `ada/est_seen_share`), and no round counts (one pass)

Every prompt is done after its one round, so the loop dispatches the step's prompts once (and replacements when
prompts are lost). algorithms/estimate.py holds the math (estimator, allocation rules, presets).
"""

from __future__ import annotations

from collections import deque
from typing import List, Optional

from openrlhf.utils.logging_utils import init_logger

from openrlhf_ada.algorithms.estimate import pass_rate_estimate
from openrlhf_ada.algorithms.reinforce_ada import FixedN, PromptPool, make_rng
from openrlhf_ada.trainer.ppo_utils.round_loop import FIXED_N_METRICS, ActivePrompt, Drawn, RoundStep

logger = init_logger(__name__)

#: What an Est step logs besides the fixed-n metrics.
EST_METRICS = FIXED_N_METRICS | {"ada/alloc_min", "ada/alloc_median", "ada/alloc_max", "ada/alloc_cov_n_r",
                                 "ada/est_p_hat_mean", "ada/est_seen_share", "ada/first_round_signal_share",
                                 "ada/epoch"}


def _dataset_size(generator) -> Optional[int]:
    """Prompts in the training data, when the prompt loader knows (for the no-history warning); None otherwise."""
    try:
        return len(generator.prompts_dataloader.dataset)
    except (AttributeError, TypeError):
        return None


class EstStep(RoundStep):
    """The state of one Est step: the round loop's, plus the allocation (module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_rounds = 1  # one pass
        self.allocated = False  # the step's first prompts got their counts (from the whole budget)
        self.lost_sizes: deque = deque()  # counts of prompts lost this step, for their replacements (first lost first)
        self.p_hat: dict = {}  # uid -> p_hat the prompt's count was allocated from
        self.seen = self.first = 0  # the step's allocation: its prompts sampled before (history), all of them

    def open_pools(self, drawn: List[Drawn]) -> List[ActivePrompt]:
        """allocate: each prompt's pool of one round, its size from the prompt's estimated pass rate (the step's
        first prompts: the whole budget; replacements: the counts of the prompts they replace)."""
        if not drawn:
            return []
        est = self.config.resolved
        counts = [self.history.ema_counts(d.key) for d in drawn]
        p_hat = pass_rate_estimate([c[0] for c in counts], [c[1] for c in counts], est.alpha, est.beta)
        if not self.allocated:  # every count read before any prompt of the step is recorded: a snapshot
            sizes = est.allocate(p_hat, len(drawn))
            self.allocated = True
            self.seen, self.first = sum(c[0] > 0 for c in counts), len(drawn)
        else:
            sizes = [self.lost_sizes.popleft() if self.lost_sizes else est.budget for _ in drawn]
        out = []
        for d, size, p in zip(drawn, sizes, p_hat.tolist()):
            config = FixedN(int(size), seed=self.config.seed, positive_threshold=self.config.positive_threshold)
            out.append(ActivePrompt(d.uid, d.prompt, d.label, d.image,
                                    PromptPool(config, rng=make_rng(*self.step_seed, d.uid)), d.key))
            self.p_hat[d.uid] = p
        return out

    def lost(self, item: ActivePrompt) -> None:
        """replace: the lost prompt's count goes to its replacement, so the step's total stays the budget."""
        self.lost_sizes.append(item.pool.config.n)

    def strategy_metrics(self) -> dict:
        if not self.p_hat:
            return {}
        warning = self.gen.est_watch.observe(self.seen, self.first, _dataset_size(self.gen))
        if warning:
            logger.warning(warning)
        return {"ada/est_p_hat_mean": sum(self.p_hat.values()) / len(self.p_hat),
                "ada/est_seen_share": self.seen / self.first}  # replacements left out

    def logged_metrics(self) -> Optional[set]:
        return EST_METRICS
