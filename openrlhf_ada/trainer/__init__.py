"""Thin subclasses of OpenRLHF 0.11.2's trainer classes, in files named like upstream's, so that each change sits
next to the class it changes: ppo_utils/experience_maker.py (ADORA, pool baseline), ppo_utils/samples_generator.py
(Reinforce-Ada sampling; one step of rounds is ppo_utils/round_loop.py), ppo_trainer.py and ppo_trainer_async.py
(the Ray actors that use them). Modules without an upstream counterpart are named for what they do, e.g.
ppo_utils/sample_failures.py, loader_state.py, batching.py, stall_watch.py, ray/engine_health.py."""
