"""The first run's compilation split across two processes (models_analytical.ahead,
dse.search.rehearsal): the kernel the child compiles is the one every network and platform
uses, the rehearsal leaves nothing for the search to compile, and it changes no result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.helpers.cli import ROOT

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np, yaml
    from numba.core import event

    from chromosomes import make_chromosome
    from dse.config import AlgorithmConfig
    from dse.mapping import from_devices
    from dse.net import load_net
    from dse.paths import CONF_DIR
    from dse.platform import load_platform
    from dse.search import nsga2
    from dse.search.problem import MappingProblem
    from dse.search.rehearsal import rehearse
    from models_analytical import ahead
    from models_analytical.coefficients import load_coefficients
    from models_analytical.model import AnalyticalModel

    compiled = []

    class Compiles(event.Listener):
        def on_start(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__qualname__)

        def on_end(self, ev):
            pass

    event.register("numba:compile", Compiles())

    def model(net, platform):
        cfg = yaml.safe_load((CONF_DIR / "platform" / f"{platform}.yaml").read_text())
        plat = load_platform(cfg)
        coeff = load_coefficients(CONF_DIR / "platform" / cfg["coefficients"])
        return AnalyticalModel(load_net({"name": net}).graph, plat, coeff, 1)

    def search(m):
        problem = MappingProblem(
            make_chromosome("advanced", m.graph, len(m.platform)), m, ["latency", "memory"]
        )
        return problem, nsga2.run(nsga2.new_search(problem, SETTINGS, 3))

    SETTINGS = AlgorithmConfig(pop_size=20, n_gen=3)
    out = {"started": ahead.start()}
    vgg = model("vgg16", "jetson_xavier_nx_x8")
    problem = MappingProblem(
        make_chromosome("advanced", vgg.graph, len(vgg.platform)), vgg, ["latency", "memory"]
    )
    rehearse(problem, SETTINGS)
    out["rehearsal"] = sorted(set(compiled))
    ahead.wait()
    compiled.clear()
    state = nsga2.run(nsga2.new_search(problem, SETTINGS, 3))
    # other networks and platforms, split layers among them
    for net, platform in (("resnet50", "edge3_ethernet"), ("mobilenetv2", "localhost")):
        m = model(net, platform)
        on = np.zeros((2, len(m.graph), len(m.platform)), dtype=bool)
        on[:, :, 0] = True
        on[1, m.graph.split_layers, :] = True
        m.evaluate(from_devices(m.graph, on))
    out["after"] = sorted(set(compiled))
    out["started_again"] = ahead.start()
    fresh = model("vgg16", "jetson_xavier_nx_x8")
    _, again = search(fresh)
    out["same_front"] = bool(
        np.array_equal(state.pop.X, again.pop.X) and np.array_equal(state.pop.F, again.pop.F)
    )
    print(json.dumps(out))
    """
)


def test_the_kernel_compiled_ahead_serves_every_network_and_platform(tmp_path):
    """In an empty numba cache: the child starts and compiles the kernel while the rehearsal
    compiles the search's kernels without the model; after both, a search of VGG-16 on the
    thesis's 16 devices and evaluations of ResNet-50 on edge3_ethernet and MobileNetV2 on
    localhost (split layers among them, by channels: the kernel for row splits is
    another, compiled where it is first used) compile nothing, and no second child starts; the
    search's population after the rehearsal is the one of a search without it."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["started"] is True
    assert "simulate_chunk" not in out["rehearsal"]
    assert {"_crowding", "hash_mappings", "advanced_counts"} <= set(out["rehearsal"])
    assert out["after"] == []
    assert out["started_again"] is False
    assert out["same_front"] is True


def test_a_failed_child_is_named_and_left_to_the_parent(monkeypatch, caplog):
    """wait() on a child that failed logs its exit status and last line (the parent then
    compiles the kernel itself), and leaves nothing to wait for."""
    import tempfile

    from models_analytical import ahead

    err = tempfile.TemporaryFile()  # noqa: SIM115 - wait() closes it, as it closes the child's
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stderr.write('one\\nboom\\n'); sys.exit(3)"],
        stderr=err,
    )
    monkeypatch.setattr(ahead, "_CHILD", (child, err))
    with caplog.at_level("WARNING", logger="dse"):
        ahead.wait()
    assert [r.getMessage() for r in caplog.records] == [
        "compiling the model's kernel in a child process failed (exit 3: boom); compiling it here"
    ]
    assert not ahead.compiling() and err.closed
    ahead.wait()  # nothing left: returns at once
