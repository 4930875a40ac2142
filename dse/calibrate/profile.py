"""Per-layer compute times of a whole network from onnxruntime's profiler, mapped back to layers.

onnxruntime reports the kernels it runs, not the ONNX nodes: Conv+BatchNorm+Add+Relu become one
fused node named after one of them (``relu1_nchwc``, ``fused fc6``, ``layer1.0.bn3_nchwc``,
``norm1_bn_nchwc``), and layout conversions (``ReorderInput``/``ReorderOutput``) appear between
them. Mapping, in three steps:

1. a kernel's name, with ``fused `` and the suffixes ``_token_N``, ``_nchwc``, ``_bn`` taken off
   until it names a layer (or its output tensor), is that layer; a layout conversion belongs to
   the kernel on its plain (NCHW) side, the layer that cannot run in onnxruntime's blocked
   layout and so makes the conversion necessary: the kernel run before a ``ReorderInput``,
   the one run after a ``ReorderOutput`` (an Add of a scalar after a Conv pays for taking the
   Conv's output out of the blocked layout; a Conv after Conv costs the same in every network);
2. a layer that got no kernel was fused into a neighbour: an activation-like op (BatchNorm, Relu,
   Add, ...) into the layer producing its input, anything else into the layer consuming its
   output; the layers merged this way form a group;
3. a group's time is shared among its layers in proportion to a prior (``prior_s``, by default
   the uncalibrated model's estimate), so a Conv keeps nearly all of a Conv+Relu kernel.

Layers onnxruntime removed (Identity, Dropout) and that no group takes cost nothing.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from dse.files import scratch
from dse.net import ops
from dse.net.graph import LayerGraph
from dse.runtime.rank.pace import paced
from dse.runtime.rank.sessions import session_options

_SUFFIXES = (
    re.compile(r"_token_\d+$"),
    re.compile(r"/[A-Za-z]+Fusion/?$"),  # a fusion's node: Mul/QuickGeluFusion/, Slice_1/...
    re.compile(r"_nchwc$"),
    re.compile(r"_bn$"),
)


def layer_for_kernel(
    name: str, index: Mapping[str, int], producer: Mapping[str, int] | None = None
) -> int | None:
    """The layer a kernel name refers to, by the layer's name or (``producer``: tensor name to
    layer) the name of its output (onnxruntime names a layout-converted node after its output:
    ``/model.0/conv/Conv_output_0_nchwc``), or None (layout conversions, unknown kernels)."""
    n = name[len("fused ") :] if name.startswith("fused ") else name
    for pattern in (None, *_SUFFIXES):
        n = pattern.sub("", n) if pattern is not None else n
        if n in index:
            return index[n]
        if producer is not None and n in producer:
            return producer[n]
    return None


@dataclass(frozen=True)
class Profile:
    """Per-layer times (s, median over runs, or mean: :func:`profile_model`) of one network on
    one thread count."""

    net: str
    threads: int
    layer_s: np.ndarray  # [L] median (or mean) per layer
    spread: np.ndarray  # [L] (p90 - p10) / layer_s per layer, 0 where the layer costs nothing
    whole_s: np.ndarray  # [runs] wall time of each run of the model without the profiler
    kernels: int  # kernels reported per run
    kernel_s: float  # the kernels' total time in the first profiled run
    unmapped: tuple[str, ...]  # kernel names attached to a neighbour (layout conversions)


def kernel_runs(events: list[dict]) -> list[list[tuple[str, str, float]]]:
    """Per ``model_run``: its kernels in order as (name, op, seconds)."""
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    nodes = sorted(
        (
            e
            for e in events
            if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")
        ),
        key=lambda e: e["ts"],
    )
    out: list[list[tuple[str, str, float]]] = [[] for _ in runs]
    r = 0
    for e in nodes:
        while r < len(runs) and e["ts"] > runs[r]["ts"] + runs[r]["dur"]:
            r += 1
        if r == len(runs):
            break
        name = e["name"][: -len("_kernel_time")]
        out[r].append((name, e.get("args", {}).get("op_name", ""), e["dur"] * 1e-6))
    return out


def attribute(
    kernels: list[tuple[str, str, float]], graph: LayerGraph
) -> tuple[np.ndarray, list[str]]:
    """Step 1: seconds per layer from one run's kernels, and the names attached to neighbours."""
    index = graph.index
    t = np.zeros(len(graph))
    owners = [layer_for_kernel(name, index, graph.producer) for name, _, _ in kernels]
    unmapped = []
    for i, (name, op, sec) in enumerate(kernels):
        own = owners[i]
        if own is None:
            unmapped.append(name)
            step = -1 if op == "ReorderInput" else 1
            j = i + step
            while 0 <= j < len(kernels) and owners[j] is None:
                j += step
            if not 0 <= j < len(kernels):  # nothing on that side: the other side
                j = i - step
                while 0 <= j < len(kernels) and owners[j] is None:
                    j -= step
            if not 0 <= j < len(kernels):
                continue
            own = owners[j]
        t[own] += sec
    return t, unmapped


