"""How well the model predicts runs: mappings deployed and measured under MPI beside it."""
