"""What a deployment directory holds, read and checked the same way by every side: its files by
name (:mod:`.layout`), the plan and its rules (:mod:`.plan`, :mod:`.validate`, :mod:`.reader`),
the whole model's expected outputs (:func:`.reader.read_expected`), and what a run measured
(:mod:`.measurements`)."""
