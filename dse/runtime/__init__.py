"""The runtime: a mapping deployed as per-device ONNX sub-models and a plan, launched under MPI,
and run by one rank per device. It knows the hardware (devices, hosts, links) and nothing of
the cost model.

Three sides, each a sub-package, and the contract between them:

- :mod:`~dse.runtime.deployment` -- what a deployment directory holds, read and checked the
  same way by every side: the plan (``plan.json``), the whole model's expected outputs, the
  measurements a run wrote, and the names of its files.
- :mod:`~dse.runtime.compile` -- on the launching machine: a mapping compiled into each
  device's program, its sub-models and the plan, and written as a deployment directory.
- :mod:`~dse.runtime.launch` -- on the launching machine: how the ranks start (the mpiexec
  command and its files, a launcher's hosts and wrapper), a deployment written and run with a
  time limit, the machine's speed probed, a deployment run in this process without MPI.
- :mod:`~dse.runtime.rank` -- in a rank, on a board: the plan's steps carried out (one table of
  operations, shared with the in-process runner), its outputs checked against the whole
  model's, its figures written.

``compile`` and ``rank`` know only ``deployment``; ``launch`` brings the others together
(``tests/test_layers.py`` keeps it so). ``python -m mpi4py -m dse.runtime DIR`` is one rank.
"""
