"""The files of a deployment directory, by name: every side reads and writes them by these."""

from __future__ import annotations

#: What each rank receives, runs and sends (:mod:`dse.runtime.deployment.plan`).
PLAN = "plan.json"
#: The whole model's outputs on the plan's input (``numpy.savez``: ``o0``, ``o1``... in the
#: order of the plan's outputs) (:func:`dse.runtime.deployment.reader.read_expected`).
EXPECTED = "expected.npz"
#: What a run measured, written by its rank 0 (:mod:`dse.runtime.deployment.measurements`).
MEASUREMENTS = "measurements.json"
#: A measurement with the model's prediction beside it (:mod:`dse.measuring.comparison`).
COMPARISON = "comparison.json"
#: Where mpiexec places the ranks, and the script that runs the deployment by hand
#: (:mod:`dse.runtime.launch.mpiexec`).
HOSTFILE, RANKFILE, RUN_SCRIPT = "hostfile", "rankfile", "run.sh"
#: mpiexec's output of the last run.
STDOUT, STDERR = "stdout.log", "stderr.log"
#: Where the last run shipped the deployment on hosts with disks of their own, and what each
#: copy took (:mod:`dse.runtime.launch.ship`).
SHIPPED = "shipped.json"
#: What a run leaves: removed when the deployment is written again.
RUN_OUTPUTS = (MEASUREMENTS, COMPARISON, STDOUT, STDERR, SHIPPED)
#: The sub-models and their weights: what a measured deployment need not keep (a deployment
#: holds every weight of its network again); plan, logs and figures stay. Phase two and
#: fidelity mark them temporary (:func:`dse.files.temporary_files`).
SUBMODELS = ("*.onnx", "*.onnx.data")
