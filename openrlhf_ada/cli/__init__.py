"""Entry points (recipes): train_ppo_ray (cluster launcher over upstream OpenRLHF)."""
