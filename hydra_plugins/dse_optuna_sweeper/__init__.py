"""An Optuna (>= 4) sweeper for Hydra apps: ``hydra/sweeper=dse_optuna``."""
