"""Calibration on the target hardware: micro-benchmarks through the runtime -> coefficients."""
