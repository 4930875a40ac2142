"""How a deployment reaches its ranks and runs, on the launching machine: the mpiexec command,
its files and a run of it with a time limit (:mod:`.mpiexec`), a mapping deployed with them and
the whole model's outputs beside it (:mod:`.deploy`), the machine's speed between runs
(:mod:`.probe`), and a deployment run in this process without MPI (:mod:`.local`).

Every host is taken to see the deployment directory at the same path (this machine, or an
emulated cluster's boards, which share its disk). Between writing a deployment and starting its
ranks is where a board with a disk of its own gets its share of it; a deployment kept running
holds its ranks open in :func:`.mpiexec.started`.
"""
