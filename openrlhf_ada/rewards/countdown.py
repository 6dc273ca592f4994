"""Countdown reward for OpenRLHF: ``--reward.remote_url openrlhf_ada/rewards/countdown.py``.

Data: ``python -m openrlhf_ada.cli.prepare_data countdown ...`` (numbers and targets from reasoning-gym's
``countdown`` generator, so every target is reachable). The label is a JSON object in a string:
``{"task": "countdown", "numbers": [25, 3, 7], "target": 82, "use_all": false, "reference": "25*3 + 7"}``.

The answer is the content of the LAST ``<answer>...</answer>`` block of the response (the text after the prompt):
an arithmetic expression over integer literals with ``+ - * /``, parentheses and unary signs (``×``, ``·``, ``÷``
and the Unicode minus are read as ``* * / -``). It may end with ``= <integer>``, which must then be its value. The
expression is never handed to ``eval``/sympy: it is parsed with :mod:`ast`, every node is checked against that short
list, and it is evaluated with exact fractions (division by zero makes it invalid). Each literal must be one of the
given numbers, each used at most as often as it is given; with ``"use_all": true`` every number exactly once.

Binary: reward = score = 1 if the expression is valid, uses allowed numbers only and equals the target, else 0 (also
the lowest reward: no answer block, an answer over 1,000 characters, bad syntax, bad label).

``extra_logs``: ``countdown_answer_found``, ``countdown_answer_parsed`` (valid syntax), ``countdown_answer_correct``
and ``countdown_reason``.
"""

from __future__ import annotations

import ast
import operator
from collections import Counter
from fractions import Fraction

# OpenRLHF loads this file by path; the package must be importable there (installed, or Ray py_modules).
from openrlhf_ada.rewards import _common  # noqa: E402

Outcome = _common.Outcome

TASK = "countdown"
FLAGS = ("answer_found", "answer_parsed", "answer_correct")
MAX_EXPRESSION_CHARS = 1_000
MAX_NODES = 256  # a few given numbers never need more; bounds the evaluator's recursion

_ALLOWED_CHARS = frozenset("0123456789+-*/() \t\n")
_TRANSLATE = str.maketrans({"×": "*", "·": "*", "∗": "*", "÷": "/", "−": "-", "\u00a0": " "})
_BINARY_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


class ExpressionError(ValueError):
    """The text is not an expression this task accepts."""


def parse_expression(text: str) -> tuple[list[int], int | None, ast.Expression]:
    """Check ``text``; return ``(literals, claimed, tree)`` where ``claimed`` is the number after ``=`` (or None)."""
    expr = text.translate(_TRANSLATE).strip()
    claimed = None
    if "=" in expr:
        left, _, right = expr.partition("=")
        right = right.strip()
        if not right.isascii() or not right.isdigit():
            raise ExpressionError("only '= <integer>' may follow the expression")
        expr, claimed = left.strip(), int(right)
    if not expr:
        raise ExpressionError("empty expression")
    if not set(expr) <= _ALLOWED_CHARS or "**" in expr or "//" in expr:
        raise ExpressionError("characters other than digits, + - * / ( ) and spaces")
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise ExpressionError(f"syntax: {exc}") from None
    literals = []
    for count, node in enumerate(ast.walk(tree)):  # iterative: no recursion on hostile nesting
        if count >= MAX_NODES:
            raise ExpressionError(f"more than {MAX_NODES} syntax nodes")
        if isinstance(node, ast.Constant):
            if type(node.value) is not int:
                raise ExpressionError(f"literal {node.value!r} is not an integer")
            literals.append(node.value)
        elif not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, *_BINARY_OPS, ast.UAdd, ast.USub)):
            raise ExpressionError(f"{type(node).__name__} is not allowed")
    return literals, claimed, tree


def evaluate(node: ast.AST) -> Fraction:
    """Exact value of a tree that :func:`parse_expression` accepted."""
    if isinstance(node, ast.Expression):
        return evaluate(node.body)
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp):
        value = evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = evaluate(node.left), evaluate(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ExpressionError("division by zero")
        return _BINARY_OPS[type(node.op)](left, right)
    raise ExpressionError(f"{type(node).__name__} is not allowed")


def _read_label(label) -> dict | None:
    data = _common.parse_json_label(label)
    if not data:
        return None
    numbers, target = data.get("numbers"), data.get("target")
    if not isinstance(numbers, list) or not numbers or not all(type(n) is int for n in numbers):
        return None
    if type(target) is not int:
        return None
    return {"numbers": numbers, "target": target, "use_all": bool(data.get("use_all", False))}


def score_one(response: str, prompt: str, label) -> Outcome:
    """The verdict on one response (the text after the prompt)."""
    data = _read_label(label)
    if data is None:
        _common.log_reason(TASK, "bad_label", repr(label)[:200])
        return Outcome(0.0, 0.0, "bad_label")
    if not response.strip():
        return Outcome(0.0, 0.0, "empty_response")
    answer = _common.last_tag_block(response, "answer")
    if answer is None or not answer.strip():
        return Outcome(0.0, 0.0, "no_answer")
    flags = {"answer_found": 1.0}
    if len(answer) > MAX_EXPRESSION_CHARS:
        return Outcome(0.0, 0.0, "answer_too_long", flags)
    try:
        literals, claimed, tree = parse_expression(answer)
    except ExpressionError:
        return Outcome(0.0, 0.0, "unparsable_answer", flags)
    flags["answer_parsed"] = 1.0
    given, used = Counter(data["numbers"]), Counter(literals)
    if used - given or (data["use_all"] and used != given):
        return Outcome(0.0, 0.0, "invalid_numbers", flags)
    try:
        value = evaluate(tree)
    except ExpressionError:
        return Outcome(0.0, 0.0, "unparsable_answer", flags)
    correct = value == data["target"] and (claimed is None or value == claimed)
    flags["answer_correct"] = float(correct)
    return Outcome(float(correct), float(correct), "correct" if correct else "wrong_answer", flags)


def reward_func(queries, prompts, labels):
    """OpenRLHF's entry point: ``{"rewards", "scores", "extra_logs"}`` as float tensors of shape ``[len(queries)]``."""
    return _common.score_batch(
        queries, prompts, labels, task=TASK, score_one=score_one, lowest=0.0, flag_names=FLAGS
    )
