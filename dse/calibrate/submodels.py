"""What running a network as sub-models costs beyond their layers, measured on one device.

The runtime runs each device's work as sub-models (one onnxruntime session each). A sub-model
costs more than its layers did inside the whole network: a session call, and at its edges the
tensors it takes in and gives out are converted and copied (onnxruntime keeps a whole network's
activations in its blocked layout; a sub-model converts at every input and output:
``docs/results/fidelity-history.md`` has what it came to).

For each cut mapping ``dse.calibrate`` deploys, each of its sub-models is timed alone on the
deployments' first device (:mod:`dse.calibrate.ondevice`: in this process on ``localhost``, as
a rank in the device's cgroups on an emulated cluster; :func:`dse.runtime.rank.inprocess.
time_files`), in rounds that also run the whole network once, so the device's speed against
the model's layer times is measured beside them. Per sub-model (:func:`rows`)::

    alone = speed x compute + run + in x bytes in + out x bytes out + (split - 1) x speed x split

``compute`` is the model's time of its layers (their parts, by channel blocks), ``split`` that
of the parts of split layers, ``speed`` the whole network alone over the model's whole compute.
:func:`~models_analytical.calibration.fit_submodel_costs` finds the non-negative ``run`` (s),
``in`` and ``out`` (s/B) and ``split`` (>= 1) over every sub-model of every network
(:func:`measure_submodels`), in seconds (a large sub-model weighs more).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypedDict

import numpy as np
import onnx

from dse.calibrate.deployments import CUTS, Deployed, cut_devices
from dse.calibrate.journal import Journal, NoJournal
from dse.calibrate.ondevice import Unit, unit_runner
from dse.calibrate.settings import CalibrationSettings, net_of
from dse.mapping import Mappings
from dse.mapping.rows import layout_of
from dse.net import Net
from dse.platform import Platform
from dse.runtime.compile.partition import Deployment, partition
from dse.runtime.compile.programs import part_rows
from dse.runtime.deployment.plan import Run
from models_analytical.calibration import SubModelCosts, SubModelTiming, fit_submodel_costs
from models_analytical.coefficients import Coefficients
from models_analytical.model import AnalyticalModel
from models_analytical.schedule import band_share, part_share


def _bytes(values: list[onnx.ValueInfoProto]) -> int:
    """Bytes of the tensors ``values`` describe (a symbolic dimension taken as 1)."""
    total = 0
    for v in values:
        t = v.type.tensor_type
        size = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
        total += size * int(np.prod([d.dim_value or 1 for d in t.shape.dim]))
    return total


class Features(TypedDict):
    """What :func:`features` gives of one sub-model (the fields of ``SubModelTiming``)."""

    device: int
    compute_s: float
    split_s: float
    in_bytes: float
    out_bytes: float


def features(
    deployment: Deployment, mapping: Mappings, model: AnalyticalModel, as_type: int | None = None
) -> dict[str, Features]:
    """Per sub-model of ``deployment`` (mapping 0 of ``mapping``): its device, the model's
    compute of its layers (``compute_s``, split factor 1; of the device type in row
    ``as_type`` of the model's tables, default its device's own) and of its split parts
    (``split_s``), and the bytes it takes in and gives out."""
    graph = model.graph
    share = mapping.dense(graph)[0][0]
    root, lo, hi, _ = layout_of(graph, mapping.sizes[0], mapping.axis[0])
    row = part_rows(graph, share, root)
    n_here = (share[row] > 0).sum(axis=1)  # devices each layer's parts run on
    on_bands = root >= 0  # a layer on bands: its band's fraction of the rows, its whole weights
    bands = (hi - lo) / np.maximum(graph.out_rows, 1)[:, None]
    n_here[on_bands] = (hi > lo)[on_bands].sum(axis=1)
    share = np.where(on_bands[:, None], bands, share[row])
    row = np.arange(len(graph))
    k_in = model.inputs
    out: dict[str, Features] = {}
    for rank in deployment.plan.ranks:
        d = rank.device_index
        k = int(k_in.device_type[d]) if as_type is None else as_type
        for step in rank.steps:
            if not isinstance(step, Run):
                continue
            compute = split = 0.0
            for layer in step.layers:
                s = float(share[row[layer], d])
                if on_bands[layer]:
                    part = band_share(k_in, k, layer, s, int(n_here[layer]))
                else:
                    part = part_share(k_in, k, layer, s, int(n_here[layer]))
                if n_here[layer] > 1 and not on_bands[layer]:
                    part /= k_in.split_work_factor[k]  # its whole channel blocks and fixed share
                t = part * k_in.t_work[k, layer] + k_in.t_fixed[k, layer]
                compute += t
                split += t if n_here[layer] > 1 else 0.0
            sub = deployment.segments[step.segment].graph
            out[step.segment] = {
                "device": d,
                "compute_s": compute,
                "split_s": split,
                "in_bytes": float(_bytes([v for v in sub.input if v.name in step.inputs])),
                "out_bytes": float(_bytes(list(sub.output))),
            }
    return out


def rows(
    net: Net,
    model: AnalyticalModel,
    platform: Platform,
    mappings: Mappings,
    directories: Sequence[Path],
    run: Callable[[Unit], Unit],
    runs: int,
    threads: int = 1,
    seed: int = 0,
    as_type: int = 0,
) -> tuple[list[SubModelTiming], float]:
    """Every sub-model of each of ``mappings`` (of a zoo network, on cpu devices; deployed in
    ``directories``), timed alone at ``threads`` (``runs`` rounds, one warm-up, each round
    also running the whole network once) by ``run`` (in this process or on a device,
    :mod:`dse.calibrate.ondevice`): :func:`features` and ``alone_s`` (median seconds),
    ``speed`` (the whole network's median against the model's whole compute), the network and
    the mapping's index; and the whole network's median over the mappings (s). Every
    sub-model runs in one place: its model compute is that of the device type in row
    ``as_type`` of the model's tables, whatever device the mapping gives it."""
    layers = model.tables.t_work[as_type] + model.tables.t_fixed[as_type]  # the whole network
    out = []
    wholes = []
    for p, directory in enumerate(directories):
        dep = partition(net, mappings.take(p), platform, seed=seed)  # as deployed: its features
        request = {"step": "submodels", "directory": str(directory), "runs": runs,
                   "warmup": 1, "threads": threads, "net": net.name,
                   "mapping": mappings.ident(p), "seed": seed}  # fmt: skip
        timed = run(request)
        wholes.append(timed["whole_s"])
        speed = timed["whole_s"] / float(layers.sum())
        for name, f in features(dep, mappings.take(p), model, as_type).items():
            alone = timed["segments"][name]
            out.append(SubModelTiming(net=net.name, mapping=p, alone_s=alone, speed=speed, **f))
    return out, float(np.median(wholes))


