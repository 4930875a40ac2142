"""The cluster's network: boards in namespaces, veth pairs on a bridge, ports shaped with tc.

Topology (a star through one switch, as a real Ethernet switch)::

    root namespace            switch namespace dse.<c>                  board namespace dse.<c>.<b>
    dse<hash> 198.18.x.1 ---- head ─┐
                                    br0 ── p0 ═══════════════════════════ eth0 198.18.x.10
                                        ── p1 ═══════════════════════════ eth0 198.18.x.11

mpiexec runs in the root namespace and reaches the boards through the head port (its
daemons' control traffic only); boards talk to each other through the bridge.

* **switched**: each board's port is shaped at its rate in both directions, with a token
  bucket (tbf) on the board's ``eth0`` (what it sends) and on the switch's ``p<i>`` (what it
  receives), as a full-duplex switch port. A pair of boards gets the slower port's rate; a
  board sending to two others shares its port between them.
* **shared** (Wi-Fi): every frame a board sends enters the bridge through its port; an ingress
  filter on every port redirects it to one ``ifb`` device (``air``) whose token bucket has the
  medium's rate, and from there it is forwarded as usual. All boards' traffic, both directions,
  queues on that one channel, so the sum of every transfer is bounded by the medium's rate
  (one transmitter at a time, as on a Wi-Fi channel).

Token buckets: ``burst`` holds 0.5 ms of the rate (at least four full frames) and the boards'
GSO packets are a quarter of it (at most 16 KB), so tbf never has to cut a packet in software,
and a timer that fires late (a loaded machine) is made up by the next packets instead of lost;
a burst no larger than one GSO packet held the rate back (``docs/results/cluster.md``). The
price: a message gets up to one burst (0.5 ms of the rate) ahead of a real port. ``limit``
holds 20 ms of the rate, a switch's buffer. No delay is added (no netem qdisc): a link's
latency is what crossing the veth pairs costs, far less than a real network's.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from dse.cluster.names import (
    BOARD_IF,
    BRIDGE,
    HEAD_PEER,
    MEDIUM,
    Names,
    board_address,
    head_address,
    port,
)
from dse.cluster.spec import ClusterSpec
from dse.cluster.system import CommandError, ip, run, tc
from dse.errors import DseError

NETNS_DIR = Path("/run/netns")
FRAME = 1514  # bytes of a full Ethernet frame as tbf counts it (MTU 1500 + header)
BURST_S = 0.5e-3
QUEUE_S = 0.020
GSO_MAX = 16384


def bucket(rate_mbit: float) -> tuple[int, int, int]:
    """(burst, limit, GSO packet size) in bytes of a token bucket at ``rate_mbit``."""
    rate_bps = rate_mbit * 1e6 / 8
    burst = max(int(rate_bps * BURST_S), 4 * FRAME)
    gso = min(max(burst // 4, FRAME), GSO_MAX)
    return burst, max(int(rate_bps * QUEUE_S), 4 * burst), gso


def shape(dev: str, ns: str, rate_mbit: float) -> None:
    burst, limit, _ = bucket(rate_mbit)
    rate = f"{int(rate_mbit * 1e6)}bit"
    tc(*f"qdisc replace dev {dev} root tbf rate {rate} burst {burst} limit {limit}".split(), ns=ns)


def namespaces() -> list[str]:
    """Every network namespace ``ip netns`` knows."""
    out = ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def used_networks() -> list[ipaddress.IPv4Network]:
    """IPv4 networks this machine already routes to or holds (default routes aside), and its
    name servers: a cluster's subnet must overlap none of them."""
    nets: list[ipaddress.IPv4Network] = []
    routes = json.loads(ip("-j", "-4", "route", "show", "table", "all").stdout or "[]")
    for r in routes:
        with contextlib.suppress(ValueError):
            if r.get("dst") not in (None, "default"):
                nets.append(ipaddress.IPv4Network(r["dst"], strict=False))
    for link in json.loads(ip("-j", "-4", "addr").stdout or "[]"):
        for a in link.get("addr_info", []):
            with contextlib.suppress(ValueError, KeyError):
                nets.append(ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False))
    with contextlib.suppress(OSError):
        for line in Path("/etc/resolv.conf").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "nameserver":
                with contextlib.suppress(ValueError):
                    nets.append(ipaddress.IPv4Network(parts[1]))
    return nets


def choose_subnet(names: Names) -> ipaddress.IPv4Network:
    used = used_networks()
    for subnet in names.subnets():
        if not any(subnet.overlaps(u) for u in used):
            return subnet
    raise DseError("no free /24 left in 198.18.0.0/15 for a cluster: take some clusters down")


