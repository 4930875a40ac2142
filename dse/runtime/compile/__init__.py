"""A mapping compiled into a deployment, on the launching machine: each device's program (the
layer walk: :mod:`.programs`, :mod:`.bands`, :mod:`.actions`, with the static tensors of
:mod:`.statics`), cut into segments, steps and one sub-model each (:mod:`.segments`), the plan
(:mod:`.partition` ties these together), and the directory written all or nothing
(:mod:`.package`)."""
