"""Analytical cost models (latency, communication, memory, energy) and their calibration."""
