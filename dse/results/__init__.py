"""Run outputs: Pareto CSV, best mappings, history, plots and the run summary."""
