"""The search: the pymoo problem (genes -> mapping -> model -> objectives) and the NSGA-II loop."""
