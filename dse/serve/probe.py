"""Each board's link rate, measured from this machine over ssh: what a served plan cannot see.

A plan that stopped sending over a slow port cannot tell from its own frames that the port
recovered, nor a plan on one board that another board's port slowed. So a served deployment
whose hosts are reached by ssh (disks of their own) measures each board's port now and then:
``ssh HOST 'cat > /dev/null'`` fed :data:`PROBE_BYTES`, timed, less the same command fed
nothing (ssh's own start), is the time the bytes took through the board's port (on a switched
network the path from this machine crosses it, as a transfer from another board does). The
rate is compared with the one measured when serving started (the calibrated conditions): its
ratio is the port's factor (:class:`~models_analytical.conditions.Conditions` ``ports``).
A probe costs its bytes on the port (a fifth of a second at 50 Mbit/s) and two ssh starts.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Mapping, Sequence

from dse.errors import DseError

#: Bytes a probe sends: enough that a gigabit port takes several milliseconds.
PROBE_BYTES = 4 << 20
#: Longest a probe may take (s): a port slower than about 1 Mbit/s reads as this.
PROBE_TIMEOUT_S = 30.0


def _timed(ssh: Sequence[str], host: str, payload: bytes) -> float | None:
    """Seconds ``ssh HOST 'cat > /dev/null'`` took on ``payload``; None past the limit."""
    t0 = time.perf_counter()
    try:
        done = subprocess.run(
            [*ssh, host, "cat > /dev/null"],
            input=payload,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise DseError(f"probing host {host}'s link failed: {said[-1] if said else done}")
    return time.perf_counter() - t0


def rate_Bps(ssh: Sequence[str], host: str, repeats: int = 3) -> float:
    """Bytes per second from this machine to ``host`` (as ssh knows it): the median of
    ``repeats`` probes, each :data:`PROBE_BYTES` timed less an empty one. A probe past the
    time limit, or whose empty run took as long as its full one (ssh's start varies), is
    not a reading; with none, 0 (a port that did not carry the bytes)."""
    payload = bytes(PROBE_BYTES)
    rates = []
    for _ in range(repeats):
        empty = _timed(ssh, host, b"")
        full = _timed(ssh, host, payload)
        if empty is not None and full is not None and full > empty:
            rates.append(PROBE_BYTES / (full - empty))
    return statistics.median(rates) if rates else 0.0


def rates(ssh: Sequence[str], hosts: Mapping[str, str], repeats: int = 3) -> dict[str, float]:
    """:func:`rate_Bps` of each board (platform host -> the name ssh knows it by)."""
    return {board: rate_Bps(ssh, host, repeats) for board, host in hosts.items()}
