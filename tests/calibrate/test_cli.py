"""`python -m dse.calibrate` end to end (quick), and its settings."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hydra import compose, initialize_config_dir

from dse.calibrate.settings import QUICK, settings_from
from dse.config import CalibrateConfig, register
from dse.errors import DseError
from dse.net import load_net
from dse.paths import CONF_DIR, calibrated_path
from models_analytical.coefficients import load_coefficients
from models_analytical.model import AnalyticalModel
from tests.helpers.calibrate import platform_localhost
from tests.helpers.cli import ROOT, processes_naming, run_module, wait_until


@pytest.mark.slow
def test_quick_calibration_writes_a_file_later_commands_use(tmp_path) -> None:
    """quick=true (one net, few repeats, no MPI deployments) writes a valid calibrated file,
    and dse.evaluate with the same platform then uses it: its single-device prediction is the
    profiled whole-run time."""
    env_dir = tmp_path / "calibration"
    out = run_module(
        "dse.calibrate",
        "platform=localhost",
        "quick=true",
        "deployments=false",
        env={"DSE_CALIBRATION_DIR": str(env_dir)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    path = env_dir / "localhost.json"
    c = load_coefficients(path)
    assert c.calibrated and c.links["same_host"]["seconds"]
    doc = json.loads(path.read_text())
    whole_ms = doc["provenance"]["types"]["cpu"]["profiled_networks"]["alexnet"]["whole_ms"]
    net = load_net({"name": "alexnet"})
    m = AnalyticalModel(net.graph, platform_localhost(), c)
    assert m.tables.source[0].min() == 1  # every layer profiled
    assert m.tables.t_work[0].sum() * 1e3 == pytest.approx(whole_ms, rel=1e-3)


@pytest.mark.slow
def test_a_users_onnx_file_is_calibrated_and_other_ops_are_named(tmp_path) -> None:
    """nets= takes a trained detector's file (a dynamic input, its shape given): every layer
    of it is then profiled, its one-device time the profiled whole run; the file says which
    op types were profiled, and a network with others (PP-OCRv4's text detector) is warned
    of them, by name."""
    from dse.app import unprofiled_warning
    from dse.platform import load_platform
    from dse.serve.deployment import platform_file
    from tests.helpers.trained import model_path, trained_net

    out = tmp_path / "c.json"
    detector = model_path("detector")
    r = run_module(
        "dse.calibrate", "platform=localhost", "quick=true", "deployments=false", f"out={out}",
        f"nets=[{{path:{detector},input_shape:[1,3,320,320]}}]",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    c, doc = load_coefficients(out), json.loads(out.read_text())
    net, ocr = trained_net("detector"), trained_net("ocr_det")
    assert c["cpu"].profiled_ops == sorted({layer.op for layer in net.graph})
    m = AnalyticalModel(net.graph, platform_localhost(), c)
    whole_ms = doc["provenance"]["types"]["cpu"]["profiled_networks"]["320n"]["whole_ms"]
    assert m.tables.source[0].min() == 1  # every layer profiled
    assert m.tables.t_work[0].sum() * 1e3 == pytest.approx(whole_ms, rel=1e-3)
    platform = load_platform(platform_file("localhost"))
    assert unprofiled_warning(net, platform, c) is None
    unseen = sorted({layer.op for layer in ocr.graph} - set(c["cpu"].profiled_ops))
    assert unseen[:3] == ["BatchNormalization", "Clip", "ConvTranspose"]  # and more
    assert unprofiled_warning(ocr, platform, c) == (
        f"warning: ch_PP-OCRv4_det_infer's {', '.join(unseen[:-1])} and {unseen[-1]} layers "
        "are costed by a default: calibration profiled none; calibrate with this network "
        f"(python -m dse.calibrate platform=localhost nets=[...,{{path:{ocr.path},"
        "input_shape:[1,3,320,320]}])"
    )
    # a file from before profiled_ops: a network it did not profile whole is warned of that
    for section in doc.values():
        if isinstance(section, dict):
            section.pop("profiled_ops", None)
    older = tmp_path / "older.json"
    older.write_text(json.dumps(doc))
    c = load_coefficients(older)
    assert unprofiled_warning(net, platform, c) is None  # every layer of it profiled
    assert unprofiled_warning(ocr, platform, c) == (
        "warning: ch_PP-OCRv4_det_infer's layers that calibration did not profile are costed by "
        "fits made before dse costed layers by what bounds them (the file records no "
        "profiled_ops): calibrate again (python -m dse.calibrate platform=localhost)"
    )


@pytest.mark.slow
@pytest.mark.mpi
def test_quick_calibration_with_deployments_brings_runs_to_its_probe(tmp_path) -> None:
    """quick=true with the MPI deployments: the file keeps the speed probe of its network,
    and the latencies its cut costs were fitted to are the rounds brought to that speed."""
    env_dir = tmp_path / "calibration"
    out = run_module(
        "dse.calibrate",
        "platform=localhost",
        "quick=true",
        env={"DSE_CALIBRATION_DIR": str(env_dir)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads((env_dir / "localhost.json").read_text())
    ref = doc["speed_reference"]["whole_ms"]["alexnet"]
    assert doc["speed_reference"]["threads"] == 1 and ref > 0
    fingerprint = load_net({"name": "alexnet"}).fingerprint
    assert doc["speed_reference"]["fingerprints"] == {"alexnet": fingerprint}
    cuts = doc["provenance"]["cuts"]
    assert len(cuts["measured_ms"]) == 4  # vertical, split, mixed, entry-only
    for measured, rounds, probes in zip(
        cuts["measured_ms"], cuts["rounds_ms"], cuts["rounds_probe_ms"], strict=True
    ):
        by_hand = np.median(np.array(rounds) * ref / np.array(probes))
        assert measured == pytest.approx(by_hand, rel=1e-3)
    # the runtime's own memory then: the median start RSS of the deployments' ranks, each
    # below its loading peak, as the journal holds them
    journal = [json.loads(x) for x in (env_dir / "localhost.measurements.jsonl").open()]
    ranks = [rank for row in journal if json.loads(row.get("key", "{}")).get("what") ==
             "deployments" for run in row["result"] for rank in run["ranks"]]  # fmt: skip
    assert ranks and all(0 < r["rss_start_mb"] <= r["peak_rss_loading_mb"] for r in ranks)
    start = doc["memory_reference"]["start_mb"]
    assert start == pytest.approx(np.median([r["rss_start_mb"] for r in ranks]), abs=0.05)


def _compose(*overrides: str):
    register()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("calibrate", overrides=["platform=localhost", *overrides])


def test_settings_take_the_config_numbers_and_quick_its_own() -> None:
    """Without quick, every number is the config's (CalibrateConfig's defaults, or a given
    one); quick=true keeps the first network and QUICK's numbers, the rest as given."""
    defaults = CalibrateConfig()
    s = settings_from(_compose("rounds=7"))
    assert s.nets == tuple(defaults.nets) and not s.quick
    assert (s.profile_runs, s.warmup, s.iterations, s.rounds) == (
        defaults.runs,
        defaults.warmup,
        defaults.iterations,
        7,
    )
    assert (s.channel_repeats, s.part_repeats, s.submodel_runs, s.timeout_s) == (
        defaults.channel_repeats,
        defaults.part_repeats,
        defaults.submodel_runs,
        defaults.timeout_s,
    )
    assert not s.link_few_repeats and s.deployments and s.probe
    assert s.out == calibrated_path("localhost") and s.default_out
    assert s.platform.name == "localhost" and not s.base.calibrated
    q = settings_from(_compose("quick=true", "rounds=7", "nets=[vgg16,alexnet]", "out=/tmp/c.json"))
    assert q.quick and q.nets == ("vgg16",)
    assert {k: getattr(q, k) for k in QUICK} == QUICK
    assert q.rounds == QUICK["rounds"] and q.warmup == defaults.warmup
    assert q.out == Path("/tmp/c.json") and not q.default_out


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("nets=[alexnet,lenet]", "nets: 'lenet' is neither a zoo network (alexnet, "),
        ("nets=[]", "nets is empty: name networks of the zoo (alexnet, "),
        ("nets=[alexnet,alexnet]", "nets: two networks are named 'alexnet': rename one file"),
        ("runs=0", "runs=0 must be at least 1"),
        ("rounds=0", "rounds=0 must be at least 1"),
        ("resume=runs/x", "resume=runs/x: a calibration resumes the measurements beside"),
        ("timeout_s=0", "timeout_s positive"),
    ],
)
def test_settings_refuse_bad_numbers_in_one_line(override: str, message: str) -> None:
    with pytest.raises(DseError, match=re.escape(message)):
        settings_from(_compose(override))