def build(spec: ClusterSpec, names: Names, subnet: ipaddress.IPv4Network) -> None:
    """Make the switch, the boards and their links (the caller tears down on failure)."""
    sw = names.switch_ns
    prefix = subnet.prefixlen
    ip("netns", "add", sw)
    ip("link", "set", "lo", "up", ns=sw)
    ip("link", "add", BRIDGE, "type", "bridge", ns=sw)
    ip("link", "add", names.head_link, "type", "veth", "peer", "name", HEAD_PEER, "netns", sw)
    ip("link", "set", names.head_link, "addrgenmode", "none")
    ip("addr", "add", f"{head_address(subnet)}/{prefix}", "dev", names.head_link)
    ip("link", "set", HEAD_PEER, "addrgenmode", "none", ns=sw)
    ip("link", "set", HEAD_PEER, "master", BRIDGE, ns=sw)
    shared = spec.network == "shared"
    if shared:
        try:
            ip("link", "add", MEDIUM, "type", "ifb", ns=sw)
        except CommandError as exc:
            raise DseError(
                f"a shared medium needs an ifb device, which this kernel refused (CONFIG_IFB): "
                f"{exc}"
            ) from None
        ip("link", "set", MEDIUM, "up", ns=sw)
        shape(MEDIUM, sw, spec.rate_mbit)
    for i, board in enumerate(spec.boards):
        ns, p = names.board_ns(board.name), port(i)
        ip("netns", "add", ns)
        ip("link", "set", "lo", "up", ns=ns)
        ip("link", "add", p, "type", "veth", "peer", "name", BOARD_IF, "netns", ns, ns=sw)
        ip("link", "set", p, "addrgenmode", "none", ns=sw)
        ip("link", "set", p, "master", BRIDGE, ns=sw)
        ip("link", "set", BOARD_IF, "addrgenmode", "none", ns=ns)
        ip("addr", "add", f"{board_address(subnet, i)}/{prefix}", "dev", BOARD_IF, ns=ns)
        ip("link", "set", BOARD_IF, "gso_max_size", str(bucket(board.rate_mbit)[2]), ns=ns)
        if shared:
            tc("qdisc", "add", "dev", p, "handle", "ffff:", "ingress", ns=sw)
            redirect = f"u32 match u32 0 0 action mirred egress redirect dev {MEDIUM}"
            tc(*f"filter add dev {p} parent ffff: protocol all {redirect}".split(), ns=sw)
        else:
            shape(BOARD_IF, ns, board.rate_mbit)
            shape(p, sw, board.rate_mbit)
        ip("link", "set", p, "up", ns=sw)
        ip("link", "set", BOARD_IF, "up", ns=ns)
    ip("link", "set", HEAD_PEER, "up", ns=sw)
    ip("link", "set", BRIDGE, "up", ns=sw)
    ip("link", "set", names.head_link, "up")


def reshape(spec: ClusterSpec, names: Names, board: str | None) -> None:
    """Give a running cluster's links ``spec``'s rate, as :func:`build` does: ``board``'s port
    (both directions) on a switched network, the medium on a shared one (``board`` None); and
    the boards' GSO packets their size at that rate. ``tc qdisc replace`` changes each token
    bucket in place: the links carry traffic throughout."""
    index = {b.name: i for i, b in enumerate(spec.boards)}
    if spec.network == "shared":
        shape(MEDIUM, names.switch_ns, spec.rate_mbit)
        changed = [b.name for b in spec.boards]
    else:
        assert board is not None, "a switched network's rates are its ports'"
        rate = spec.board(board).rate_mbit
        shape(BOARD_IF, names.board_ns(board), rate)
        shape(port(index[board]), names.switch_ns, rate)
        changed = [board]
    for name in changed:
        gso = str(bucket(spec.board(name).rate_mbit)[2])
        ip("link", "set", BOARD_IF, "gso_max_size", gso, ns=names.board_ns(name))


def wait_ready(
    spec: ClusterSpec, names: Names, subnet: ipaddress.IPv4Network, timeout_s: float = 15.0
) -> None:
    """Until every board reaches the head over TCP: a launch right after the links were made
    once failed ("daemon failed to report back")."""
    head = str(head_address(subnet))
    probe = "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1)"
    with socket.socket() as server:
        server.bind((head, 0))
        server.listen(len(spec.boards) + 4)
        where = server.getsockname()[1]
        for board in spec.boards:
            deadline = time.monotonic() + timeout_s
            cmd = ["nsenter", f"--net={NETNS_DIR / names.board_ns(board.name)}", sys.executable]
            cmd += ["-I", "-S", "-c", probe, head, str(where)]
            while subprocess.run(cmd, capture_output=True, check=False).returncode != 0:
                if time.monotonic() > deadline:
                    raise DseError(
                        f"board {board.name} of cluster {names.cluster} cannot reach the head "
                        f"{head} after {timeout_s:g} s: its link does not carry traffic"
                    )
                time.sleep(0.1)


def kill_in(ns: str, spare: frozenset[int] | set[int] = frozenset()) -> None:
    """SIGKILL every process inside the namespace ``ns`` but those of ``spare``."""
    for _ in range(50):
        pids = ip("netns", "pids", ns, check=False).stdout.split()
        out = [p for p in pids if int(p) not in spare]
        if not out:
            return
        for pid in out:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.02)


def teardown(names: Names) -> None:
    """Remove every namespace and link of the cluster ``names.cluster`` (whatever exists)."""
    ours = [ns for ns in namespaces() if names.owns_namespace(ns)]
    for ns in ours:
        kill_in(ns)
    ip("link", "del", names.head_link, check=False)
    for ns in sorted(ours, key=len, reverse=True):  # boards first, the switch last
        try:
            ip("netns", "del", ns)
        except CommandError:
            if (NETNS_DIR / ns).exists():
                raise


def leftovers(names: Names) -> list[str]:
    """What of the cluster's network still exists (for `down` and the tests)."""
    found = [f"namespace {ns}" for ns in namespaces() if names.owns_namespace(ns)]
    if run("ip", "link", "show", names.head_link, check=False).returncode == 0:
        found.append(f"link {names.head_link}")
    return found
