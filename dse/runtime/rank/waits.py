"""How a rank waits for MPI: spinning in MPI's blocking calls, or polling then sleeping.

``DSE_WAIT_SPIN_US`` (in the ranks' environment) chooses, once per rank:

``spin`` (the default)
    every wait is MPI's blocking call (``Probe``, ``Recv``, ``Waitall``, ``Barrier``,
    ``allreduce``): the rank keeps its core while it waits (``OMPI_MCA_mpi_yield_when_idle=1``
    makes it yield between polls, which frees the core for other processes of its own
    cgroup only). On a machine where each rank has its own core this is the fastest: a
    message is seen the moment it lands (``scripts/bench_wait.py``).
a number of microseconds
    every wait is the non-blocking call (``Iprobe``, ``Irecv``, ``Testall``, ``Ibarrier``,
    ``Iallreduce``) polled for that long, then polled every :data:`SLEEP_S` with the rank
    asleep in between, so a long wait costs (almost) no CPU. On an emulated cluster, where a
    device is a CPU share and two devices of a board share a core, a rank that
    spins while it waits burns its device's share and holds the core its board's other
    device needs: the cluster's launcher sets this (:data:`dse.cluster.mpi.WAIT_ENV`).

Every wait of the runtime's ranks goes through :class:`Waits`, so one setting covers the
receives of large messages too (a multi-MB tensor trickles over a shaped link for tens of ms
after its first bytes are there) and the barrier and reduction between iterations.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dse.errors import DseError
from dse.runtime.rank.pace import Pace

#: Between polls once past the spin time (time.sleep's own slack adds ~50 us on Linux).
SLEEP_S = 20e-6


def spin_s(raw: str | None = None) -> float | None:
    """How long a waiting rank polls before it sleeps between polls (s), from
    ``DSE_WAIT_SPIN_US`` (microseconds); None for ``spin`` (MPI's blocking calls)."""
    raw = (os.environ.get("DSE_WAIT_SPIN_US", "spin") if raw is None else raw).strip()
    if raw == "spin":
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1e9:
        raise DseError(f"DSE_WAIT_SPIN_US={raw!r} must be microseconds (0 to 1e9) or 'spin'")
    return value * 1e-6


def until(done: Callable[[], Any], spin: float, pace: Pace | None = None) -> None:
    """Return once ``done()`` is true: polled for ``spin`` seconds, then every
    :data:`SLEEP_S` with the caller asleep in between. With ``pace`` (a rank of an emulated
    device), a wait that slept tells it how long the rank sat in the run queue before its last
    sleep, while its message was not there yet (:meth:`~dse.runtime.rank.pace.Pace.slept`)."""
    if done():
        return
    clock = time.perf_counter
    end = clock() + spin
    while clock() < end:
        if done():
            return
    if pace is None:
        while not done():
            time.sleep(SLEEP_S)
        return
    first = mark = pace.queued_s()
    while not done():
        mark = pace.queued_s()
        time.sleep(SLEEP_S)
    pace.slept(mark - first)


class Waits:
    """A rank's waits, all of one kind (the module's docstring); ``spin`` None: MPI's
    blocking calls. ``pace``: the rank's pacing, told of its waits' idle queueing
    (:func:`until`)."""

    def __init__(self, comm: Any, spin: float | None, pace: Pace | None = None) -> None:
        self.comm, self.spin, self.pace = comm, spin, pace

    def probe(self, source: int, tag: int) -> None:
        """Return once a message from ``source`` with ``tag`` is there."""
        if self.spin is None:
            self.comm.Probe(source=source, tag=tag)
        else:
            until(lambda: self.comm.Iprobe(source=source, tag=tag), self.spin, self.pace)

    def recv(self, buf: np.ndarray, source: int, tag: int) -> None:
        """Receive into ``buf`` (all of the message, however long its bytes take)."""
        if self.spin is None:
            self.comm.Recv(buf, source=source, tag=tag)
        else:
            request = self.comm.Irecv(buf, source=source, tag=tag)
            until(request.Test, self.spin, self.pace)

    def send(self, buf: np.ndarray, dest: int, tag: int) -> None:
        """Send ``buf`` and return once it is sent (its buffer may be reused)."""
        if self.spin is None:
            self.comm.Send(buf, dest=dest, tag=tag)
        else:
            until(self.comm.Isend(buf, dest=dest, tag=tag).Test, self.spin, self.pace)

    def complete(self, requests: Sequence[Any]) -> None:
        """Return once every request (sends) is complete."""
        from mpi4py import MPI  # initialises MPI: ranks only

        if self.spin is None:
            MPI.Request.Waitall(list(requests))
        elif requests:
            until(lambda: MPI.Request.Testall(list(requests)), self.spin, self.pace)

    def barrier(self) -> None:
        if self.spin is None:
            self.comm.Barrier()
        else:
            until(self.comm.Ibarrier().Test, self.spin, self.pace)

    def max(self, value: float) -> float:
        """The largest ``value`` over the ranks (every rank gets it)."""
        from mpi4py import MPI

        if self.spin is None:
            return float(self.comm.allreduce(value, op=MPI.MAX))
        mine, out = np.array([value], dtype=np.float64), np.empty(1, dtype=np.float64)
        until(self.comm.Iallreduce(mine, out, op=MPI.MAX).Test, self.spin, self.pace)
        return float(out[0])
