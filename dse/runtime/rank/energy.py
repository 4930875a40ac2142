"""Energy counters a rank can read: RAPL (powercap) or a Jetson's INA3221 rails; else a reason."""

from __future__ import annotations

import glob
import time
from dataclasses import dataclass, field
from pathlib import Path

#: Where the counters live: RAPL packages, and the INA3221 power monitors of Jetson boards.
RAPL = "/sys/class/powercap/intel-rapl:*/energy_uj"
INA3221 = (
    "/sys/bus/i2c/drivers/ina3221x/*/iio:device*/in_power*_input",  # JetPack 4 (mW)
    "/sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*/in*_input",  # JetPack 5 (mV), with curr*
)


@dataclass
class EnergyMeter:
    """Joules from a cumulative counter (RAPL) or from sampled power (INA3221, mW)."""

    kind: str | None
    paths: list[str] = field(default_factory=list)
    reason: str | None = None

    @property
    def available(self) -> bool:
        return self.kind is not None

    def read(self) -> tuple[float, float]:
        """(time s, counter): microjoules for RAPL, summed milliwatts for INA3221."""
        total = sum(float(Path(p).read_text().split()[0]) for p in self.paths)
        return time.perf_counter(), total

    def per_iteration(self, start: tuple[float, float] | None, iterations: int) -> float | None:
        """Joules per iteration since ``start`` (the whole host/board, not this rank alone)."""
        if start is None or iterations <= 0:
            return None
        t1, c1 = self.read()
        t0, c0 = start
        if self.kind == "rapl":
            joules = (c1 - c0) / 1e6 if c1 >= c0 else None  # a wrapped counter: no figure
        else:
            joules = (c0 + c1) / 2 / 1e3 * (t1 - t0)  # mean of two power samples x time
        return None if joules is None else joules / iterations


def _readable(paths: list[str]) -> list[str]:
    ok = []
    for p in paths:
        try:
            float(Path(p).read_text().split()[0])
            ok.append(p)
        except (OSError, ValueError, IndexError):
            continue
    return ok


def energy_meter() -> EnergyMeter:
    """The first readable counter, else a meter that says why there is none."""
    rapl = _readable(sorted(glob.glob(RAPL)))
    if rapl:
        return EnergyMeter("rapl", rapl)
    ina = _readable(sorted(glob.glob(INA3221[0])))
    if ina:
        return EnergyMeter("ina3221", ina)
    seen = [
        p
        for p in (
            "/sys/class/powercap",
            "/sys/bus/i2c/drivers/ina3221x",
            "/sys/bus/i2c/drivers/ina3221",
        )
        if Path(p).exists()
    ]
    where = ", ".join(seen) if seen else "no /sys/class/powercap nor INA3221 driver"
    return EnergyMeter(
        None,
        reason=f"no readable energy counter on this host (RAPL powercap, Jetson INA3221): {where}",
    )
