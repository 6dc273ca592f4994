"""`python -m openrlhf_ada.cli.train_ppo_ray_upstream`: OpenRLHF 0.11.2's own trainer, untouched, with only what
lets it run here: the worker setup hook (flash-attn placeholder in every Ray worker) and, with `OPENRLHF_ADA_CPU=1`
on a machine without CUDA, the CPU mode (openrlhf_ada.cpu.patches).

For comparing the project's launcher against plain upstream on the same machine, and for telling a harness problem
from a project problem. Takes upstream's flags only (no --adora.* / --ada.* / --fault.*).
"""

from __future__ import annotations

from openrlhf_ada.launcher import main as _launcher_main

PROG = "python -m openrlhf_ada.cli.train_ppo_ray_upstream"


def main(argv=None) -> None:
    _launcher_main(argv, prog=PROG, upstream_only=True)


if __name__ == "__main__":
    main()
