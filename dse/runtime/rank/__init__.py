"""What runs in a rank, on a board: the plan read and checked (:mod:`.check` before a run), the
steps carried out (:mod:`.steps`, one table of operations; over MPI by :mod:`.worker`, in one
process by :mod:`.inprocess`), onnxruntime sessions as the device runs them (:mod:`.sessions`,
:mod:`.pace`), how a rank waits (:mod:`.waits`), the energy counters it reads
(:mod:`.energy`), its outputs against the whole model's (:mod:`.equivalence`); sub-models
timed alone for calibration (:mod:`.timing`). It imports nothing of the cost model or the
network zoo."""
