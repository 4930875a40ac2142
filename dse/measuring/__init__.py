"""Measuring, in one home: a set of mappings deployed, run in interleaved rounds with one
re-run rule (:mod:`.rounds`), merged and brought to one speed of the machine (:mod:`.merge`,
:mod:`.speed`), and compared with the model's prediction (:mod:`.comparison`); the façade
:mod:`.measure` does it all. Phase two (:mod:`.phase2`), fidelity and calibration measure here;
:mod:`.rows` writes the measured mappings' CSV rows and plot."""