def measure_submodels(
    s: CalibrationSettings,
    runs: Sequence[Deployed],
    coefficients: Coefficients,
    tick: Callable[[str], None],
    journal: Journal | None = None,
) -> tuple[SubModelCosts, dict[str, float]]:
    """Each network's cut mappings (:data:`~dse.calibrate.deployments.CUTS`) as sub-models
    timed alone on the deployments' first device (in this process where its type is profiled
    here), beside the model of ``coefficients`` (every sub-model as that device's type), at
    its thread count; the sub-model costs fitted on them, and each network's whole run timed
    beside them (s); ``tick`` after each network."""
    a, _ = cut_devices(s.platform)
    as_type = coefficients.index(s.platform.devices[a].type)
    run, _ = unit_runner(s.platform, a, s.launcher)
    run = (journal or NoJournal()).unit(f"sub-models on {s.platform.devices[a].name}", run)
    samples: list[SubModelTiming] = []
    whole_s: dict[str, float] = {}
    for name in dict.fromkeys(r.net for r in runs):
        cut = [r for r in runs if r.net == name and r.label in CUTS]
        got, whole_s[name] = rows(
            net_of(s, name),
            AnalyticalModel(cut[0].graph, s.platform, coefficients),
            s.platform,
            Mappings.concat([r.mapping for r in cut]),
            [r.directory for r in cut],
            run,
            runs=s.submodel_runs,
            threads=s.platform.devices[a].threads,
            seed=s.seed,
            as_type=as_type,
        )
        samples += got
        tick(f"sub-models of {name}")
    return fit_submodel_costs(samples), whole_s
