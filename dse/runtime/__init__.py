"""Phase two: deploy a mapping as per-device ONNX sub-models and run them (MPI or in-process).

By job: a mapping -> each device's program (``programs``: the layer walk, with ``statics``
and ``weights`` for the static tensors) -> segments and steps (``segments``, one sub-model
each: ``submodel``) -> the plan (``plan``: the types and their JSON; ``partition`` ties these
together); a deployment directory (``package``, the one writer of ``plan.json``; the whole
model's outputs for the check: ``equivalence``); the one checked reader of a plan and its
rules (``reader``, ``validate``; ``check`` before a run); running it (``mpirun``: the mpiexec
command and its files; ``launch``; ``worker``: one rank, the one writer of
``measurements.json``; ``sequential``: in one process); what a run produced
(``measurements``) and what the model said of it (``comparison``, written by the launching
process); the library calls the entry points share (``measure``), phase two after a search
(``phase2``), the machine's speed (``probe``).
"""
