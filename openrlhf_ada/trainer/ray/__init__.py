"""Rollout engines for the single-machine trainer: OpenRLHF's RolloutRayActor that can load new weights on CPU, and
an engine with the same interface backed by transformers' generate."""
