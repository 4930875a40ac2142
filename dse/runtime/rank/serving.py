"""A served deployment's rank: loaded once, it runs the frames the application sends until told
to stop (``python -m mpi4py -m dse.runtime DIR --serve REQUESTS,RESULTS``).

The rank is the measuring run's (:class:`dse.runtime.rank.worker.Rank`: the same sessions,
buffers and steps); only where a frame comes from and where its outputs go differ:

* the entry rank takes each frame from the application (ZeroMQ, the ``REQUESTS`` address:
  :mod:`dse.runtime.deployment.wire`) and tells every other rank, in order, the frame's id or
  the end (an MPI message of :data:`CONTROL_TAG`); then all run their steps on it, as in a
  measured stream: sends are posted and completed later, at most :data:`WINDOW` frames of
  them in flight, and all of them completed whenever no frame is waiting;
* a rank that holds graph outputs sends them to the application (``RESULTS``) with the frame's
  id; every rank says, for every frame, how long its sub-models ran on it (``timing``); every
  rank says it is ready once all have loaded, and that it is alive every
  :data:`~dse.runtime.deployment.wire.BEAT_S` (a thread of its own), so the application
  notices a rank that is gone, or cut off, within a bounded time;
* a rank that fails says why (``error``) before it ends; the stop message ends every rank
  cleanly once the frames before it are done.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from dse.runtime.deployment.validate import OUTPUT_TAG
from dse.runtime.deployment.wire import BEAT_S, decode, encode
from dse.runtime.rank.worker import Rank, Stop, checked_plan, load_rank

#: The entry rank's word to the others: a frame's id, or -1 for the end.
CONTROL_TAG = 2 * OUTPUT_TAG
#: At most so many frames' sends in flight on a rank (as a measured stream's window).
WINDOW = 4


class Heartbeat(threading.Thread):
    """Says ``alive`` every :data:`BEAT_S` on a socket of its own until stopped."""

    def __init__(self, context: Any, address: str, rank: int) -> None:
        super().__init__(daemon=True, name="heartbeat")
        self.context, self.address, self.rank = context, address, rank
        self.stopped = threading.Event()

    def run(self) -> None:
        import zmq

        sock = self.context.socket(zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 4)
        sock.connect(self.address)
        message = encode({"kind": "alive", "rank": self.rank})
        while not self.stopped.wait(BEAT_S):
            # the application not reading notices on its side
            with contextlib.suppress(zmq.Again):
                sock.send_multipart(message, flags=zmq.NOBLOCK)
        sock.close()


class Served:
    """One rank of a served deployment (the module's docstring)."""

    def __init__(self, me: Rank, context: Any, requests: str, results: str) -> None:
        import zmq

        self.me, self.plan = me, me.plan
        self.entry = me.rank == self.plan.entry_rank
        self.out = context.socket(zmq.PUSH)
        self.out.setsockopt(zmq.LINGER, 5000)
        self.out.connect(results)
        self.inbox = None
        if self.entry:
            self.inbox = context.socket(zmq.PULL)
            self.inbox.setsockopt(zmq.LINGER, 0)
            self.inbox.connect(requests)
        self.mine = [o.name for o in self.plan.outputs if o.rank == me.rank]

    def say(self, header: dict[str, Any], arrays: dict[str, np.ndarray] | None = None) -> None:
        self.out.send_multipart(encode({**header, "rank": self.me.rank}, arrays))

    def next_frame(self) -> int:
        """The next frame's id (its inputs set on the entry rank), or -1 at the end."""
        me = self.me
        control = np.empty(1, np.int64)
        if not self.entry:
            entry = self.plan.entry_rank
            if not me.comm.Iprobe(source=entry, tag=CONTROL_TAG):
                me.drain()  # nothing waiting: finish this rank's sends meanwhile
            me.waits.recv(control, entry, CONTROL_TAG)
            return int(control[0])
        assert self.inbox is not None
        if not self.inbox.poll(0):
            me.drain()
            while not self.inbox.poll(1000):
                pass
        header, arrays = decode(self.inbox.recv_multipart(copy=False))
        frame = int(header["id"]) if header["kind"] == "frame" else -1
        me.inputs = arrays
        control[0] = frame
        for r in range(len(self.plan.ranks)):
            if r != me.rank:
                me.waits.send(control, r, CONTROL_TAG)
        return frame

    def serve(self) -> None:
        me = self.me
        while (frame := self.next_frame()) >= 0:
            requests: list[Any] = []
            timers = me.run_once(requests)
            self.say({"kind": "timing", "id": frame, "compute": round(timers.compute, 7)})
            if self.mine:
                self.say({"kind": "outputs", "id": frame}, {n: me.local[n] for n in self.mine})
            me.keep_sending(requests, WINDOW)
        me.drain()


def serve(directory: Path, requests: str, results: str) -> None:
    """Serve the deployment in ``directory`` on MPI.COMM_WORLD until the stop message (the
    module's docstring); a :class:`~dse.runtime.rank.worker.Stop` on every rank when the plan
    is wrong or a rank cannot load its sub-models, said to the application first."""
    import zmq
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    context = zmq.Context()
    beat = Heartbeat(context, results, rank)
    beat.start()
    served = None
    try:
        try:
            plan = checked_plan(comm, Path(directory))
            me = load_rank(comm, plan, Path(directory))
        except Stop as exc:
            if rank == 0:
                _tell(context, results, rank, str(exc))
            raise
        served = Served(me, context, requests, results)
        me.waits.barrier()  # every rank loaded
        served.say({"kind": "ready", "hostname": socket.gethostname()})
        served.serve()
    except Exception as exc:  # this rank failed: the application hears why, then MPI ends
        if not isinstance(exc, Stop):
            last = traceback.format_exception_only(exc)[-1].strip()
            _tell(context, results, rank, last)
        raise
    finally:
        beat.stopped.set()
        beat.join()
        if served is not None:
            served.out.close()  # its LINGER lets the last outputs leave
        context.destroy(linger=2000)


def _tell(context: Any, address: str, rank: int, message: str) -> None:
    import zmq

    sock = context.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.connect(address)
    sock.send_multipart(encode({"kind": "error", "rank": rank, "message": message}))
    sock.close()
