"""`python -m openrlhf_ada.cli.train_ppo_ray`: upstream's launcher with ADORA and Reinforce-Ada switched in by flags.

Every upstream flag of `python -m openrlhf.cli.train_ppo_ray` (OpenRLHF 0.11.2) keeps its meaning; the project adds
--adora.*, --ada.* and --fault.*. How the project's flags, checks and classes are hooked into upstream's launcher:
openrlhf_ada/launcher.py.
"""

from __future__ import annotations

import openrlhf_ada  # noqa: F401  (CPU compatibility before anything imports openrlhf)
from openrlhf_ada.launcher import main

if __name__ == "__main__":
    main()
