"""A deployment kept running for an application: ``Deployment.start(DIR)`` launches its ranks
once (the same ranks, plan and steps as a measured run: :mod:`dse.runtime.rank.serving`), then
``run``, ``submit`` and ``stream`` send frames through them.

Inside, the application's side binds two ZeroMQ sockets on the address the ranks reach this
machine at (``requests``: frames to the entry rank; ``results``: outputs, readiness,
heartbeats and errors from every rank; messages of :mod:`dse.runtime.deployment.wire`). A
caller's frame is checked against the model's inputs (:meth:`Deployment.check`), waits for one
of ``in_flight`` slots (back-pressure: the service holds at most that many frames, whatever
its callers do) and is sent; one thread (the pump) reads results, hands each frame's outputs
to its future and frees its slot.

A fault ends the service: mpiexec exiting (a rank killed, a board gone: the cause read from its
output and, on an emulated cluster, from the cluster's watch, which names an OOM kill or a cut
link), a rank saying it failed, or a rank not heard from for ``silence_s`` (its process or its
link is gone). Every frame in flight and every later call then raises :class:`ServeError`
naming the board; the ranks are stopped and nothing of the run is left. :meth:`close` (or the
end of the ``with`` block) stops the ranks cleanly after the frames in flight.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import DseError
from dse.runtime.deployment.hosts import check_hosts
from dse.runtime.deployment.measurements import Measurement
from dse.runtime.deployment.plan import Plan
from dse.runtime.deployment.reader import read_plan
from dse.runtime.deployment.wire import WireError, decode, encode
from dse.runtime.launch.diagnosis import ended_rank, failed_at_startup, why
from dse.runtime.launch.mpiexec import (
    Finish,
    Launcher,
    check_session_folder,
    kept,
    kill_session,
    preflight_once,
    shipped,
    started,
    started_again,
)

#: Frames held by the service at once, by default, and at most (well below ZeroMQ's queue of
#: 1000 messages a socket, so a send never waits on a full queue).
IN_FLIGHT, MAX_IN_FLIGHT = 4, 256
#: A rank not heard from for so long has gone (s): many heartbeats (wire.BEAT_S) missed.
SILENCE_S = 5.0
#: The pump reads the results for so long at a time (ms), between looks at whether a caller
#: waits for its outputs (and reads them itself); a caller, so long at a time.
PUMP_MS, READ_MS = 5, 50
#: Longest wait for every rank to load its sub-models (s).
START_TIMEOUT_S = 300.0
#: Longest wait for the ranks to end after the stop message (s), before they are killed.
STOP_GRACE_S = 10.0


class ServeError(DseError):
    """The service failed (a rank or board is gone) or is closed: it serves nothing more."""


class RequestError(ServeError):
    """A request the model cannot take (a wrong input name, shape or type); the service goes
    on."""


@dataclass(frozen=True)
class Port:
    """A graph input or output: its name, shape and element type."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype


