"""The stall watchdog of a training generation step (`--fault.engine_timeout`): a step fails when the rollout engines
show no progress for the timeout, and a slow but progressing generation goes on. Used by the samples generator's
round loop (openrlhf_ada/trainer/ppo_utils/round_loop.py)."""

import time

import ray

TOKEN_POLL_TIMEOUT = 10.0  # seconds the stall watchdog waits for the engines' token counts


class StallWatch:
    """The stall watchdog of a training generation step (`--fault.engine_timeout`): the step fails when the engines
    show no progress for the timeout. Progress is a rollout coming back (`progress()`: a round, or with --ada.cancel
    one sample) or a token generated on any engine.

    Tokens are read from vLLM's own running count (`vllm_generation_tokens` of the project's engine actor, which
    vLLM's output handler updates after every engine step, so it grows inside a request that runs for an hour).
    The counts are asked of every engine each time the loop's wait returns with nothing (`poll`): at most one call
    per engine and wait, collected for at most TOKEN_POLL_TIMEOUT s; an engine that has not answered yet is not
    asked again until it has, so a hung actor gathers no calls. Any count above the one seen before is progress.
    The first counts are asked for (not awaited) when the step starts, so the tokens of the first wait count too.

    An engine without the method (upstream's RolloutRayActor, the hf engine) or answering None (vLLM keeping no
    statistics) shows progress only through finished requests. The derived timeout is then the longer one that
    covers a whole request (`FaultConfig.engine_timeout_for`); the shorter one of token progress applies while
    every engine has reported a count.
    """

    def __init__(self, fault, engines):
        self.fault = fault
        self.engines = engines  # the generator's own list: lost engines leave it
        self.last_progress = time.monotonic()
        self.counts = {}  # engine -> the last count it reported
        self.grew = {}  # engine -> whether its count grew at the last poll
        self.asked = {}  # engine -> its call not collected yet
        self._ask()

    @property
    def interval(self) -> float:
        """Seconds the loop waits for a rollout before a check: 10, or half the shortest timeout when that is less,
        so that a stall is seen within about timeout + interval (+ the poll)."""
        return min(10.0, self.fault.engine_timeout_for(token_progress=True) / 2)

    def token_progress(self) -> bool:
        return bool(self.engines) and all(e in self.counts for e in self.engines)

    def timeout(self) -> float:
        return self.fault.engine_timeout_for(self.token_progress())

    def silence(self) -> float:
        return time.monotonic() - self.last_progress

    def progress(self) -> None:
        self.last_progress = time.monotonic()

    def _ask(self) -> list:
        """Ask each engine that has no call outstanding for its count; returns the new calls."""
        new = []
        for engine in self.engines:
            method = None if engine in self.asked else getattr(engine, "vllm_generation_tokens", None)
            if method is not None:
                try:
                    self.asked[engine] = method.remote()
                    new.append(self.asked[engine])
                except Exception:  # noqa: BLE001 - a dead actor: the loop's own wait finds it
                    pass
        return new

    def _collect(self, refs: list, timeout: float) -> None:
        """Take the counts of the calls among `refs` that answer within `timeout` seconds."""
        if not refs:
            return
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=timeout)[0])
        for engine, ref in list(self.asked.items()):
            if ref not in ready:
                continue
            del self.asked[engine]
            try:
                count = ray.get(ref)
            except Exception:  # noqa: BLE001 - a dead actor: the loop's own wait finds it
                count = None
            if count is None:
                continue
            before = self.counts.get(engine)
            self.grew[engine] = before is not None and count > before
            self.counts[engine] = count

    def poll(self) -> bool:
        """Collect the counts answered since the last poll, ask every engine again and wait for the new answers
        (at most TOKEN_POLL_TIMEOUT s, or the wait interval when shorter; a late answer is taken at the next poll);
        True (and progress noted) when any engine's count grew."""
        self.grew = {}
        self._collect(list(self.asked.values()), 0)
        self._collect(self._ask(), min(TOKEN_POLL_TIMEOUT, self.interval))
        if any(self.grew.values()):
            self.progress()
            return True
        return False

    def describe(self, unfinished=None) -> str:
        """One phrase per engine: its unfinished requests (`unfinished`, one string per engine) and its token count,
        or why there is none."""
        out = []
        for i, engine in enumerate(self.engines):
            if engine in self.asked:
                what = "no token count (did not answer)"
            elif engine in self.counts:
                what = f"vLLM's token count {self.counts[engine]:.0f}, unchanged"
            else:
                what = "no token count (only finished requests show its progress)"
            requests = f"{unfinished[i]} requests unfinished, " if unfinished is not None else ""
            out.append(f"engine {i} of {len(self.engines)}: {requests}{what}")
        return "; ".join(out)