def fusion_groups(graph: LayerGraph, timed: np.ndarray) -> np.ndarray:
    """Step 2: the anchor (a timed layer) of every layer; -1 where none is reachable. A
    follower walks back through untimed followers; where that ends on an untimed layer (a Conv
    fused forward), or for any other untimed layer, the walk goes forward through consumers."""
    consumers: list[list[int]] = [[] for _ in graph]
    for s, d in zip(graph.edge_src, graph.edge_dst, strict=True):
        if s >= 0:
            consumers[s].append(int(d))

    def producer(j: int) -> int | None:
        back = [graph.producer[x.name] for x in graph.layers[j].inputs if x.name in graph.producer]
        return back[0] if back else None

    def forward(j: int) -> int:
        for _ in range(64):
            if timed[j]:
                return j
            if not consumers[j]:
                return -1
            j = consumers[j][0]
        return -1

    anchor = np.full(len(graph), -1, dtype=np.int64)
    for i in range(len(graph)):
        j = i
        for _ in range(64):
            if timed[j] or not ops.fused(graph.layers[j].op):
                break
            b = producer(j)
            if b is None:
                break
            j = b
        anchor[i] = j if timed[j] else forward(j)
    return anchor


def share_groups(t: np.ndarray, anchor: np.ndarray, prior_s: np.ndarray) -> np.ndarray:
    """Step 3: each anchor's time spread over its group in proportion to ``prior_s``."""
    out = np.zeros_like(t)
    members = anchor >= 0
    weight = np.where(members, np.maximum(prior_s, 1e-9), 0.0)
    total = np.zeros_like(t)
    np.add.at(total, anchor[members], weight[members])
    out[members] = t[anchor[members]] * weight[members] / total[anchor[members]]
    return out


def profile_model(
    model_path: Path | str,
    graph: LayerGraph,
    prior_s: np.ndarray,
    threads: int = 1,
    *,
    warmup: int,
    runs: int,
    seed: int = 0,
    by_mean: bool = False,
) -> Profile:
    """Run the whole model ``warmup + runs`` times under the profiler, then as many times
    without it, in one session with the runtime's settings (one copy of the weights: AlexNet
    whole fits a 512 MB device once, not twice), and return its per-layer times."""
    opts = session_options("cpu", threads)
    with scratch("profile-") as tmp:
        opts.enable_profiling = True
        opts.profile_file_prefix = str(Path(tmp) / "p")
        sess = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(seed)
        feeds = {
            i.name: rng.random([d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
            for i in sess.get_inputs()
        }
        for _ in range(warmup + runs):
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
        # the profiler slows small kernels down: the whole run's time comes from runs after it
        # stopped (end_profiling ends its collection)
        wall, timed = [], paced(sess)  # as a rank runs it on an emulated device
        for k in range(warmup + runs):
            t0 = time.perf_counter()
            timed.run(None, feeds)
            if k >= warmup:
                wall.append(time.perf_counter() - t0)
    per_run = kernel_runs(events)[warmup:]
    anchor = None
    rows, unmapped = [], []
    for kernels in per_run:
        t, um = attribute(kernels, graph)
        if anchor is None:
            anchor = fusion_groups(graph, t > 0)
            unmapped = um
        rows.append(share_groups(t, anchor, prior_s))
    a = np.array(rows)
    # by_mean, where the device is a CPU share of a core that its neighbours share by time
    # slices: a kernel shorter than a slice runs whole at full speed in most runs and waits
    # out a neighbour's slice in a few, so the median of its runs is near its full-speed time
    # and the mean is its time at the share
    med = a.mean(axis=0) if by_mean else np.median(a, axis=0)
    spread = np.where(
        med > 0,
        (np.percentile(a, 90, axis=0) - np.percentile(a, 10, axis=0)) / np.where(med > 0, med, 1),
        0.0,
    )
    return Profile(
        graph.name,
        threads,
        med,
        spread,
        np.array(wall),
        len(per_run[0]) if per_run else 0,
        sum(k[2] for k in per_run[0]) if per_run else 0.0,
        tuple(sorted(set(unmapped))),
    )
