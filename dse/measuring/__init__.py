"""Measuring, in one home: a set of mappings deployed, run in interleaved rounds with one
re-run rule and merged (:mod:`.rounds`), brought to one speed of the machine (:mod:`.speed`),
and compared with the model's prediction (:mod:`.comparison`); :mod:`.measure` does it all.
Phase two (:mod:`.phase2`, with the measured mappings' CSV rows and plot), ``dse.deploy``,
fidelity and calibration measure here."""
