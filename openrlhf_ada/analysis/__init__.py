"""Reading runs and comparing them (`python -m openrlhf_ada.cli.compare`): compare.py (a run's metrics from
metrics.jsonl or wandb, a table and plots), compare_settings.py (runs grouped by setting and paired by seed, with 95%
intervals), seed_stats.py (the intervals over seeds). It reads what the trainers write (trainer/metrics_log.py,
trainer/heldout.py's keys); nothing in the trainers imports it."""
