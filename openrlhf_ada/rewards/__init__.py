"""Rule-based reward files for OpenRLHF's ``--reward.remote_url <file>.py``.

Each task file (``kk.py``, ``math.py``, ``countdown.py``, ``gym.py``; ``toy.py`` for smoke runs) defines ``reward_func(queries, prompts, labels)`` as
OpenRLHF 0.11.2 expects: ``queries`` are the decoded prompt+response texts, ``prompts`` the prompt texts, ``labels``
the dataset labels written by :mod:`openrlhf_ada.cli.prepare_data`. It returns
``{"rewards": FloatTensor[n], "scores": FloatTensor[n], "extra_logs": {name: FloatTensor[n]}}`` and never raises:
malformed outputs or labels get the lowest reward of the scale and a numeric reason code
(:data:`openrlhf_ada.rewards._common.REASON_CODES`) in ``extra_logs``.

Use a file by path, e.g. ``--reward.remote_url openrlhf_ada/rewards/kk.py`` (OpenRLHF loads it with
``importlib.util.spec_from_file_location``); the files import their shared helpers from this package when it is
installed and otherwise from the ``_common.py`` next to them.

This ``__init__`` deliberately imports nothing: importing ``openrlhf_ada.rewards._common`` must stay cheap.
"""
