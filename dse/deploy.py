"""`python -m dse.deploy +net=NET mapping=M platform=P [out=DIR] [measure=true]`: phase two."""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports: a signal now ends the process cleanly
    from dse.cli import stop_early_on_signals

    stop_early_on_signals()

import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from dse import app
from dse.cli import guarded, run
from dse.errors import DseError
from dse.mapping import Mappings
from dse.mapping.autodice import read_autodice
from dse.measuring.comparison import Compared
from dse.measuring.measure import Settings, measure_one
from dse.measuring.rounds import Rounds
from dse.net import Net, load_net
from dse.paths import CONF_DIR
from dse.records import to_json
from dse.runtime.deployment.layout import COMPARISON, MEASUREMENTS
from dse.runtime.launch.deploy import deploy
from dse.runtime.launch.mpiexec import mpiexec_path
from dse.values import number

#: Where a deployment goes without out=: under runs/, named by net and mapping.
DEFAULT_OUT = "runs/deploy/{net}-{mapping}"


def summary(result: Compared) -> str:
    """A few lines: status, latency measured vs predicted, per device."""
    if not result.ok:
        return f"measurement failed: {result.reason}"
    lat = result.latency
    cmp = result.comparison
    pred = cmp.latency_ms if cmp is not None else None
    eq = result.equivalence
    lines = [
        f"latency {lat.median:.2f} ms median (p10 {lat.p10:.2f}, p90 {lat.p90:.2f}) "
        + (
            f"| predicted {pred.predicted:.2f} ms ({pred.error_pct:+.1f} %)"
            if pred is not None and pred.predicted and pred.error_pct is not None
            else ""
        ),
        f"outputs vs the whole model: max rel error {eq.max_rel_error if eq else None}",
    ]
    period = cmp.period_ms if cmp is not None else None
    if period is not None and period.measured is not None and period.predicted is not None:
        lines.append(
            f"stream period {period.measured:.2f} ms | predicted {period.predicted:.2f} ms "
            f"({period.error_pct or 0.0:+.1f} %)"
        )
    for r in result.ranks:
        lines.append(
            f"  {r.device}: compute {r.compute_ms.median:.2f} ms, wait "
            f"{r.wait_ms.median:.2f} ms, communication {r.communication_ms.median:.2f}"
            f" ms, CPU {r.cpu_ms.median:.2f} ms, sent {r.bytes_sent:,} B, peak RSS "
            f"{r.peak_rss_loading_mb} MB loading / "
            f"{r.peak_rss_running_mb} MB running"
            + (f" / {r.peak_rss_stream_mb} MB streaming" if r.peak_rss_stream_mb else "")
        )
    return "\n".join(lines)


def read_mapping(cfg: DictConfig, net: Net, keys: list[str], platform: str) -> Mappings:
    """The AutoDiCE mapping (and horizontal) files of ``cfg`` as a mapping of ``net``."""
    return read_autodice(net.graph, keys, platform, cfg.mapping, cfg.get("horizontal") or None)


@hydra.main(config_path=str(CONF_DIR), config_name="deploy", version_base="1.3")
@guarded
def main(cfg: DictConfig) -> dict[str, Any]:
    if not cfg.get("mapping"):
        raise DseError(
            "no mapping given: add mapping=path/mapping.json "
            "(and horizontal=path/horizontal.json for split layers)"
        )
    if int(cfg.iterations) < 1 or int(cfg.warmup) < 0:
        raise DseError("iterations must be at least 1 and warmup at least 0")
    if int(cfg.stream) < 0:
        raise DseError(f"stream={cfg.stream} must be 0 (off) or more frames")
    number(cfg.timeout_s, "timeout_s", positive=True)  # a limit in seconds: finite, above 0
    started = time.perf_counter()
    # on an emulated platform: its cluster (which a run needs up; a deployment only written
    # takes it when it is up, else the platform's hosts by name)
    launcher = app.launcher_from(cfg, required=bool(cfg.measure))
    if cfg.measure:
        net, platform, model = app.model_from(cfg)
    else:
        net, platform, model = load_net(cfg.get("net")), app.platform_from(cfg), None
    mapping = read_mapping(cfg, net, platform.keys, platform.name)
    default = DEFAULT_OUT.format(net=net.name, mapping=mapping.ident(0))
    out = Path(str(cfg.get("out") or default)).expanduser()
    seed, warmup, iterations = int(cfg.seed), int(cfg.warmup), int(cfg.iterations)
    if not cfg.measure:
        plan = deploy(
            net, platform, mapping, out, seed, warmup, iterations, int(cfg.stream), launcher
        )
        n_seg = sum(len(r.segments) for r in plan.ranks)
        print(
            f"deployed {net.name} on {len(plan.ranks)} ranks ({n_seg} sub-models) to {out} "
            f"in {time.perf_counter() - started:.2f} s; run it with {out / 'run.sh'}"
        )
        return {"status": "ok", "out": str(out), "ranks": len(plan.ranks)}
    mpiexec_path()  # one line before anything is written when MPI is missing
    assert model is not None  # measuring: the model of cfg
    rounds = Rounds(1, warmup, iterations, float(cfg.timeout_s))
    settings = Settings(rounds, int(cfg.stream), probe=False, seed=seed, keep=True)
    result = measure_one(net, model, mapping, out, settings, launcher)
    print(f"coefficients: {app.coefficients_origin(cfg, model.coefficients)}")
    print(summary(result))
    if not result.ok:
        raise DseError(f"the deployment in {out} failed: {result.reason}")
    print(f"measurements: {out / MEASUREMENTS}; beside the model's predictions: {out / COMPARISON}")
    return {"status": "ok", "out": str(out), "comparison": to_json(result)}


if __name__ == "__main__":
    run(main, "deploy")
