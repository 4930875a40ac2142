"""A partitioned deployment checked against the whole model in onnxruntime, and read back."""

from __future__ import annotations

import numpy as np

from dse.mapping import Mappings
from dse.mapping import whole as whole_on
from dse.net import Net
from dse.runtime.compile.partition import partition
from dse.runtime.deployment.plan import Plan, input_arrays
from dse.runtime.deployment.validate import model_io, validate
from dse.runtime.launch.local import run_deployment
from dse.runtime.rank.sessions import session

#: The parts run the same operators on the same inputs with sliced weights, so only the
#: summation order inside onnxruntime's kernels may change (its blocking depends on the channel
#: count). A float32 dot product of K terms reordered differs by about sqrt(K) * 2^-23 of its
#: magnitude (K <= 25088 in the tests: ~2e-5); a few such layers in a row stay below 1e-4 of the
#: output's scale, so outputs must agree to max|a - b| <= RTOL * max|b|.
RTOL = 1e-4


def whole(net: Net, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The whole model's outputs in onnxruntime, by name: the reference a deployment meets."""
    sess = session(net.weighted_model())
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs), strict=True))


def assert_equal_outputs(net: Net, batch: Mappings, plat, ref=None) -> int:
    """The deployment's outputs equal the whole model's, and its plan keeps every rule the
    runtime checks (against its sub-models' own inputs and outputs); its segment count."""
    dep = partition(net, batch, plat)
    validate(dep.plan, {name: model_io(m) for name, m in dep.segments.items()})
    x = input_arrays(dep.plan, seed=0)
    ref = ref if ref is not None else whole(net, x)
    got = run_deployment(dep, x)
    assert set(got) == set(ref)
    for name, r in ref.items():
        assert got[name].shape == r.shape
        assert np.abs(got[name] - r).max() <= RTOL * np.abs(r).max(), name
    return len(dep.segments)


def with_sizes(graph, n_dev: int, device: int, sizes: dict, devices: dict) -> Mappings:
    """One mapping: every layer on ``device`` but the layers named in ``devices`` (name ->
    device) and the splittable ones named in ``sizes`` (name -> channels per device)."""
    on = np.array([devices.get(name, device) for name in graph.names])
    m = whole_on(graph, n_dev, on)
    for name, per_device in sizes.items():
        s = int(np.searchsorted(graph.split_layers, graph.index[name]))
        m.sizes[0, s] = per_device
    return m


def sent_by_device(plan: Plan, n_devices: int) -> np.ndarray:
    """Bytes each device sends in one inference, from the plan's send steps (float32)."""
    sent = np.zeros(n_devices)
    for r in plan.ranks:
        for s in r.steps:
            if s.op == "send":
                sent[r.device_index] += np.prod(plan.tensors[s.tensor].shape) * 4
    return sent


def steps_on(plan: Plan, device: int, op: str, tensor: str) -> list:
    """The steps of ``device``'s rank that do ``op`` on ``tensor``, in order."""
    rank = next(r for r in plan.ranks if r.device_index == device)
    return [s for s in rank.steps if s.op == op and getattr(s, "tensor", None) == tensor]
