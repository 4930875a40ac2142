"""The analytical model's figures for random mappings of every network of the zoo, to compare
two builds of its kernel: ``python -m tests.helpers.kernel_figures OUT.npz --stock`` computes
them with the kernel compiled by numba's stock pipeline (``numba.core.compiler.Compiler``, in
the numba cache ``NUMBA_CACHE_DIR`` names, which must not be the one of the kernel compiled by
dse's pipeline: numba's cache does not tell pipelines apart) and writes them, with the
mappings, to ``OUT.npz``; :func:`cases` and :func:`figures` give the same in the calling
process, with the kernel as dse compiles it
(:class:`~models_analytical.schedule.pipeline.KernelCompiler`)."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import yaml

from chromosomes import AdvancedChromosome, NaiveChromosome, VerticalChromosome
from dse.mapping import Mappings
from dse.mapping.mappings import AXES
from dse.net import load_net
from dse.net.graph import LayerGraph
from dse.net.ops import family
from dse.net.zoo import NETS
from dse.paths import CONF_DIR
from dse.platform import load_platform
from models_analytical.coefficients import Coefficients, load_coefficients
from models_analytical.model import AnalyticalModel, Evaluation
from models_analytical.schedule import ScheduleResult

#: Shipped platforms: a switched network, a shared medium, 16 devices of two types on pairs.
PLATFORMS = ("edge3_ethernet", "edge3_wifi", "jetson_xavier_nx_x8")
#: Mappings in each random batch.
BATCH = 8
ROWS = AXES.index("rows")


def every_term(coefficients: Coefficients, graph: LayerGraph) -> Coefficients:
    """``coefficients`` with every optional term of the model on (sub-model costs, receiving
    on the device, the shared-host and split-work factors, fixed costs of parts and bands by
    ``graph``'s families, channel blocks, per-class and loading memory, held buffers, an empty
    rank's baseline) and a measured table for the network links: the kernel's branches that
    the shipped coefficients leave off."""
    families = {family(layer) for layer in graph}
    types = {
        name: dataclasses.replace(
            t,
            channel_block=4,
            transfer_fixed_s=3e-5,
            transfer_per_byte_s=2e-10,
            transfer_per_byte_same_host_s=1e-10,
            split_work_factor=1.15,
            shared_host_factor=1.3,
            part_fixed_channels={f: 1.5 for f in families},
            row_fixed={f: 0.02 for f in families},
            segment_run_s=4e-5,
            segment_in_per_byte_s=1e-10,
            segment_out_per_byte_s=3e-10,
            receive_on_device=i % 2 == 0,
            memory=dataclasses.replace(
                t.memory,
                weights={"conv": 1.1, "other": 1.05},
                loading={"conv": 2.2, "other": 2.0},
                per_segment_mb=1.5,
                held=0.9,
                empty_mb=30.0,
            ),
        )
        for i, (name, t) in enumerate(coefficients.types.items())
    }
    links = {"network": {"bytes": [1e3, 1e5, 1e7], "seconds": [2e-4, 1.1e-3, 9e-2]}}
    return dataclasses.replace(coefficients, types=types, links=links)


def models(net: str) -> Iterator[tuple[str, AnalyticalModel]]:
    """The model of ``net`` on each platform of :data:`PLATFORMS` with its shipped
    coefficients, and on the first with :func:`every_term` of them; labelled."""
    graph = load_net({"name": net}).graph
    for name in PLATFORMS:
        cfg = yaml.safe_load((CONF_DIR / "platform" / f"{name}.yaml").read_text())
        platform = load_platform(cfg)
        coefficients = load_coefficients(CONF_DIR / "platform" / cfg["coefficients"])
        yield name, AnalyticalModel(graph, platform, coefficients, 1)
        if name == PLATFORMS[0]:
            terms = every_term(coefficients, graph)
            yield f"{name}+terms", AnalyticalModel(graph, platform, terms, 1)


def batches(model: AnalyticalModel, seed: int) -> Iterator[tuple[str, Mappings]]:
    """Random batches of mappings of every encoding: split points (parts sized equally, and
    to the devices' speeds), split points with layers split by rows (spatial), naive (any
    devices per layer), vertical (no split layer); labelled."""
    g, n = model.graph, len(model.platform)
    rng = np.random.default_rng(seed)
    for label, chrom in (
        ("advanced", AdvancedChromosome(g, n)),
        ("advanced-speed", AdvancedChromosome(g, n, speed=model.device_speed())),
        ("spatial", AdvancedChromosome(g, n, spatial=True)),
        ("spatial-speed", AdvancedChromosome(g, n, speed=model.device_speed(), spatial=True)),
        ("naive", NaiveChromosome(g, n)),
        ("vertical", VerticalChromosome(g, n)),
    ):
        yield label, chrom.decode(chrom.sample(BATCH, rng))


def cases() -> Iterator[tuple[str, AnalyticalModel, Mappings]]:
    """(label, model, batch) for every network, platform and batch, in one fixed order."""
    for i, net in enumerate(NETS):
        for platform, model in models(net):
            for label, batch in batches(model, seed=i):
                yield f"{net}/{platform}/{label}", model, batch


def figures(model: AnalyticalModel, batch: Mappings) -> dict[str, np.ndarray]:
    """Every figure the model gives ``batch``: each field of its :class:`Evaluation` and its
    feasibility, each field of the kernel's :class:`ScheduleResult` (the weights by class
    computed), and each device's memory while running and while loading."""
    ev = model.evaluate(batch)
    out = {f.name: getattr(ev, f.name) for f in dataclasses.fields(Evaluation)}
    out["feasible"] = ev.feasible
    result = model._simulate(batch, with_weights=True)
    out |= {f"kernel.{name}": getattr(result, name) for name in ScheduleResult._fields}
    out["running_mb"], out["loading_mb"] = model.memory_phases(batch)
    return out