def test_nets_take_zoo_names_and_onnx_files(tmp_path: Path) -> None:
    """A zoo name, a file whose inputs' shapes are fixed, and a file with a dynamic input and
    its shape: each under the name it loads as, a file's path made absolute; a dynamic input
    without its shape is one line saying how to give it."""
    from tests.helpers.nets import zoo_like
    from tests.helpers.trained import model_path

    zoo_like(tmp_path)
    static, detector = tmp_path / "zoo_like.onnx", model_path("detector")
    s = settings_from(_compose(
        f"nets=[vgg16,{static},{{path:{detector},input_shape:[1,3,320,320]}}]"
    ))  # fmt: skip
    assert s.nets == ("vgg16", "zoo_like", "320n")
    assert dict(s.net_configs) == {
        "zoo_like": {"name": "onnx", "path": str(static)},
        "320n": {"name": "onnx", "path": str(detector), "input_shape": [1, 3, 320, 320]},
    }
    with pytest.raises(DseError) as err:
        settings_from(_compose(f"nets=[{detector}]"))
    assert str(err.value) == (
        f"nets: {detector} has an input of dynamic shape: give its shape, as "
        f"{{path: {detector}, input_shape: [1,3,H,W]}}"
    )


def test_a_calibration_wins_over_the_shipped_file_not_over_a_named_one(tmp_path, monkeypatch):
    """The platform's calibration replaces the coefficients its file ships with; a file the
    user names (platform.coefficients=FILE or coefficients=PATH) replaces the calibration."""
    from omegaconf import OmegaConf

    from dse.app import coefficients_path

    monkeypatch.setenv("DSE_CALIBRATION_DIR", str(tmp_path))
    shipped = yaml.safe_load((CONF_DIR / "platform" / "localhost.yaml").read_text())
    (tmp_path / "localhost.json").write_text((CONF_DIR / "platform" / "localhost.json").read_text())

    def path(**edits):
        return coefficients_path(OmegaConf.create({"platform": {**shipped, **edits}}))

    assert path() == tmp_path / "localhost.json"
    named = path(coefficients="jetson_xavier_nx.json")
    assert named == CONF_DIR / "platform" / "jetson_xavier_nx.json"
    given = OmegaConf.create({"platform": shipped, "coefficients": str(tmp_path / "c.json")})
    assert coefficients_path(given) == tmp_path / "c.json"


