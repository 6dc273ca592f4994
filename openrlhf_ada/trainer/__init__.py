"""Thin subclasses of OpenRLHF 0.11.2's trainer classes, in files named like upstream's, so that each change sits
next to the class it changes: ppo_utils/experience_maker.py (ADORA, pool baseline), ppo_utils/samples_generator.py
(Reinforce-Ada sampling), ppo_trainer.py and ppo_trainer_async.py (the Ray actors that use them)."""
