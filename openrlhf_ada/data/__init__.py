"""Prompt data and its checks: prepare.py (the prompt datasets of `python -m openrlhf_ada.cli.prepare_data`: kk,
countdown, a Hugging Face dataset), demo_task.py (the demo's task), checks.py (a prompt file checked before training
starts)."""