@pytest.mark.parametrize("kind", ["a directory", "a broken link"])
def test_a_calibration_that_is_not_a_file_is_one_line_not_the_shipped_file(tmp_path, kind):
    """Something at the platform's calibration path that is not a file is refused as a broken
    file is, not passed over for the shipped (uncalibrated) coefficients; coefficients=platform
    still chooses those."""
    calibration = tmp_path / "localhost.json"
    if kind == "a directory":
        calibration.mkdir()
    else:
        calibration.symlink_to(tmp_path / "gone.json")
    mapping = tmp_path / "mapping.json"
    names = load_net({"name": "alexnet"}).graph.names
    mapping.write_text(json.dumps({"localhost_cpu0": list(names)}))
    args = ("+net=alexnet", "platform=localhost", f"mapping={mapping}", "format=json")
    env = {"DSE_CALIBRATION_DIR": str(tmp_path)}
    r = run_module("dse.evaluate", *args, env=env)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        f"error: the calibration of platform 'localhost', {calibration}, is {kind}: remove it "
        "and calibrate again (python -m dse.calibrate platform=localhost), or pass "
        "coefficients=platform"
    ], r.stderr[-2000:]
    r = run_module("dse.evaluate", *args, "coefficients=platform", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["latency_ms"] > 0, r.stderr[-2000:]


def test_a_type_the_platforms_file_lacks_is_one_line_before_measuring(tmp_path) -> None:
    """Each device type starts from its section of the platform's own coefficients (its power
    figures stay): edge3_ethernet with localhost.json, which has only 'cpu', is refused before
    anything is measured (or any cluster looked for)."""
    out = run_module(
        "dse.calibrate",
        "platform=edge3_ethernet",
        "platform.coefficients=localhost.json",
        "quick=true",
        env={"DSE_CALIBRATION_DIR": str(tmp_path)},
    )
    assert out.returncode == 2, out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "have no 'core100' section but platform" in lines[0], lines
    assert not list(tmp_path.iterdir())


def test_an_output_that_cannot_be_written_is_one_line_before_measuring(tmp_path) -> None:
    """out= a directory, or under a file: refused before minutes of measuring are lost."""
    a_file = tmp_path / "taken"
    a_file.write_text("")
    for out, words in ((tmp_path, "is a directory"), (a_file / "c.json", "is a file, not a")):
        r = run_module("dse.calibrate", "platform=localhost", "quick=true", f"out={out}")
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and words in lines[0], r.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.mpi
def test_a_calibration_killed_in_its_deployments_leaves_them_to_the_next_run(tmp_path) -> None:
    """SIGKILL during the deployments runs no cleanup: their temporary directory (hundreds of
    MB of sub-models) stays, its mpiexec and ranks do not; the calibration started again
    (resume=true, as its one line says) removes it once it makes a temporary directory, and
    leaves none of its own."""
    tmp, cal = tmp_path / "tmp", tmp_path / "calibration"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "DSE_CALIBRATION_DIR": str(cal)}
    args = [sys.executable, "-m", "dse.calibrate", "platform=localhost", "quick=true"]

    def deployed() -> bool:  # a deployment's sub-models written (or the run over)
        return any(tmp.glob("dse-calibrate-*/**/*.onnx")) or proc.poll() is not None

    with open(tmp_path / "log", "w") as log:
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=log)
        try:
            assert wait_until(deployed, 240), "no deployment"
            assert proc.poll() is None, (tmp_path / "log").read_text()[-2000:]
        finally:
            proc.kill()
            proc.wait()
    assert wait_until(lambda: not processes_naming(str(tmp)), 10), processes_naming(str(tmp))
    left = [d for d in tmp.glob("dse-calibrate-*") if list(d.glob("**/*.onnx"))]
    assert len(left) == 1
    again = subprocess.Popen([*args, "resume=true"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert wait_until(lambda: not left[0].exists() or again.poll() is not None, 240)
        assert not left[0].exists()
        _, err = again.communicate(timeout=600)
    finally:
        again.kill()
    assert again.returncode == 0, err[-2000:]
    assert not list(tmp.glob("dse-*")), list(tmp.iterdir())


def test_a_calibration_folder_variable_naming_a_file_is_one_line(tmp_path, monkeypatch):
    """DSE_CALIBRATION_DIR set to a calibration file (not its folder) is refused naming the
    variable, not passed over for the shipped (uncalibrated) coefficients."""
    from dse.app import calibration_of
    from dse.errors import DseError

    calibration = tmp_path / "localhost.json"
    calibration.write_text((CONF_DIR / "platform" / "localhost.json").read_text())
    monkeypatch.setenv("DSE_CALIBRATION_DIR", str(calibration))
    with pytest.raises(DseError) as caught:
        calibration_of("localhost")
    assert str(caught.value) == (
        f"DSE_CALIBRATION_DIR={calibration} is a file: it names the folder of the platforms' "
        f"calibrations (PLATFORM.json): set it to {tmp_path}, or pass coefficients={calibration}"
    )
