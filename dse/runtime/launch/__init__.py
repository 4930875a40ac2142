"""How a deployment reaches its ranks and runs, on the launching machine: the mpiexec command
and its files (:mod:`.mpirun`), a mapping deployed with them (:mod:`.deploy`, the whole model's
outputs beside it: :mod:`.reference`), a run under mpiexec with a time limit (:mod:`.run`), the
machine's speed between runs (:mod:`.probe`), and a deployment run in this process without MPI
(:mod:`.local`)."""
