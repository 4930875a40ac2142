"""The files of an adaptive service's plans (:mod:`dse.serve.adaptive`): each plan deployed in
its own folder of the work folder, shipped to the hosts with disks of their own, and removed
once replaced; the whole model staged on every host, once, so every plan's weights cross the
links as their differences from it; each board's port probed from here.

Where every host sees this machine's disk (``localhost``, a shared file system) nothing is
staged, shipped or probed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dse.mapping import Mappings
from dse.net import Net
from dse.platform import Platform
from dse.runtime.deployment.layout import SUBMODELS
from dse.runtime.deployment.reader import read_plan
from dse.runtime.launch.mpiexec import Launcher


@dataclass
class Plans:
    """Plans ``WORKDIR/plan-0``, ``plan-1``... of ``net`` on ``platform``, whose ranks start
    by ``launcher``."""

    net: Net
    platform: Platform
    launcher: Launcher
    workdir: Path
    seed: str | None = None  # the whole model's largest file on every host, once staged
    made: int = field(default=0, init=False)

    @property
    def hosts(self) -> list[str]:
        """The platform's boards as ssh knows them."""
        return [self.launcher.host(h) for h in self.platform.hosts]

    def deploy(self, mapping: Mappings) -> Path:
        """Mapping 0 of ``mapping`` deployed in the next plan's folder; the folder."""
        from dse.runtime.launch.deploy import deploy

        directory = self.workdir / f"plan-{self.made}"
        self.made += 1
        deploy(self.net, self.platform, mapping, directory, launcher=self.launcher)
        return directory

    def stage(self, directory: Path) -> bool:
        """Copy the whole model that the deployment at ``directory`` was cut from to every
        host with a disk of its own (all at once); whether there were any."""
        from dse.runtime.launch.ship import staged_seed

        remote, plan = self.launcher.remote, read_plan(directory)
        if remote is None or plan.reference is None:
            return False
        whole = Path(plan.reference.path)
        with ThreadPoolExecutor(max_workers=len(self.hosts)) as pool:
            seeds = list(pool.map(lambda h: staged_seed(whole, remote, h), self.hosts))
        self.seed = seeds[0]  # one path on every host
        return True

    def ship(self, directory: Path, basis: Path | None = None) -> dict[str, Any]:
        """Ship the deployment at ``directory``: each weights file as its differences from the
        staged whole model, each other file from ``basis``'s (the plan before,
        :func:`~dse.runtime.launch.ship.ship`); its bytes and those that crossed the links."""
        from dse.runtime.launch.ship import ship

        remote = self.launcher.remote
        if remote is None:
            return {}
        plan = read_plan(directory)
        shipment = ship(directory, plan, remote, self.launcher.hosts, basis, self.seed)
        return {
            "ship_bytes": sum(c.file_bytes for c in shipment.hosts),
            "sent_bytes": sum(c.literal_bytes for c in shipment.hosts),
        }

    def forget(self, directory: Path) -> None:
        """A replaced plan's sub-models gone, here and on the hosts (its plan and logs stay
        here); a :class:`~dse.errors.DseError` naming a host it could not be removed from."""
        from dse.runtime.launch.ship import unship

        for pattern in SUBMODELS:
            for f in directory.glob(pattern):
                f.unlink(missing_ok=True)
        if self.launcher.remote is not None:
            unship(directory, self.launcher.remote, self.hosts)

    def port_rates(self, repeats: int = 1) -> dict[str, float]:
        """Each board's port rate from here, B/s (:mod:`dse.serve.probe`), by platform host;
        nothing where no host is reached by ssh."""
        from dse.serve.probe import rates

        remote = self.launcher.remote
        if remote is None:
            return {}
        return rates(remote.ssh, dict(zip(self.platform.hosts, self.hosts, strict=True)), repeats)
