"""A running cluster as the library sees it: its spec, subnet and addresses, kept on disk.

``up`` writes ``/run/dse-cluster/<cluster>/state.json`` last, once everything is built and
carries traffic; ``status``, the MPI helpers and the runtime read it back with :func:`load`.
The self-check's result sits beside it (``check.json``). Nothing here is needed to tear a
cluster down: its names say where everything is (:mod:`dse.cluster.names`).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dse.cluster import launcher as scripts
from dse.cluster.names import STATE_ROOT, Names, board_address, head_address
from dse.cluster.spec import ClusterSpec
from dse.errors import DseError
from dse.files import owned

STATE = "state.json"
CHECK = "check.json"


@dataclass(frozen=True)
class State:
    spec: ClusterSpec  # as it runs (rates and shares as python -m dse.cluster set left them)
    subnet: ipaddress.IPv4Network
    built: ClusterSpec | None = None  # as up built it, where set changed it since

    @property
    def as_built(self) -> ClusterSpec:
        """The cluster as ``up`` built it from its platform (a live change aside)."""
        return self.built or self.spec

    @property
    def names(self) -> Names:
        return Names(self.spec.name)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def head(self) -> ipaddress.IPv4Address:
        return head_address(self.subnet)

    def address(self, board: str) -> ipaddress.IPv4Address:
        index = [b.name for b in self.spec.boards].index(board)
        return board_address(self.subnet, index)

    @property
    def launcher(self) -> Path:
        """Open MPI's ssh agent for this cluster (``launcher BOARD COMMAND``)."""
        return scripts.path(self.names, scripts.LAUNCHER)

    @property
    def rank_script(self) -> Path:
        """Before a rank's program: joins its device's cgroups (``rank B/D,... PROGRAM``)."""
        return scripts.path(self.names, scripts.RANK)

    def as_dict(self) -> dict[str, Any]:
        built = {"built": self.built.as_dict()} if self.built is not None else {}
        return {
            **built,
            "spec": self.spec.as_dict(),
            "subnet": str(self.subnet),
            "head": str(self.head),
            "addresses": {b.name: str(self.address(b.name)) for b in self.spec.boards},
        }


def save(state: State) -> None:
    write_json(state.names.state_dir / STATE, state.as_dict())


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def load(name: str) -> State:
    """The state of the running cluster ``name``, or one line saying it is not up."""
    path = Names(name).state_dir / STATE
    try:
        data = json.loads(path.read_text())
        spec = ClusterSpec.from_dict(data["spec"], str(path))
        built = ClusterSpec.from_dict(data["built"], str(path)) if "built" in data else None
        return State(spec, ipaddress.IPv4Network(data["subnet"]), built)
    except FileNotFoundError:
        raise DseError(
            f"cluster '{name}' is not up: run python -m dse.cluster up platform=PLATFORM "
            f"(name={name} if the cluster is not named after its platform)"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DseError(
            f"{path} is not a cluster's state ({exc}): run `down` and `up` again"
        ) from None


def load_check(name: str) -> dict[str, Any] | None:
    try:
        return json.loads((Names(name).state_dir / CHECK).read_text())
    except (OSError, ValueError):
        return None


def save_check(name: str, result: dict[str, Any]) -> None:
    write_json(Names(name).state_dir / CHECK, result)


@contextlib.contextmanager
def machine_lock() -> Iterator[None]:
    """One `up` or `down` at a time on this machine (two clusters must not pick one subnet).
    The lock is on the state root directory itself, so it leaves no file behind."""
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    fd = os.open(STATE_ROOT, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def one_run(state: State) -> Iterator[None]:
    """The cluster for one run (a deployment, a calibration's unit, a self-check): a run of
    another process waits for it to end, saying once whose run it waits for (the lock is
    :func:`dse.files.owned`'s, in the state directory, and ends with its process). Two runs at
    once would share the devices and measure each other's load: a calibration that profiled
    beside a deployment fitted a device of share 0.6 at 0.52."""

    def waiting(who: str) -> None:
        print(
            f"cluster '{state.name}' is running a run of {who}: waiting for it to end (runs at "
            "once would share the devices and spoil each other's measurements)",
            file=sys.stderr,
            flush=True,
        )

    with owned(state.names.state_dir, "cluster", waiting):
        yield
