"""What every benchmark script shares: the machine line and the update of its own section of docs/benchmarks.md."""

import os
import platform
import re

# Scripts run from anywhere import this module by its folder (benchmarks/ is not a package).
HEADER = ("# Benchmarks\n\nEach section is written by its script under `benchmarks/` (rerun it to update). "
          "Performance claims are ratios measured side by side in one run.\n\n")


def machine(*libraries: str) -> str:
    """`platform`, CPU count, Python version, and the given library versions (e.g. "torch 2.13.0")."""
    parts = [f"`{platform.platform()}`", f"{os.cpu_count()} CPUs", f"Python {platform.python_version()}", *libraries]
    return ", ".join(parts)


def update_section(path: str, name: str, body: str) -> None:
    """Replace (or append) the text between `<!-- BEGIN name -->` and `<!-- END name -->` in a markdown file."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}\n"
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else HEADER
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + block
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
