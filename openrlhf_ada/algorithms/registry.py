"""Named rules that a user adds with one decorated function: Reinforce-Ada's exit rules (`--ada.mode`), ADORA's
weight rules (`--adora.variant`) and Reinforce-Ada-Est's allocation rules (`--ada.est_allocation`); and with one
decorated class, the pre-rollout skip rules (`--ada.skip`, skip_rules.py).

A registry maps a name to the rule's function and a one-line description. The flag's choices and help text are
read from it when the parser is built, and the frozen configs check a name against it, so a new rule is one
function plus its tests:

    @register_exit_rule("two_pos", ">= 2 correct")
    def two_positives(num_pos: int, num_neg: int, n: int) -> bool:
        return num_pos >= 2

A rule registered in a module that the training processes import (e.g. next to the built-in ones) works in every
one of them; one registered only in the launching script is unknown to the Ray actors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Tuple

from openrlhf_ada.algorithms._checks import check_choice


@dataclass(frozen=True)
class Rule:
    name: str
    fn: Callable
    help: str  # what the rule does, in the flag's help: "name (help)"


class Registry:
    """Rules by name, in the order registered (the order the flag's help lists them)."""

    def __init__(self, what: str):
        self.what = what
        self.rules: Dict[str, Rule] = {}

    def register(self, name: str, help: str) -> Callable[[Callable], Callable]:
        """Decorator: the function becomes the rule `name`; returned unchanged. A name registered twice is a
        ValueError (one name, one rule)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{self.what} name {name!r} is invalid; accepted values: Python identifiers")

        def add(fn: Callable) -> Callable:
            if name in self.rules:
                raise ValueError(f"{self.what} {name!r} is already registered ({self.rules[name].fn.__qualname__})")
            self.rules[name] = Rule(name, fn, help)
            return fn

        return add

    def unregister(self, name: str) -> None:
        del self.rules[name]

    def names(self) -> Tuple[str, ...]:
        return tuple(self.rules)

    def get(self, name: str, parameter: str) -> Callable:
        """The rule's function; a name not registered is a ValueError naming `parameter` and the accepted names."""
        check_choice(parameter, name, self.names())
        return self.rules[name].fn

    def describe(self) -> str:
        """The rules for a flag's help: "a (what a does), b (...) or c (...)"."""
        parts = [f"{rule.name} ({rule.help})" for rule in self.rules.values()]
        return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} or {parts[-1]}"
