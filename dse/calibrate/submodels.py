"""What running a network as sub-models costs beyond their layers, measured in one process.

The runtime runs each device's work as sub-models (one onnxruntime session each). A sub-model
costs more than its layers did inside the whole network: a session call, and at its edges the
tensors it takes in and gives out are converted and copied (onnxruntime keeps a whole network's
activations in its blocked layout; a sub-model converts at every input and output). Measured
here, on ResNet-50's split mappings, its sub-models alone took 14 % longer than their layers.

For each cut mapping ``dse.calibrate`` deploys, the partitioner writes the sub-models and each
is timed alone in this process (:func:`dse.runtime.sequential.time_segments_beside`), in
rounds that also run the whole network once, so the process's speed against the model's layer
times is measured beside them. Per sub-model (:func:`rows`)::

    alone = speed x compute + run + in x bytes in + out x bytes out + (split - 1) x speed x split

``compute`` is the model's time of its layers (their parts, by channel blocks), ``split`` that
of the parts of split layers, ``speed`` the whole network alone over the model's whole compute.
:func:`~models_analytical.calibration.fit_submodel_costs` finds the non-negative ``run`` (s),
``in`` and ``out`` (s/B) and ``split`` (>= 1) over every sub-model of every network
(:func:`measure_submodels`), in seconds (a large sub-model weighs more).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx

from dse.calibrate.deployments import CUTS, Deployed, cut_devices
from dse.calibrate.settings import CalibrationSettings
from dse.mapping import Mappings
from dse.net import Net, load_net, zoo
from dse.platform import Platform
from dse.runtime.partition import Deployment, partition
from dse.runtime.plan import Run
from dse.runtime.programs import part_rows
from dse.runtime.sequential import time_segments_beside
from dse.runtime.sessions import session
from models_analytical.calibration import SubModelCosts, SubModelTiming, fit_submodel_costs
from models_analytical.coefficients import Coefficients
from models_analytical.model import AnalyticalModel
from models_analytical.schedule import part_share


def _bytes(values: list[onnx.ValueInfoProto]) -> int:
    """Bytes of the tensors ``values`` describe (a symbolic dimension taken as 1)."""
    total = 0
    for v in values:
        t = v.type.tensor_type
        size = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
        total += size * int(np.prod([d.dim_value or 1 for d in t.shape.dim]))
    return total


def features(
    deployment: Deployment, mapping: Mappings, model: AnalyticalModel
) -> dict[str, dict[str, float]]:
    """Per sub-model of ``deployment`` (mapping 0 of ``mapping``): its device, the model's
    compute of its layers (``compute_s``, split factor 1) and of its split parts (``split_s``),
    and the bytes it takes in and gives out."""
    graph = model.graph
    share = mapping.dense(graph)[0][0]
    row = part_rows(graph, share)
    n_here = (share[row] > 0).sum(axis=1)  # devices each layer's parts run on
    k_in = model.inputs
    out: dict[str, dict[str, float]] = {}
    for rank in deployment.plan.ranks:
        d = rank.device_index
        k = int(k_in.device_type[d])
        for step in rank.steps:
            if not isinstance(step, Run):
                continue
            compute = split = 0.0
            for layer in step.layers:
                s = float(share[row[layer], d])
                part = part_share(k_in, k, layer, s, int(n_here[layer]))
                if n_here[layer] > 1:
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
    runs: int,
    threads: int = 1,
    seed: int = 0,
) -> list[SubModelTiming]:
    """Every sub-model of each of ``mappings`` (of a zoo network, on cpu devices), timed alone
    at ``threads`` (``runs`` rounds, one warm-up, each round also running the whole network
    once): :func:`features` and ``alone_s`` (median seconds), ``speed`` (the whole network's
    median against the model's whole compute), the network and the mapping's index."""
    whole = session(zoo.materialize(net.name, seed), "cpu", threads)
    layers = model.tables.t_work[0] + model.tables.t_fixed[0]  # the whole network on a cpu
    out = []
    for p in range(len(mappings)):
        dep = partition(net, mappings.take(p), platform, seed=seed)
        timed, whole_s = time_segments_beside(dep, whole, runs, warmup=1, threads=threads)
        speed = whole_s / float(layers.sum())
        for name, f in features(dep, mappings.take(p), model).items():
            out.append(
                SubModelTiming(net=net.name, mapping=p, alone_s=timed[name][1], speed=speed, **f)
            )
    return out


def measure_submodels(
    s: CalibrationSettings,
    runs: Sequence[Deployed],
    coefficients: Coefficients,
    tick: Callable[[str], None],
) -> SubModelCosts:
    """Each network's cut mappings (:data:`~dse.calibrate.deployments.CUTS`) as sub-models
    timed alone, beside the model of ``coefficients``, at the thread count of the deployments'
    first device; the sub-model costs fitted on them; ``tick`` after each network."""
    a, _ = cut_devices(s.platform)
    samples: list[SubModelTiming] = []
    for name in dict.fromkeys(r.net for r in runs):
        cut = [r for r in runs if r.net == name and r.label in CUTS]
        samples += rows(
            load_net({"name": name}),
            AnalyticalModel(cut[0].graph, s.platform, coefficients),
            s.platform,
            Mappings.concat([r.mapping for r in cut]),
            runs=s.submodel_runs,
            threads=s.platform.devices[a].threads,
            seed=s.seed,
        )
        tick(f"sub-models of {name}")
    return fit_submodel_costs(samples)
