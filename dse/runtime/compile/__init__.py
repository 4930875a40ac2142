"""A mapping compiled into a deployment, on the launching machine: each device's program (the
layer walk: :mod:`.programs`, :mod:`.bands`, :mod:`.actions`, with the static tensors of
:mod:`.statics` and :mod:`.weights`), cut into segments and steps (:mod:`.segments`, one
sub-model each: :mod:`.submodel`), the plan (:mod:`.partition` ties these together), and the
directory written all or nothing (:mod:`.package`)."""
