"""`python -m dse.calibrate platform=P [nets=[...]] [quick=true] [out=FILE]`: calibrate the model.

``resume=true`` goes on with an interrupted calibration's measurements, ``refit=true`` fits
them again without measuring (:mod:`dse.calibrate.journal`). The steps are
:mod:`dse.calibrate.workflow`'s, the settings :mod:`dse.calibrate.settings`'
(keys and defaults: :class:`dse.config.CalibrateConfig`), the file :mod:`dse.calibrate.writer`'s.
By default the file is the platform's calibration (:mod:`dse.paths`), which later
commands with that platform use.
"""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports: a signal now ends the process cleanly
    from dse.cli import stop_early_on_signals

    stop_early_on_signals()

from typing import Any

import hydra
from omegaconf import DictConfig

from dse.calibrate.journal import Journal
from dse.calibrate.settings import settings_from
from dse.calibrate.workflow import calibrate
from dse.calibrate.writer import write
from dse.cli import guarded, run, say
from dse.paths import CONF_DIR


@hydra.main(config_path=str(CONF_DIR), config_name="calibrate", version_base="1.3")
@guarded
def main(cfg: DictConfig) -> dict[str, Any]:
    settings = settings_from(cfg)
    journal = Journal(settings.out, settings.platform, settings.resume, settings.refit)
    out, doc = write(calibrate(settings, journal), settings)
    journal.finish()
    kept = f"{journal.taken} measurements taken, {journal.reused} taken from it"
    say(f"measurements: {journal.path} ({kept}; refit=true fits them again)")
    seconds = doc["provenance"]["seconds"]
    name = settings.platform.name
    say(f"calibrated platform '{name}' in {seconds:.0f} s: {out}")
    for line in link_lines(doc["provenance"].get("links", {})):
        say(f"  {line}")
    for line in step_lines(doc["provenance"].get("links", {})):
        say(f"  warning: {line}")
    for what, why in left_out(doc["provenance"]).items():
        say(f"  left out {what}: {why}")
    if settings.default_out:
        say(
            f"later commands with platform={name} use it; to go back, delete it or "
            "pass coefficients=platform"
        )
    return {"status": "ok", "out": str(out), "seconds": seconds}


def link_lines(links: dict[str, Any]) -> list[str]:
    """Each link class's and port's fitted latency and bandwidth, one line each."""
    fits = {f"link {c}": t["fit"] for c, t in links.items() if isinstance(t, dict) and "fit" in t}
    fits |= {f"port {h}": t["fit"] for h, t in links.get("ports", {}).items() if "fit" in t}
    return [
        f"{what}: latency {f['latency_s'] * 1e6:.0f} us, {f['bandwidth_Bps'] / 1e6:.1f} MB/s"
        for what, f in fits.items()
    ]


def step_lines(links: dict[str, Any]) -> list[str]:
    """A line for each link class, and each board pair measured for the ports, whose table
    has a step at small messages (:func:`dse.calibrate.links.small_message_step`): what it
    took, what its line gives, and what to do."""
    pairs = links.get("ports", {}).get("pairs", {})
    tables = {**links, **{f"{pair} (port benchmark)": t for pair, t in pairs.items()}}
    out = []
    for what, t in tables.items():
        step = t.get("small_message_step") if isinstance(t, dict) else None
        if step:
            out.append(
                f"link {what}: {step['bytes'] / 1024:g} kB one way took "
                f"{step['seconds'] * 1e3:.2f} ms, its line gives {step['line_s'] * 1e3:.2f} ms: "
                "on an emulated cluster, other work on this machine's CPUs during the link "
                "benchmark does this; run the calibration again on a quiet machine (keep it "
                "only if your real link has such a step)"
            )
    return out


def left_out(provenance: dict[str, Any]) -> dict[str, str]:
    """What the calibration could not measure and went on without (a network a type's device
    could not hold, ...), with why."""
    out = {
        f"{t} {what}": why
        for t, p in provenance.get("types", {}).items()
        for what, why in p.get("left_out", {}).items()
    }
    return {**out, **provenance.get("left_out", {})}


if __name__ == "__main__":
    run(main, "calibrate")
