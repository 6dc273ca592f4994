"""The flag reference (docs/flags.md) holds the project's flags in one table, the README links the algorithms doc
inside the repository, that doc names every --adora.* / --ada.* flag, and the --ada.mode help states the rule that
the code applies."""

import argparse
import re
from pathlib import Path

from openrlhf_ada.algorithms.reinforce_ada import exit_reached
from openrlhf_ada.args import add_project_args

ROOT = Path(__file__).resolve().parents[1]


def project_flags():
    parser = add_project_args(argparse.ArgumentParser())
    return {o: a for a in parser._actions for o in a.option_strings if o.startswith(("--adora.", "--ada.", "--fault."))}


def test_flag_table_is_one_table_and_the_readme_links_the_algorithms_doc():
    lines = (ROOT / "docs" / "flags.md").read_text().splitlines()
    rows = [i for i, line in enumerate(lines) if re.match(r"\| `--(adora|ada|fault)\.", line)]
    assert rows, "no flag rows found"
    # a markdown table ends at the first line that is not a row: every row between the first and the last is one
    assert all(lines[i].startswith("|") for i in range(rows[0], rows[-1] + 1)), "a blank line splits the flag table"
    text = (ROOT / "README.md").read_text()
    assert "../shared/" not in text and "(docs/algorithms.md)" in text


def test_algorithms_doc_names_every_algorithm_flag():
    doc = (ROOT / "docs" / "algorithms.md").read_text()
    missing = [flag for flag in project_flags() if flag.startswith(("--adora.", "--ada.")) and f"`{flag}" not in doc]
    assert not missing, f"docs/algorithms.md does not describe {missing}"


def test_ada_mode_help_states_the_balance_rule_the_code_applies():
    help_text = project_flags()["--ada.mode"].help
    assert ">= floor(n/2) correct and >= n - floor(n/2) wrong" in help_text
    # n = 5 by hand: floor(5/2) = 2 correct and 5 - 2 = 3 wrong are needed; "n/2 wrong" (2.5 -> 2 or 3) is ambiguous
    assert exit_reached(2, 3, mode="balance", n=5) and not exit_reached(3, 2, mode="balance", n=5)
