"""The hosts a deployment's ranks start on: its ``hostfile`` and ``rankfile`` (written by
:func:`dse.runtime.launch.mpiexec.mpi_files`) read back and checked before mpiexec starts, so a
host that cannot be reached is one line naming it and the boards of its ranks, not ssh's.

:func:`check_hosts` holds when every host of the hostfile is one the rankfile places ranks on,
and back, and every host that is none of the plan's own hosts resolves here (a plan's host
may be a name only the launcher's ssh config knows: an emulated cluster's board).
"""

from __future__ import annotations

import socket
from pathlib import Path

from dse.errors import DseError
from dse.runtime.deployment.layout import HOSTFILE, RANKFILE
from dse.runtime.deployment.plan import Plan

FIX = "deploy the mapping again, or edit both files alike"


def _lines(path: Path) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise DseError(f"cannot read {path}: {exc.strerror or exc} ({FIX})") from None
    return [ln.split("#", 1)[0].strip() for ln in text.splitlines() if ln.split("#", 1)[0].strip()]


def rankfile_hosts(directory: Path) -> dict[int, str]:
    """Rank -> host of the rankfile (``rank R=HOST slot=S``); one line where a line is not."""
    path = Path(directory) / RANKFILE
    out: dict[int, str] = {}
    for line in _lines(path):
        head, _, rest = line.partition("=")
        words = head.split()
        if len(words) != 2 or words[0] != "rank" or not words[1].isdigit() or not rest.split():
            raise DseError(f"{path}: '{line[:80]}' is not 'rank R=HOST slot=S' ({FIX})")
        out[int(words[1])] = rest.split()[0]
    return out


def check_hosts(plan: Plan, directory: Path) -> None:
    """One line where the hostfile and the rankfile of ``directory`` disagree, or a host named
    there that is none of ``plan``'s hosts does not resolve here: the host, the devices of its
    ranks, what to check."""
    directory = Path(directory)
    hostfile = directory / HOSTFILE
    listed = [line.split()[0] for line in _lines(hostfile)]
    placed = rankfile_hosts(directory)
    devices = {r.rank: r.device for r in plan.ranks}

    def boards(host: str) -> str:
        ranks = sorted(r for r, h in placed.items() if h == host)
        return ", ".join(f"rank {r} ({devices.get(r, '?')})" for r in ranks)

    for host in listed:
        if host not in placed.values():
            where = ", ".join(dict.fromkeys(placed.values())) or "no host"
            raise DseError(
                f"{hostfile} names host '{host[:80]}', where the rankfile places no rank "
                f"(it places them on {where}): {FIX}"
            )
    for host in dict.fromkeys(placed.values()):
        if host not in listed:
            raise DseError(
                f"{hostfile} does not name host '{host[:80]}', where the rankfile places "
                f"{boards(host)}: {FIX}"
            )
    own = {r.host for r in plan.ranks}
    for host in dict.fromkeys(placed.values()):
        if host in own:
            continue
        try:
            socket.getaddrinfo(host, None)
        except (OSError, UnicodeError):
            raise DseError(
                f"host '{host[:80]}' of {hostfile} ({boards(host)}) does not resolve here: "
                f"check the name (the plan's hosts are {', '.join(sorted(own))}) and that "
                "DNS or /etc/hosts knows it"
            ) from None
