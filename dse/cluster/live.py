"""A running cluster's link rates and CPU shares changed while ranks run on it.

:func:`set_rate` gives a port (switched) or the medium (shared) a new rate, :func:`set_share`
a device a new share of its board's CPUs. Each checks the new figure as ``up`` checks the
platform's (:func:`dse.cluster.spec.with_rate`, :func:`~dse.cluster.spec.with_share`: one line
naming the problem, and nothing changed), applies it to the kernel's objects as ``up`` built
them (the token buckets, :func:`dse.cluster.net.reshape`; the cgroups' weights and quotas,
:func:`dse.cluster.cpu.apply_shares`; the devices' pace files and the launcher's scripts,
:mod:`dse.cluster.launcher`), then saves the new spec in the cluster's state, so that
``status`` shows it and ``check`` measures against it; the last self-check, of the old
figures, is dropped; a change that fails midway is undone. Transfers and ranks that run keep
running: a link's new rate holds from its next packet, a device's weight or quota from the
kernel's next scheduler decision, a paced rank's new speed from its first run that ends a
quarter second after the change (:mod:`dse.runtime.rank.pace`).

Under ``cpu_share`` corunner, the co-runners of what already runs on a board were started for
the shares ``up`` built: a share whose change would need other co-runners (a device's share
to or from a whole CPU, a CPU's devices to or from all of it) is refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from dse.cluster import cpu, launcher, net
from dse.cluster.cpu import corunner_groups
from dse.cluster.spec import ClusterSpec, with_rate, with_share
from dse.cluster.state import CHECK, State, load, machine_lock, save
from dse.errors import DseError


def set_rate(state: State, board: str | None, rate_mbit: float) -> State:
    """Give ``board``'s port (a switched network, both directions) or the medium (a shared
    one: ``board`` None) ``rate_mbit``; the cluster's new state (saved)."""
    with machine_lock():
        now = load(state.name)  # the state as saved: changes made since ``state`` stay
        spec = with_rate(now.spec, board, rate_mbit)
        _all_or_nothing(lambda s: net.reshape(s, now.names, board), now.spec, spec)
        return _saved(now, spec)


def set_share(state: State, device: str, share: float) -> State:
    """Give ``device`` ``share`` of its board's CPUs; the cluster's new state (saved)."""
    with machine_lock():
        now = load(state.name)
        spec = with_share(now.spec, device, share)
        _same_corunners(now.spec, spec, device)

        def apply(s: ClusterSpec) -> None:
            cpu.apply_shares(s, now.names)
            launcher.write(now.names, s)  # the pace files, then the scripts of later ranks

        _all_or_nothing(apply, now.spec, spec)
        return _saved(now, spec)


def _all_or_nothing(
    apply: Callable[[ClusterSpec], None], old: ClusterSpec, new: ClusterSpec
) -> None:
    """Apply ``new``; if that fails midway, ``old`` again (as far as it goes) before the error."""
    try:
        apply(new)
    except (DseError, OSError) as exc:
        with contextlib.suppress(DseError, OSError):
            apply(old)
        if isinstance(exc, OSError):
            raise DseError(f"cluster {new.name} is left as it was: {exc}") from None
        raise


def _same_corunners(old: ClusterSpec, new: ClusterSpec, device: str) -> None:
    board = new.device(device).board
    before = [g.parts for b in old.boards for g in corunner_groups(old, b.name)]
    after = [g.parts for b in new.boards for g in corunner_groups(new, b.name)]
    if before != after:
        raise DseError(
            f"cluster {new.name}: under cpu_share=corunner, a share of "
            f"{new.device(device).share:g} for {device} needs other co-runners on board {board} "
            "than the running ones: bring the cluster up again with it "
            f"(platform.emulation.devices.{device}.share=...), or use cpu_share=weight"
        )


def _saved(now: State, spec: ClusterSpec) -> State:
    changed = State(spec, now.subnet, now.as_built)
    (now.names.state_dir / CHECK).unlink(missing_ok=True)  # measured the old figures
    save(changed)
    return changed
