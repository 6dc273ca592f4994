"""Checks of `--reward.remote_url` before Ray starts: a reward-file mistake must not cost an engine start-up and a
step of failed samples.

Upstream (OpenRLHF 0.11.2) splits the flag on commas and, inside every rollout engine, treats the first entry as a
Python file when it ends in ``.py`` (it imports it and calls ``reward_func(queries, prompts, labels)`` with three
positional lists, in a worker thread) and everything else as HTTP reward servers. So a typo in a path, a file
without ``reward_func``, or a folder name is found only once the engines run, and a path that is not ``.py`` fails
every sample as an unreachable URL. Here, with no side effects (the file is parsed, never imported or run):

- each entry is an ``http://`` / ``https://`` URL with a host, or a ``.py`` file; a ``.py`` file must come alone
  (upstream would use it and ignore the rest);
- the file exists, is a file, parses (a syntax error names file and line), and defines ``reward_func`` at module
  level; when it is a ``def``, it is not ``async`` (upstream runs it in a thread and expects a dict back) and it
  can be called with three positional arguments.

A ``reward_func`` bound otherwise (an assignment, an import) is accepted as is: its signature cannot be read
without running the file. Errors in the file's imports still show when an engine loads it.

`scored_by_reward_model(args)` says where rewards come from: with ``--reward.model_name_or_path`` and neither
``--reward.remote_url`` nor ``--train.agent_func_path``, upstream builds a reward-model actor group, the engines return
reward=None, and the experience maker scores each step's samples after generation.
"""

from __future__ import annotations

import ast
import os
from typing import List, Optional, Sequence, Union
from urllib.parse import urlparse

FLAG = "--reward.remote_url"
ENTRY_POINT = "reward_func"
CALL = "reward_func(queries, prompts, labels)"


def scored_by_reward_model(args) -> bool:
    """Rewards come from upstream's reward model, after generation (module doc); no sample has one while it samples."""
    reward = getattr(args, "reward", None)
    agent = getattr(getattr(args, "train", None), "agent_func_path", None)
    return bool(getattr(reward, "model_name_or_path", None)) and not getattr(reward, "remote_url", None) and not agent


def reward_entries(remote_url: Union[str, Sequence[str], None]) -> List[str]:
    """The entries of --reward.remote_url: the raw comma-separated string (before upstream splits it) or a list."""
    if not remote_url:
        return []
    return remote_url.split(",") if isinstance(remote_url, str) else list(remote_url)


def _is_url(entry: str) -> bool:
    parsed = urlparse(entry)
    return parsed.scheme.lower() in ("http", "https")


def check_reward_url(remote_url: Union[str, Sequence[str], None], agent_func_path: Optional[str] = None) -> None:
    """Raise ValueError (what, which file, how to fix) unless --reward.remote_url is usable; see the module doc.
    With --train.agent_func_path the agent computes rewards and upstream ignores --reward.remote_url."""
    if agent_func_path:
        return
    entries = reward_entries(remote_url)
    for position, entry in enumerate(entries):
        if not entry.strip():
            raise ValueError(f"{FLAG} {','.join(entries)!r}: entry {position + 1} is empty (a stray comma?)")
        if _is_url(entry):
            if not urlparse(entry).netloc:
                raise ValueError(f"{FLAG} {entry!r}: an http(s) URL needs a host, e.g. http://host:5000/get_reward")
            continue
        if entry.endswith(".py"):
            if len(entries) > 1:
                raise ValueError(f"{FLAG} {','.join(entries)!r}: a reward file must be the only entry (upstream "
                                 "uses a .py file alone and ignores the rest); give one .py file, or http(s) URLs")
            check_reward_file(entry)
            continue
        kind = "a folder" if os.path.isdir(entry) else "an existing file" if os.path.isfile(entry) else "not found"
        raise ValueError(
            f"{FLAG} {entry!r} is neither a .py reward file nor an http(s):// URL ({kind}); upstream would send every "
            f"sample to it as a reward server and all would fail. Pass a Python file that defines {CALL}, or a URL "
            "such as http://host:5000/get_reward"
        )


def check_reward_file(path: str) -> None:
    """Static checks of a reward file (see the module doc); raises ValueError naming the file (and line)."""
    if os.path.isdir(path):
        raise ValueError(f"{FLAG} {path!r} is a folder; pass the reward file inside it")
    if not os.path.isfile(path):
        raise ValueError(f"{FLAG} {path!r}: reward file not found (working directory {os.getcwd()!r}; a relative "
                         "path is read from there)")
    try:
        with open(path, "rb") as f:
            source = f.read()
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        raise ValueError(f"{FLAG}: {path}:{e.lineno}: syntax error in the reward file: {e.msg}") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{FLAG}: {path}: cannot read the reward file: {e}") from None
    bindings = list(_module_bindings(tree.body, ENTRY_POINT))
    if not bindings:
        raise ValueError(f"{FLAG}: {path} defines no {ENTRY_POINT} at module level; upstream calls {CALL} with "
                         "three lists (one sample each) and expects {'rewards': ..., 'scores': ..., 'extra_logs': ...}")
    for node in bindings:
        if isinstance(node, ast.AsyncFunctionDef):
            raise ValueError(f"{FLAG}: {path}:{node.lineno}: {ENTRY_POINT} is 'async def'; upstream calls it in a "
                             "worker thread and needs the result dict back: make it a plain 'def'")
        if isinstance(node, ast.FunctionDef):
            problem = _signature_problem(node.args)
            if problem:
                raise ValueError(f"{FLAG}: {path}:{node.lineno}: {ENTRY_POINT}({_params(node.args)}) {problem}; "
                                 f"upstream calls it as {CALL}")


def _module_bindings(body, name: str):
    """Statements that bind `name` at module level (also inside top-level if/try/with blocks)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            yield node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for target in targets for t in ast.walk(target)):
                yield node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                if bound == name or alias.name == "*":
                    yield node
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            blocks += [h.body for h in getattr(node, "handlers", [])]
            for block in blocks:
                yield from _module_bindings(block, name)


def _signature_problem(args: ast.arguments) -> Optional[str]:
    """Why a function with these parameters cannot be called with three positional arguments, or None."""
    positional = len(args.posonlyargs) + len(args.args)
    required = positional - len(args.defaults)
    if positional < 3 and args.vararg is None:
        return f"takes {positional} positional argument{'s' if positional != 1 else ''}, not 3"
    if required > 3:
        return f"requires {required} positional arguments, not 3"
    keyword_only = [a.arg for a, default in zip(args.kwonlyargs, args.kw_defaults) if default is None]
    if keyword_only:
        return f"requires the keyword-only argument(s) {', '.join(keyword_only)}, which upstream never passes"
    return None


def _params(args: ast.arguments) -> str:
    names = [a.arg for a in args.posonlyargs + args.args]
    if args.vararg:
        names.append("*" + args.vararg.arg)
    names += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        names.append("**" + args.kwarg.arg)
    return ", ".join(names)
