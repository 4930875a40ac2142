"""`python -m dse.calibrate platform=P [nets=[...]] [quick=true] [out=FILE]`: calibrate the model.

The steps are :mod:`dse.calibrate.workflow`'s, the settings :mod:`dse.calibrate.settings`'
(keys and defaults: :class:`dse.config.CalibrateConfig`), the file :mod:`dse.calibrate.writer`'s.
By default the file is the platform's calibration (:mod:`dse.paths`), which later
commands with that platform use.
"""

from __future__ import annotations

from typing import Any

import hydra
from omegaconf import DictConfig

from dse.calibrate.settings import settings_from
from dse.calibrate.workflow import calibrate
from dse.calibrate.writer import write
from dse.cli import guarded, run, say
from dse.paths import CONF_DIR


@hydra.main(config_path=str(CONF_DIR), config_name="calibrate", version_base="1.3")
@guarded
def main(cfg: DictConfig) -> dict[str, Any]:
    settings = settings_from(cfg)
    out, doc = write(calibrate(settings), settings)
    seconds = doc["provenance"]["seconds"]
    name = settings.platform.name
    say(f"calibrated platform '{name}' in {seconds:.0f} s: {out}")
    if settings.default_out:
        say(
            f"later commands with platform={name} use it; to go back, delete it or "
            "pass coefficients=platform"
        )
    return {"status": "ok", "out": str(out), "seconds": seconds}


if __name__ == "__main__":
    run(main, "calibrate")
