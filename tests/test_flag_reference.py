"""docs/flags.md is what scripts/flag_reference.py writes from the real parsers today: regenerated here and compared,
so a changed flag, default or help text fails until the reference is regenerated."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_docs_flags_md_matches_the_parsers():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "flag_reference.py"), "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    # the script's message names the command that regenerates the file, followed by the diff
    stale = [line for line in result.stderr.splitlines() if "docs/flags.md" in line or line[:1] in "+-@"]
    assert result.returncode == 0, "\n".join(stale[:80]) or result.stderr[-4000:]


def test_the_reference_lists_every_project_flag_in_one_table():
    import argparse

    from openrlhf_ada.args import add_project_args

    flags = [o for a in add_project_args(argparse.ArgumentParser())._actions for o in a.option_strings
             if o.startswith("--") and o != "--help"]
    text = (ROOT / "docs" / "flags.md").read_text()
    missing = [flag for flag in flags if f"| `{flag}` |" not in text]
    assert not missing, f"docs/flags.md lacks {missing}: run `python scripts/flag_reference.py`"
