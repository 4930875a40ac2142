"""`python -m dse.deploy +net=NET mapping=M platform=P [out=DIR] [measure=true]`: phase two."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from dse import app
from dse.cli import guarded, run
from dse.errors import DseError
from dse.files import read_json
from dse.mapping import Mappings, from_autodice
from dse.net import Net, load_net
from dse.paths import CONF_DIR
from dse.runtime.comparison import COMPARISON, Compared
from dse.runtime.measure import deploy, deploy_and_measure
from dse.runtime.measurements import MEASUREMENTS
from dse.values import number

#: Where a deployment goes without out=: under runs/, named by net and mapping.
DEFAULT_OUT = "runs/deploy/{net}-{mapping}"


def summary(result: Compared) -> str:
    """A few lines: status, latency measured vs predicted, per device."""
    if result.get("status") != "ok":
        return f"measurement failed: {result.get('reason')}"
    lat = result["latency_ms"]
    cmp = result.get("comparison") or {}
    pred = cmp.get("latency_ms", {}).get("predicted")
    lines = [
        f"latency {lat['median']:.2f} ms median (p10 {lat['p10']:.2f}, p90 {lat['p90']:.2f}) "
        + (f"| predicted {pred:.2f} ms ({cmp['latency_ms']['error_pct']:+.1f} %)" if pred else ""),
        f"outputs vs the whole model: max rel error {result['equivalence'].get('max_rel_error')}",
    ]
    if "period_ms" in cmp:
        p = cmp["period_ms"]
        lines.append(
            f"stream period {p['measured']:.2f} ms | predicted {p['predicted']:.2f} ms "
            f"({p['error_pct']:+.1f} %)"
        )
    for r in result["ranks"]:
        lines.append(
            f"  {r['device']}: compute {r['compute_ms']['median']:.2f} ms, wait "
            f"{r['wait_ms']['median']:.2f} ms, communication {r['communication_ms']['median']:.2f}"
            f" ms, CPU {_cpu(r)}, sent {r['bytes_sent']:,} B, peak RSS "
            f"{r['peak_rss_loading_mb']} MB loading / "
            f"{r['peak_rss_running_mb']} MB running"
            + (f" / {r['peak_rss_stream_mb']} MB streaming" if r.get("peak_rss_stream_mb") else "")
        )
    return "\n".join(lines)


def _cpu(rank: dict) -> str:
    """A rank's CPU time per iteration (older measurements have none)."""
    cpu = rank.get("cpu_ms")
    return f"{cpu['median']:.2f} ms" if cpu else "not measured"


def read_mapping(cfg: DictConfig, net: Net, keys: list[str]) -> Mappings:
    """The AutoDiCE mapping (and horizontal) files of ``cfg`` as a mapping of ``net``."""
    mapping = read_json(cfg.mapping, "mapping")
    horizontal = read_json(cfg.horizontal, "horizontal") if cfg.get("horizontal") else None
    if not isinstance(mapping, dict):
        raise DseError('mapping.json must be an object {"<host>_<resource>": [node names]}')
    return from_autodice(net.graph, keys, mapping, horizontal)


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
    mapping = read_mapping(cfg, net, platform.keys)
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
    result = deploy_and_measure(
        net, platform, model, mapping, out, seed, warmup, iterations, float(cfg.timeout_s),
        int(cfg.stream), launcher,
    )  # fmt: skip
    print(summary(result))
    if result.get("status") != "ok":
        raise DseError(f"the deployment in {out} failed: {result.get('reason')}")
    print(f"measurements: {out / MEASUREMENTS}; beside the model's predictions: {out / COMPARISON}")
    return {"status": "ok", "out": str(out), "comparison": result}


if __name__ == "__main__":
    run(main, "deploy")