class Deployment:
    """A started deployment (the module's docstring). Make one with :meth:`start`."""

    def __init__(self, directory: Path, plan: Plan, in_flight: int, silence_s: float) -> None:
        """The service's state before launch (:meth:`start` makes and launches one)."""
        import zmq

        self.directory, self.plan = directory, plan
        self.inputs = [Port(p.name, tuple(p.shape), np.dtype(p.dtype)) for p in plan.inputs]
        self.outputs = [Port(o.name, tuple(o.shape), np.dtype(o.dtype)) for o in plan.outputs]
        self.error: str | None = None
        self._closed = self._stopping = self._failing = False
        self._down = threading.Event()  # set once a fault's cause is named (error)
        self._slots = threading.BoundedSemaphore(in_flight)
        self._in_flight, self._silence_s = in_flight, silence_s
        self._ids = itertools.count()
        self._pending: dict[int, tuple[Future, dict[str, np.ndarray]]] = {}
        self._lock = threading.Lock()  # the requests socket, the pending table, callers
        self._reader = threading.Lock()  # who reads the results socket
        self._callers = 0  # threads waiting for their frame's outputs (_outputs)
        self._stack = contextlib.ExitStack()
        self._context = zmq.Context()
        self._requests = self._context.socket(zmq.PUSH)
        self._results = self._context.socket(zmq.PULL)
        for sock in (self._requests, self._results):
            sock.setsockopt(zmq.LINGER, 0)
        self._finish: Finish = kept
        self._proc: subprocess.Popen | None = None
        self._pump: threading.Thread | None = None
        self._heard = dict.fromkeys(range(len(plan.ranks)), time.monotonic())
        #: Called (by the thread reading the results) with (rank, frame id, seconds its
        #: sub-models ran) for every rank's every frame; None: the timings are dropped.
        self.on_timing: Callable[[int, int, float], None] | None = None

    @property
    def name(self) -> str:
        """The network's name."""
        return self.plan.net

    @property
    def alive(self) -> bool:
        """True while the service takes frames."""
        return not (self._failing or self._closed or self._stopping)

    # --- starting -----------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        directory: Path | str,
        platform: str | Mapping[str, Any] | None = None,
        in_flight: int = IN_FLIGHT,
        launcher: Launcher | None = None,
        silence_s: float = SILENCE_S,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> Deployment:
        """Launch the deployment written at ``directory`` (by ``dse.deploy``) and return once
        every rank has loaded its sub-models. Its ranks start as its platform says:
        ``platform`` (a platform file's name or path, or its contents; default the one the
        deployment was made for) gives the launcher (on its emulated cluster when it has
        one, on its hosts by name otherwise), unless ``launcher`` is given. At most
        ``in_flight`` frames are held at once. One line (:class:`DseError`) when it cannot
        start."""
        if not 1 <= in_flight <= MAX_IN_FLIGHT:
            raise DseError(
                f"in_flight={in_flight} is out of range: give 1 to {MAX_IN_FLIGHT} frames"
            )
        directory = Path(directory).expanduser().absolute()
        plan = read_plan(directory)
        check_hosts(plan, directory)
        launcher = launcher or launcher_of(plan, platform)
        self = cls(directory, plan, in_flight, silence_s)
        try:
            self._launch(launcher, start_timeout_s)
        except BaseException:
            self._shutdown()
            raise
        return self

    def _launch(self, launcher: Launcher, start_timeout_s: float) -> None:
        from dse.files import owned

        plan, directory = self.plan, self.directory
        head = launcher.head or head_address(launcher, plan)
        requests = self._requests.bind_to_random_port(f"tcp://{head}")
        results = self._results.bind_to_random_port(f"tcp://{head}")
        served = f"tcp://{head}:{requests},tcp://{head}:{results}"
        placement = [(r.host, r.device) for r in plan.ranks]
        check_session_folder(launcher)
        self._stack.enter_context(owned(directory, "deployment"))
        self._finish = self._stack.enter_context(launcher.watched(placement))
        preflight_once(plan, launcher)
        on_hosts = shipped(plan, directory, launcher)
        cmd = launcher.command(
            directory, len(plan.ranks), rank_args=["--serve", served], placement=placement,
            on_hosts=on_hosts,
        )  # fmt: skip

        def attempt() -> contextlib.ExitStack | DseError:
            """A launch whose ranks are all ready, or why it failed."""
            run = contextlib.ExitStack()
            self._proc = run.enter_context(started(cmd, directory, launcher))
            try:
                self._wait_ready(self._proc, start_timeout_s)
            except BaseException as exc:  # Ctrl-C too: this launch's processes go at once
                run.close()
                if isinstance(exc, DseError):
                    return exc
                raise
            return run

        # as a measured run: started again while it fails at startup for a passing cause
        run = started_again(
            attempt, lambda r: isinstance(r, DseError) and failed_at_startup(directory)
        )
        if isinstance(run, DseError):
            raise run
        self._stack.enter_context(run)
        self._pump = threading.Thread(target=self._pump_results, daemon=True, name="dse-pump")
        self._pump.start()

    def _wait_ready(self, proc: subprocess.Popen, timeout_s: float) -> None:
        ready: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(ready) < len(self.plan.ranks):
            if self._results.poll(100):
                header, _ = decode(self._results.recv_multipart())
                if header["kind"] == "error":
                    raise DseError(f"{self.directory}: {self._rank_words(header)}")
                if header["kind"] == "ready":
                    ready.add(int(header["rank"]))
            if proc.poll() is not None:
                raise DseError(self._exited(proc))
            if time.monotonic() > deadline:
                waiting = sorted(set(range(len(self.plan.ranks))) - ready)
                raise DseError(
                    f"{self.directory}: ranks {waiting} did not load their sub-models within "
                    f"{timeout_s:g} s (on {self._board(waiting[0])}): see its stderr.log"
                )
        now = time.monotonic()
        self._heard = dict.fromkeys(self._heard, now)

    # --- serving ------------------------------------------------------------------------

    def check(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """``inputs`` as the model takes them: every input by name, each of its exact shape
        and element type; else :class:`RequestError` naming the first difference."""
        if not isinstance(inputs, Mapping):
            raise RequestError(
                f"inputs must be a dict of input name to numpy array, not {type(inputs).__name__}"
            )
        names = {p.name for p in self.inputs}
        extra = sorted(set(inputs) - names, key=str)
        if extra:
            raise RequestError(f"no input named {extra[0]!r}: the model takes {sorted(names)}")
        checked = {}
        for p in self.inputs:
            if p.name not in inputs:
                raise RequestError(f"input {p.name!r} is missing: the model takes {sorted(names)}")
            a = inputs[p.name]
            if not isinstance(a, np.ndarray):
                raise RequestError(f"input {p.name!r} is a {type(a).__name__}, not a numpy array")
            if a.dtype != p.dtype:
                raise RequestError(
                    f"input {p.name!r} is {a.dtype}, the model takes {p.dtype}: convert it "
                    f"(x.astype(np.{p.dtype}))"
                )
            if a.shape != p.shape:
                raise RequestError(
                    f"input {p.name!r} has shape {list(a.shape)}, the model takes {list(p.shape)}"
                )
            checked[p.name] = a
        return checked

    def submit(self, inputs: Mapping[str, Any], copy: bool = True) -> Future:
        """Send one frame; a future of its outputs (output name -> array). Waits while
        ``in_flight`` frames are held. The arrays are copied as they are sent, so the caller
        may reuse them at once (``copy=False``: not, and they must stay unchanged until the
        frame's outputs are back). :class:`RequestError` for inputs the model cannot take;
        :class:`ServeError` once the service has stopped."""
        import zmq

        checked = self.check(inputs)
        while not self._slots.acquire(timeout=0.1):
            self._raise_if_down()
        future: Future = Future()
        future.set_running_or_notify_cancel()  # a frame sent cannot be taken back
        frame = next(self._ids)
        message = encode({"kind": "frame", "id": frame}, checked)
        try:
            while True:  # never blocked on a send: an entry rank gone leaves no peer to take it
                with self._lock:
                    self._raise_if_down()
                    try:
                        self._requests.send_multipart(message, copy=copy, flags=zmq.NOBLOCK)
                    except zmq.Again:
                        pass
                    else:
                        self._pending[frame] = (future, {})
                        return future
                time.sleep(0.001)
        except BaseException:
            self._slots.release()
            raise

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """One frame's outputs by name (as ``onnxruntime.InferenceSession.run`` with every
        output); :class:`RequestError` or :class:`ServeError` as :meth:`submit`."""
        return self._outputs(self.submit(inputs, copy=False))

    def stream(
        self, frames: Iterable[Mapping[str, Any]], in_flight: int | None = None
    ) -> Iterator[dict[str, np.ndarray]]:
        """Each frame's outputs, in order, with up to ``in_flight`` frames (default the
        service's) in the deployment at once: its devices work on several frames at a
        time. Each frame's arrays are copied as they are sent: an iterable may reuse them."""
        return in_order(frames, self.submit, self._outputs, in_flight, self._in_flight)

    def _outputs(self, future: Future) -> dict[str, np.ndarray]:
        """``future``'s outputs. The calling thread reads the results itself while no other
        thread does (the pump steps aside while callers wait): its outputs then reach it
        without passing through the pump."""
        with self._lock:
            self._callers += 1
        try:
            while not future.done():
                if not self._reader.acquire(blocking=False):
                    futures.wait([future], timeout=0.002)
                    continue
                try:
                    if not future.done():
                        self._read(READ_MS)
                finally:
                    self._reader.release()
        finally:
            with self._lock:
                self._callers -= 1
        return future.result()

    def _raise_if_down(self) -> None:
        if self._failing:
            self._down.wait(timeout=60)  # until the cause is named
            raise ServeError(self.error or f"{self.directory}: the deployment failed")
        if self._closed or self._stopping:
            raise ServeError(f"{self.directory}: the deployment is closed")

    # --- the pump: results, heartbeats, the process ---------------------------------------

    def _pump_results(self) -> None:
        """Reads the results while no caller does (:meth:`_outputs`), until the end."""
        try:
            while not (self._closed or self._failing):
                if self._callers or not self._reader.acquire(blocking=False):
                    time.sleep(PUMP_MS / 1e3)
                    continue
                try:
                    self._read(PUMP_MS)
                finally:
                    self._reader.release()
        except Exception as exc:  # noqa: BLE001 - the pump's own fault fails every caller too
            self._fail(f"{self.directory}: the service failed: {exc}")

    def _read(self, timeout_ms: int) -> None:
        """Take every message that arrives within ``timeout_ms`` (its holder has
        ``_reader``), then check that mpiexec runs and that every rank was heard from within
        the silence limit (a fault ends the service)."""
        if self._results.poll(timeout_ms):
            self._take(self._results.recv_multipart(copy=False))
            while self._results.poll(0):
                self._take(self._results.recv_multipart(copy=False))
        proc = self._proc
        if proc is not None and proc.poll() is not None:
            if not self._stopping:
                self._fail(self._exited(proc))
            return
        now = time.monotonic()
        silent = [r for r, t in self._heard.items() if now - t > self._silence_s]
        if silent and not self._stopping:
            r = silent[0]
            self._fail(
                f"{self.directory}: rank {r} on {self._board(r)} has not been heard "
                f"from for {now - self._heard[r]:.1f} s: its process or its link is gone"
            )

    def _take(self, parts: list) -> None:
        try:
            header, arrays = decode(parts)
        except WireError as exc:
            self._fail(f"{self.directory}: a rank sent a message dse cannot read: {exc}")
            return
        rank = int(header.get("rank", -1))
        self._heard[rank] = time.monotonic()
        kind = header["kind"]
        if kind == "error":
            self._fail(f"{self.directory}: {self._rank_words(header)}")
        elif kind == "timing":
            if self.on_timing is not None:
                self.on_timing(rank, int(header["id"]), float(header["compute"]))
        elif kind == "outputs":
            with self._lock:
                entry = self._pending.get(int(header["id"]))
                if entry is None:
                    return
                future, got = entry
                got.update({k: np.array(v) for k, v in arrays.items()})
                if len(got) < len(self.outputs):
                    return
                del self._pending[int(header["id"])]
            future.set_result({o.name: got[o.name] for o in self.outputs})
            self._slots.release()

    # --- ending -------------------------------------------------------------------------

    def _fail(self, reason: str) -> None:
        """End the service on a fault: every rank stopped, the cause named (the launcher's
        watch may add it: an OOM kill, a cut link), every frame in flight failed."""
        with self._lock:  # once; from now on no frame is taken
            if self._failing:
                return
            self._failing = True
        try:
            if self._proc is not None:
                kill_session(self._proc.pid, grace_s=1.0)
            with contextlib.suppress(Exception):
                reason = self._finish(Measurement.failed(reason)).reason or reason
        finally:
            self.error = reason
            self._down.set()
            self._fail_pending(ServeError(reason))

    def _fail_pending(self, error: ServeError) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for future, _ in pending.values():
            if not future.done():
                future.set_exception(error)
            self._slots.release()

    def close(self) -> None:
        """Stop every rank after the frames in flight (killed after :data:`STOP_GRACE_S`);
        nothing of the run is left. Calling it again does nothing."""
        if self._closed:
            return
        proc = self._proc
        if not self._failing and proc is not None and self._pump is not None:
            import zmq

            with self._lock:
                self._stopping = True  # no frame taken from now; mpiexec ending is no fault
                with contextlib.suppress(zmq.ZMQError):
                    self._requests.send_multipart(encode({"kind": "stop"}), flags=zmq.NOBLOCK)
            deadline = time.monotonic() + STOP_GRACE_S
            while self._pending and not self._failing and proc.poll() is None:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            if self._pending and proc.poll() is not None:  # a rank failed while stopping
                self._fail(self._exited(proc))
        self._closed = True
        self._shutdown()

    def _shutdown(self) -> None:
        self._closed = True
        if self._pump is not None and self._pump is not threading.current_thread():
            self._pump.join()
        self._fail_pending(ServeError(f"{self.directory}: the deployment was closed"))
        try:
            self._stack.close()  # mpiexec's session killed, the run's locks let go
        finally:
            with self._reader, self._lock:  # no caller is reading or sending now
                self._context.destroy(linger=0)

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- words ----------------------------------------------------------------------------

    def _board(self, rank: int) -> str:
        r = self.plan.ranks[rank]
        return f"board {r.host} (device {r.device})"

    def _rank_words(self, header: Mapping[str, Any]) -> str:
        rank = int(header.get("rank", -1))
        where = self._board(rank) if 0 <= rank < len(self.plan.ranks) else "a rank"
        return f"rank {rank} on {where} failed: {header.get('message')}"

    def _exited(self, proc: subprocess.Popen) -> str:
        """Why mpiexec ended, led by the board of the rank it names (Open MPI names the
        process rank, and the node by its own host name)."""
        text = f"mpiexec exited with {proc.poll()}: {why(self.directory)}"
        rank = ended_rank(text)
        if rank is not None and rank < len(self.plan.ranks):
            text = f"rank {rank} on {self._board(rank)} ended: {text}"
        return f"{self.directory}: {text}"


def in_order(
    frames: Iterable[Mapping[str, Any]],
    submit: Callable[[Mapping[str, Any]], Future],
    outputs: Callable[[Future], dict[str, np.ndarray]],
    in_flight: int | None,
    most: int,
) -> Iterator[dict[str, np.ndarray]]:
    """Each frame's outputs (``outputs`` of its future from ``submit``), in order, with up to
    ``in_flight`` frames (None: ``most``; at most ``most``) submitted and not yet yielded."""
    window = min(in_flight or most, most)
    if window < 1:
        raise DseError(f"in_flight={in_flight} must be at least 1")
    return _in_order(frames, submit, outputs, window)


def _in_order(
    frames: Iterable[Mapping[str, Any]],
    submit: Callable[[Mapping[str, Any]], Future],
    outputs: Callable[[Future], dict[str, np.ndarray]],
    window: int,
) -> Iterator[dict[str, np.ndarray]]:
    ahead: deque[Future] = deque()
    for inputs in frames:
        ahead.append(submit(inputs))
        if len(ahead) >= window:
            yield outputs(ahead.popleft())
    while ahead:
        yield outputs(ahead.popleft())


def launcher_of(plan: Plan, platform: str | Mapping[str, Any] | None) -> Launcher:
    """How the ranks of ``plan`` start: on the platform ``platform`` (its contents, or a
    platform file's name in ``conf/platform/`` or path; default the plan's platform)."""
    from dse.cluster import launcher_for

    if isinstance(platform, Mapping):
        return launcher_for(platform)
    return launcher_for(platform_file(platform or plan.platform))


def platform_file(name: str) -> dict[str, Any]:
    """The platform file ``name`` (a path, or a name in ``conf/platform/``) as a mapping."""
    import yaml

    from dse.paths import CONF_DIR

    path = Path(name).expanduser()
    if not path.is_file():
        path = CONF_DIR / "platform" / f"{name}.yaml"
    if not path.is_file():
        raise DseError(
            f"platform '{name}' is not a file nor in {CONF_DIR / 'platform'}: give "
            "platform=FILE (the platform the deployment was made for)"
        )
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise DseError(f"{path} is not a platform file (a YAML mapping)")
    return data


def head_address(launcher: Launcher, plan: Plan) -> str:
    """This machine's address as the ranks' hosts reach it: 127.0.0.1 when every rank runs
    here, else the source address of the route to the first other host (no packet is
    sent)."""
    from dse.cluster.build import local_names

    others = [launcher.host(r.host) for r in plan.ranks if r.host not in local_names()]
    if not others:
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((others[0], 9))
            return str(s.getsockname()[0])
        except OSError as exc:
            raise DseError(
                f"no route from this machine to host {others[0]} ({exc}): check the network"
            ) from None