def kernel_dispatchers() -> list:
    """The kernel's compiled functions (those :mod:`models_analytical.schedule.compiled`
    made), from its modules."""
    import numba

    import models_analytical.schedule as schedule

    prefix = schedule.__name__ + "."
    found = {}
    for name, module in list(sys.modules.items()):
        if name.startswith(prefix):
            for value in vars(module).values():
                if isinstance(value, numba.core.registry.CPUDispatcher):
                    found[id(value)] = value
    return [d for d in found.values() if d.py_func.__module__.startswith(prefix)]


def use_stock_pipeline() -> int:
    """Make every kernel function compile through numba's stock pipeline instead of dse's
    (none may have compiled yet); returns how many were switched."""
    from numba.core.compiler import Compiler

    from models_analytical.schedule.pipeline import KernelCompiler

    switched = 0
    for dispatcher in kernel_dispatchers():
        assert not dispatcher.overloads, f"{dispatcher.py_func.__name__} compiled already"
        assert dispatcher._compiler.pipeline_class is KernelCompiler
        dispatcher._compiler.pipeline_class = Compiler
        switched += 1
    return switched


def main(out: Path, stock: bool) -> None:
    """Every case's mappings and figures into ``out`` (``.npz``), with the pipeline that
    compiled the kernel, how many of its functions were switched to it, and how many batches
    split layers by rows; ``stock``: the kernel compiled by numba's stock pipeline."""
    switched = 0
    if stock:
        if not os.environ.get("NUMBA_CACHE_DIR"):
            sys.exit("set NUMBA_CACHE_DIR to a cache of its own: numba's cache would mix pipelines")
        switched = use_stock_pipeline()
    arrays: dict[str, np.ndarray] = {}
    rows = 0
    for label, model, batch in cases():
        arrays[f"{label}/mappings.device"] = batch.device
        arrays[f"{label}/mappings.sizes"] = batch.sizes
        arrays[f"{label}/mappings.axis"] = batch.axis
        rows += int((batch.axis == ROWS).any())
        for name, value in figures(model, batch).items():
            arrays[f"{label}/{name}"] = value
    from numba.core.compiler import Compiler

    from models_analytical.schedule.kernel import simulate_chunk

    pipeline = simulate_chunk._compiler.pipeline_class
    arrays["pipeline"] = np.array(f"{pipeline.__module__}.{pipeline.__qualname__}")
    arrays["switched"] = np.array(switched)
    arrays["batches_with_rows"] = np.array(rows)
    assert not stock or pipeline is Compiler
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(Path(sys.argv[1]), "--stock" in sys.argv[2:])
