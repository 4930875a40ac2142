"""Every name and address one emulated cluster uses, derived from the cluster's name alone.

Two clusters never share a name: everything a cluster makes carries its name or a hash of it,
so `down` (or the next `up` of the same name) finds all of it again without any state file,
even after a killed process left it half built.

* network namespaces: ``dse.<cluster>`` (the switch: a bridge ``br0``, the ports ``p<i>`` and,
  for a shared medium, the ``air`` device) and ``dse.<cluster>.<board>`` (a board: ``eth0``);
* the one link in the root namespace: ``dse<hash7>``, the head port mpiexec talks through;
* cgroups (v1): ``/sys/fs/cgroup/{cpu,cpuset,memory}/dse.<cluster>/<board>/<device>``;
* the state directory ``/run/dse-cluster/<cluster>/`` (the launcher, the last check);
* the subnet: a /24 of 198.18.0.0/15 (RFC 2544's range for benchmark networks, which real
  networks leave alone), chosen from a hash of the name; head ``.1``, boards ``.10`` on.

Cluster names are letters, digits, ``_`` and ``-`` (no ``.``: it separates the parts above);
board names are host names (letters, digits and ``-``), so a device name ``<board>_<resource>``
never equals a board's.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dse.errors import DseError

#: Prefix of every namespace and cgroup directory of a cluster.
PREFIX = "dse."
#: cgroup v1 hierarchies a cluster makes directories in, in the order a process joins them:
#: ``cpuset`` first, so that it is on its board's CPUs before it joins a ``cpu`` group. A process
#: that joined a device's ``cpu`` group on another CPU left its load average there: the kernel
#: then weighed the device's group on its own CPU down by that stale load, and the device
#: beside it could run at a whole CPU instead of its share (``docs/results/cluster.md``).
CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpuset", "cpu", "memory")
#: Where clusters keep their launcher and last self-check (tmpfs: gone at reboot, as are the
#: namespaces and cgroups themselves).
STATE_ROOT = Path("/run/dse-cluster")
#: The /24s clusters take their subnets from.
POOL = ipaddress.IPv4Network("198.18.0.0/15")
FIRST_BOARD_HOST = 10
MAX_BOARDS = 200

CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")
BOARD_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,30}[A-Za-z0-9])?$")

#: Interfaces inside the namespaces (their names only need to be unique there).
BRIDGE = "br0"
HEAD_PEER = "head"
BOARD_IF = "eth0"
MEDIUM = "air"


def check_cluster_name(name: str) -> str:
    if not CLUSTER_NAME.match(name):
        raise DseError(
            f"cluster name {name!r} is not usable: give 1-40 letters, digits, '_' or '-' "
            "(name=...), starting with a letter or digit"
        )
    return name


def check_board_name(name: str, where: str) -> str:
    if not BOARD_NAME.match(name):
        raise DseError(
            f"{where}: host {name!r} cannot name a board: a board's name is its host name, "
            "letters, digits and '-' (at most 32, not starting or ending with '-')"
        )
    return name


def port(index: int) -> str:
    """The switch's port of the board ``index`` (in the switch namespace)."""
    return f"p{index}"


@dataclass(frozen=True)
class Names:
    """The names of the cluster ``cluster``."""

    cluster: str

    def __post_init__(self) -> None:
        check_cluster_name(self.cluster)  # it becomes paths: never '..' or '/'

    @property
    def tag(self) -> str:
        return hashlib.sha256(self.cluster.encode()).hexdigest()[:7]

    @property
    def switch_ns(self) -> str:
        return f"{PREFIX}{self.cluster}"

    def board_ns(self, board: str) -> str:
        return f"{PREFIX}{self.cluster}.{board}"

    def owns_namespace(self, ns: str) -> bool:
        return ns == self.switch_ns or ns.startswith(self.switch_ns + ".")

    @property
    def head_link(self) -> str:
        """The root namespace's end of the head port (at most 15 characters: 'dse' + 7)."""
        return f"dse{self.tag}"

    def cgroup(self, controller: str, *parts: str) -> Path:
        return CGROUP_ROOT / controller / f"{PREFIX}{self.cluster}" / Path(*parts)

    @property
    def state_dir(self) -> Path:
        return STATE_ROOT / self.cluster

    def subnets(self) -> Iterator[ipaddress.IPv4Network]:
        """Candidate /24s, first the one the name hashes to, then the others in a fixed order."""
        blocks = list(POOL.subnets(new_prefix=24))
        start = int(hashlib.sha256(f"subnet:{self.cluster}".encode()).hexdigest(), 16)
        for k in range(len(blocks)):
            yield blocks[(start + k) % len(blocks)]


def head_address(subnet: ipaddress.IPv4Network) -> ipaddress.IPv4Address:
    return subnet.network_address + 1


def board_address(subnet: ipaddress.IPv4Network, index: int) -> ipaddress.IPv4Address:
    return subnet.network_address + FIRST_BOARD_HOST + index
