"""`python -m dse.fidelity +net=NET platform=P [mappings=30]`: how well the model predicts runs.

The steps are :mod:`dse.fidelity.workflow`'s (keys and defaults:
:class:`dse.config.FidelityConfig`). Writes ``fidelity.csv``, ``fidelity.png`` and
``fidelity.json``; the last line printed is the summary.
"""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports: a signal now ends the process cleanly
    from dse.cli import stop_early_on_signals

    stop_early_on_signals()

from typing import Any

import hydra
from omegaconf import DictConfig

from dse.cli import guarded, run, say
from dse.fidelity.report import messages
from dse.fidelity.workflow import run_fidelity
from dse.paths import CONF_DIR
from dse.records import to_json


@hydra.main(config_path=str(CONF_DIR), config_name="fidelity", version_base="1.3")
@guarded
def main(cfg: DictConfig) -> dict[str, Any]:
    report = run_fidelity(cfg, say)
    for line in messages(report.doc, report.out):
        say(line)
    doc = report.doc
    return {
        "status": "ok",
        "out": str(report.out),
        "latency": to_json(doc.latency),
        "memory": to_json(doc.memory),
        "period": None if doc.period is None else to_json(doc.period),
    }


if __name__ == "__main__":
    run(main, "fidelity")
