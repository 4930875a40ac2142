"""`python -m dse.inspect +net=NAME`: print a network's layer table and totals."""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports: a signal now ends the process cleanly
    from dse.cli import stop_early_on_signals

    stop_early_on_signals()

import json

import hydra
from omegaconf import DictConfig

from dse.cli import guarded, output_format, run
from dse.net import load_net
from dse.net.graph import LayerGraph
from dse.paths import CONF_DIR


def layer_rows(graph: LayerGraph) -> list[dict]:
    follows = graph.follows.tolist()
    return [
        {
            "name": layer.name,
            "op": layer.op,
            "output_shape": list(layer.output_shape),
            "macs": layer.macs,
            "params": layer.params,
            "splittable": layer.splittable,
            # ... by its output rows too (a convolution; chromosome.spatial=true)
            "row_splittable": bool(graph.row_splittable[layer.index]),
            # runs on the parts of this layer when that one is split (channel-local)
            "follows": graph.names[follows[layer.index]] if follows[layer.index] >= 0 else None,
            # ... and on its bands when that one is split by rows (row-local too)
            "on_bands": bool(graph.row_chain[layer.index] and follows[layer.index] >= 0),
            # ... or, not split itself, on the bands of its inputs when all are on bands
            "row_join": bool(graph.row_join[layer.index]),
            "estimated": layer.estimated,
            "out_channels": layer.out_channels,
            "weight_bytes": layer.weight_bytes,
            "output_bytes": layer.output_bytes,
        }
        for layer in graph
    ]


def as_json(graph: LayerGraph) -> str:
    estimated = sorted({layer.op for layer in graph if layer.estimated})
    return json.dumps(
        {
            "net": graph.name,
            "layers": layer_rows(graph),
            "totals": graph.totals(),
            "estimated_ops": estimated,
        },
        indent=1,
    )


def as_table(graph: LayerGraph) -> str:
    head = ("#", "name", "op", "output shape", "MACs", "params", "split", "rows", "est.")
    rows = [
        (
            str(i),
            r["name"],
            r["op"],
            "x".join(map(str, r["output_shape"])),
            f"{r['macs']:,}",
            f"{r['params']:,}",
            "yes" if r["splittable"] else ("parts" if r["follows"] else ""),
            "yes"
            if r["row_splittable"]
            else ("bands" if r["on_bands"] else ("join" if r["row_join"] else "")),
            "est." if r["estimated"] else "",
        )
        for i, r in enumerate(layer_rows(graph))
    ]
    widths = [max(len(c) for c in col) for col in zip(head, *rows, strict=True)]
    right = {0, 4, 5}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    t = graph.totals()
    out = [line(head), line(tuple("-" * w for w in widths)), *map(line, rows)]
    out.append("")
    out.append(
        f"{graph.name}: {t['layers']} layers, {t['macs']:,} MACs "
        f"({t['macs'] / 1e9:.3f} G), {t['params']:,} params "
        f"({t['params'] / 1e6:.2f} M), weights {t['weight_bytes'] / 1e6:.1f} MB, "
        f"{int(graph.splittable.sum())} splittable ({int(graph.row_splittable.sum())} by rows "
        f"too), {int((graph.follows >= 0).sum())} run on the parts of the split layer before "
        "them"
    )
    estimated = sorted({layer.op for layer in graph if layer.estimated})
    if estimated:
        out.append(
            f"MACs estimated from output size for ops without a rule: {', '.join(estimated)}"
        )
    return "\n".join(out)


@hydra.main(config_path=str(CONF_DIR), config_name="inspect", version_base="1.3")
@guarded
def main(cfg: DictConfig) -> None:
    fmt = output_format(cfg)
    graph = load_net(cfg.get("net")).graph
    print(as_json(graph) if fmt == "json" else as_table(graph))


if __name__ == "__main__":
    run(main, "inspect")
