"""A plan from disk is never trusted: tampered plans, by class of damage, are refused in one
line naming what is wrong, before any rank allocates (dse.runtime.deployment.reader.read_plan); the
plan's JSON round-trips through its types; a run whose outputs differ from the whole model's,
or cannot be checked, fails with status 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml

from dse.errors import DseError
from dse.mapping import from_device_lists
from dse.platform import load_platform
from dse.runtime.deployment.layout import EXPECTED, PLAN
from dse.runtime.deployment.measurements import read_measurements
from dse.runtime.deployment.plan import Plan
from dse.runtime.deployment.reader import read_plan, whole_model
from dse.runtime.launch.deploy import deploy
from dse.runtime.launch.mpiexec import launch
from dse.runtime.launch.probe import SpeedProbe
from dse.runtime.rank.equivalence import equivalence, verdict
from tests.helpers.cli import ROOT
from tests.helpers.hostile import assert_each_one_line, run_all
from tests.helpers.nets import zoo_like

Edit = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> Path:
    """zoo_like on localhost's two devices: every splittable layer over both (gathers on both
    ranks), the rest alternating (sends and receives both ways)."""
    tmp = tmp_path_factory.mktemp("plan")
    plat = load_platform(yaml.safe_load((ROOT / "conf/platform/localhost.yaml").read_text()))
    net = zoo_like(tmp)
    n = len(net.graph)
    lists = [[[0, 1] if net.graph.splittable[i] else [i % 2] for i in range(n)]]
    deploy(net, plat, from_device_lists(net.graph, 2, lists), tmp / "d", warmup=0, iterations=1)
    return tmp / "d"


def tampered(deployed: Path, tmp_path: Path, edit: Edit | None = None) -> Path:
    """A copy of the deployment with ``edit`` applied to its plan's JSON."""
    out = tmp_path / "d"
    shutil.copytree(deployed, out, symlinks=True)
    if edit is not None:
        doc = json.loads((out / PLAN).read_text())
        edit(doc)
        (out / PLAN).write_text(json.dumps(doc))
    return out


def step(doc: dict, rank: int, op: str, k: int = 0) -> dict:
    """The k-th step of ``op`` on ``rank``."""
    return [s for s in doc["ranks"][rank]["steps"] if s["op"] == op][k]


def refused(directory: Path, *words: str, **kwargs: Any) -> str:
    with pytest.raises(DseError) as info:
        read_plan(directory, **kwargs)
    line = str(info.value)
    assert "\n" not in line
    for w in words:
        assert w in line, (w, line)
    return line


def test_the_plan_round_trips_through_its_types(deployed: Path) -> None:
    doc = json.loads((deployed / PLAN).read_text())
    plan = read_plan(deployed)
    assert plan.to_json() == doc
    assert json.loads(plan.dumps()) == doc
    assert Plan.from_json(doc) == plan
    # the typed steps carry what the JSON says, by name
    assert [s.op for s in plan.ranks[1].steps] == [s["op"] for s in doc["ranks"][1]["steps"]]
    gather = next(s for s in plan.ranks[0].steps if s.op == "gather")
    raw = step(doc, 0, "gather")
    assert [(p.tensor, p.source, list(p.range), p.tag) for p in gather.parts] == [
        (p["tensor"], p["from"], p["range"], p.get("tag")) for p in raw["parts"]
    ]


SCHEMA: dict[str, tuple[Edit, tuple[str, ...]]] = {
    "not an object": (lambda d: d.clear() or d.update({"x": 1}), ("'version' is missing",)),
    "old version": (lambda d: d.update(version=2), ("plan version 2", "deploy the mapping")),
    "tag as text": (
        lambda d: step(d, 0, "send").update(tag="7"),
        ("ranks[0].steps[0].tag", "expected an integer, not text"),
    ),
    "tag true": (lambda d: step(d, 0, "send").update(tag=True), ("tag", "not true/false")),
    "huge integer": (
        lambda d: d.update(entry_rank=10**400),
        ("entry_rank", "beyond the integers JSON holds"),
    ),
    "unknown op": (
        lambda d: step(d, 1, "recv").update(op="exec"),
        ("op", '"exec" is not one of run, send, recv, gather'),
    ),
    "missing field": (lambda d: step(d, 1, "recv").pop("from"), ("'from' is missing",)),
    "steps not a list": (lambda d: d["ranks"][0].update(steps={}), ("steps", "expected a list")),
    "bad dtype": (
        lambda d: next(iter(d["tensors"].values())).update(dtype="object"),
        ("tensors.x.dtype", "expected one of float16", 'not "object"'),
    ),
    "dtype a list": (
        lambda d: next(iter(d["tensors"].values())).update(dtype=["float32"]),
        ("tensors.x.dtype", 'not ["float32"]'),
    ),
    "negative dim": (
        lambda d: next(iter(d["tensors"].values())).update(shape=[1, -4]),
        ("tensors.x.shape[1]", "-4 is out of range: expected at least 0"),
    ),
    "kind": (lambda d: d["ranks"][1].update(kind="fpga"), ("ranks[1].kind", "cpu or gpu")),
    "memory": (lambda d: d["ranks"][0].update(memory_mb=-1), ("memory_mb", "expected above 0")),
}


@pytest.mark.parametrize("case", list(SCHEMA))
def test_schema_and_types(deployed: Path, tmp_path: Path, case: str) -> None:
    edit, words = SCHEMA[case]
    refused(tampered(deployed, tmp_path, edit), *words)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{", ("is not JSON",)),
        ('{"version": 3, "version": 3}', ("'version' appears twice",)),
        ('{"version": NaN}', ("NaN", "is not a JSON value")),
        ("[" * 100_000 + "]" * 100_000, ("nested too deeply",)),
    ],
)
def test_not_a_plan(deployed: Path, tmp_path: Path, text: str, words: tuple[str, ...]) -> None:
    d = tampered(deployed, tmp_path)
    (d / PLAN).write_text(text)
    refused(d, *words)


def _swap_ranks(d: dict) -> None:
    d["ranks"][0]["rank"], d["ranks"][1]["rank"] = 1, 0


def _same_device(d: dict) -> None:
    d["ranks"][1]["device"] = d["ranks"][0]["device"]


RANKS: dict[str, tuple[Edit, tuple[str, ...]]] = {
    "out of order": (_swap_ranks, ("ranks[0].rank", "numbered 0..K-1")),
    "device twice": (_same_device, ("ranks[1].device", "has another rank")),
    "entry rank": (lambda d: d.update(entry_rank=2), ("entry_rank", "is not a rank")),
    "output rank": (lambda d: d["outputs"][0].update(rank=5), ("outputs[0].rank", "not a rank")),
    "no rank": (lambda d: d.update(ranks=[]), ("ranks", "no rank")),
}


@pytest.mark.parametrize("case", list(RANKS))
def test_ranks(deployed: Path, tmp_path: Path, case: str) -> None:
    edit, words = RANKS[case]
    refused(tampered(deployed, tmp_path, edit), *words)


def _drop(d: dict, rank: int, op: str) -> None:
    d["ranks"][rank]["steps"].remove(step(d, rank, op))


def _deadlock(d: dict) -> None:
    """Rank 1 receives first; make rank 0 wait for rank 1 before its first send."""
    steps = d["ranks"][0]["steps"]
    recv = step(d, 0, "recv")
    steps.remove(recv)
    recv.pop("free", None)
    steps.insert(0, recv)


def _same_tag(d: dict) -> None:
    a, b = list(d["tensors"].values())[:2]
    b["tag"] = a["tag"]


MESSAGES: dict[str, tuple[Edit, tuple[str, ...]]] = {
    "send never received": (lambda d: _drop(d, 1, "recv"), ("sends 'x'", "matched 0 time")),
    "receive never sent": (lambda d: _drop(d, 0, "send"), ("is to receive 'x'", "matched 0")),
    "send to itself": (lambda d: step(d, 0, "send").update(to=0), ("peer 0", "another rank")),
    "tag not the tensor's": (
        lambda d: step(d, 1, "recv").update(tag=99),
        ("tag 99 is not tensor 'x''s",),
    ),
    "tag twice": (_same_tag, ("is another tensor's too",)),
    "tag of an output": (
        lambda d: next(iter(d["tensors"].values())).update(tag=1_000_000),
        ("not below 1000000",),
    ),
    "wire tensor unknown": (
        lambda d: d["tensors"].pop("x"),
        ("tensor 'x' crosses ranks but is not in 'tensors'",),
    ),
    "deadlock": (_deadlock, ("ranks[0].steps[0]", "a deadlock")),
}


@pytest.mark.parametrize("case", list(MESSAGES))
def test_every_send_is_received_and_nothing_deadlocks(
    deployed: Path, tmp_path: Path, case: str
) -> None:
    edit, words = MESSAGES[case]
    refused(tampered(deployed, tmp_path, edit), *words)


def _gap(d: dict) -> None:
    step(d, 0, "gather")["parts"][0]["range"][1] -= 1


def _untagged_remote(d: dict) -> None:
    """Rank 0 takes rank 1's part as its own (and rank 1 no longer sends it)."""
    part = step(d, 0, "gather")["parts"][1]
    part.pop("tag")
    sends = d["ranks"][1]["steps"]
    sends.remove(next(s for s in sends if s["op"] == "send" and s["tensor"] == part["tensor"]))


GATHERS: dict[str, tuple[Edit, tuple[str, ...]]] = {
    "gap": (_gap, ("steps[3].parts", "do not cover [0, 8)")),
    "axis": (lambda d: step(d, 0, "gather").update(axis=4), ("axis", "is not an axis")),
    "part from self, tagged": (
        lambda d: step(d, 0, "gather")["parts"][1].update({"from": 0}),
        ("parts[1].from", "is not another rank"),
    ),
    "untagged remote part": (_untagged_remote, ("untagged part must be the rank's own",)),
    "whole shape": (
        lambda d: step(d, 0, "gather")["shape"].__setitem__(1, 9),
        ("do not cover [0, 9)",),
    ),
}


@pytest.mark.parametrize("case", list(GATHERS))
def test_a_gathers_parts_cover_its_tensor(deployed: Path, tmp_path: Path, case: str) -> None:
    edit, words = GATHERS[case]
    refused(tampered(deployed, tmp_path, edit), *words)


def _shape(d: dict) -> None:
    """The graph input one column wider everywhere in the plan: only the sub-models differ."""
    d["tensors"]["x"]["shape"] = d["inputs"][0]["shape"] = [1, 4, 8, 9]


def _dtype(d: dict) -> None:
    d["tensors"]["x"]["dtype"] = "float64"
    d["inputs"][0]["dtype"] = "float64"


def _read_unheld(d: dict) -> None:
    step(d, 1, "run")["inputs"] = ["ra.part0"]


def _swapped(d: dict) -> None:
    """Rank 0's first two sub-models swapped, in its steps and its list alike."""
    a, b = step(d, 0, "run", 0), step(d, 0, "run", 1)
    a["segment"], b["segment"] = b["segment"], a["segment"]
    d["ranks"][0]["segments"][:2] = [a["segment"], b["segment"]]


def _freed_early(d: dict) -> None:
    step(d, 1, "recv")["free"] = ["x"]


FLOW: dict[str, tuple[Edit, tuple[str, ...]]] = {
    "shape not the sub-model's": (
        _shape,
        (
            "ranks[0].steps[1]",
            "is float32[1, 4, 8, 9], but rank0_seg0.onnx takes float32[1, 4, 8, 8]",
        ),
    ),
    "type not the sub-model's": (_dtype, ("float64[1, 4, 8, 8], but rank0_seg0.onnx takes",)),
    "sub-models swapped": (_swapped, ("ranks[0].steps[1]", "feeds ['x'], but rank0_seg1.onnx")),
    "a tensor not received": (_read_unheld, ("ranks[1].steps[1]", "reads tensor 'ra.part0'")),
    "freed before use": (_freed_early, ("reads tensor 'x', which rank 1 does not hold",)),
    "output not made": (
        lambda d: d["outputs"][0].update(name="nothing"),
        ("outputs.nothing", "does not hold"),
    ),
    "segments not its runs": (
        lambda d: d["ranks"][0]["segments"].reverse(),
        ("ranks[0].segments", "in order"),
    ),
}


@pytest.mark.parametrize("case", list(FLOW))
def test_tensors_against_the_sub_models(deployed: Path, tmp_path: Path, case: str) -> None:
    """Shapes and types of what each step reads against the plan and the sub-models' own ONNX
    inputs and outputs."""
    edit, words = FLOW[case]
    refused(tampered(deployed, tmp_path, edit), *words)


def _segment(name: str) -> Edit:
    def edit(d: dict) -> None:
        step(d, 0, "run")["segment"] = name
        d["ranks"][0]["segments"][0] = name

    return edit


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("../rank0_seg0.onnx", ("'../rank0_seg0.onnx' is not a plain .onnx file name",)),
        ("/etc/passwd", ("'/etc/passwd' is not a plain",)),
        ("sub/rank0_seg0.onnx", ("not a plain",)),
        ("rank9_seg9.onnx", ("rank9_seg9.onnx", "is missing")),
    ],
)
def test_sub_model_paths_stay_in_the_directory(
    deployed: Path, tmp_path: Path, name: str, words: tuple[str, ...]
) -> None:
    refused(tampered(deployed, tmp_path, _segment(name)), *words)


def test_symlinks_are_refused(deployed: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.onnx"
    d = tampered(deployed, tmp_path)
    shutil.copy(d / "rank0_seg0.onnx", outside)
    (d / "rank0_seg0.onnx").unlink()
    (d / "rank0_seg0.onnx").symlink_to(outside)
    refused(d, "rank0_seg0.onnx (sub-model) is a symlink")
    (d / "rank0_seg0.onnx").unlink()
    shutil.copy(outside, d / "rank0_seg0.onnx")
    (d / EXPECTED).rename(tmp_path / "expected.npz")
    (d / EXPECTED).symlink_to(tmp_path / "expected.npz")
    refused(d, "expected.npz", "is a symlink")


def test_external_weights_of_a_sub_model_stay_in_the_directory(
    deployed: Path, tmp_path: Path
) -> None:
    d = tampered(deployed, tmp_path)
    path = d / "rank0_seg0.onnx"
    model = onnx.load(str(path), load_external_data=False)
    ext = next(t for t in model.graph.initializer if t.external_data)
    for key, value in (("location", "../../etc/passwd"), ("length", "10")):
        next(e for e in ext.external_data if e.key == key).value = value
    path.write_bytes(model.SerializeToString())
    refused(d, "weights of rank0_seg0.onnx '../../etc/passwd' is not a plain file name")
    next(e for e in ext.external_data if e.key == "location").value = "rank0_seg0.onnx.data"
    next(e for e in ext.external_data if e.key == "length").value = str(10**12)
    path.write_bytes(model.SerializeToString())
    refused(d, f"weight '{ext.name}' reaches past the end of rank0_seg0.onnx.data")
    path.write_bytes(b"\xff" * 100)  # not a model
    refused(d, "rank0_seg0.onnx is not an ONNX model")


def test_sizes_are_bounded_by_the_devices_memory(deployed: Path, tmp_path: Path) -> None:
    """localhost's devices have 12,288 MB: a receive buffer of 10^15 floats is refused, so is
    a set of buffers that together exceed it; a plan that lifts its memory_mb is still bounded
    by the memory of the machine a rank runs on."""

    def huge(d: dict) -> None:
        d["tensors"]["x"]["shape"] = [10**7, 10**8]

    words = ("tensor 'x' [10000000, 100000000] takes 4,000,000,000 MB", "12,288 MB")
    refused(tampered(deployed, tmp_path / "a", huge), *words)
    plan = read_plan(deployed)
    sizes = [plan.tensors[s.tensor].spec.nbytes for s in plan.ranks[1].steps if s.op == "recv"]
    sizes += [s.spec.nbytes for s in plan.ranks[1].steps if s.op == "gather"]
    assert len(sizes) > 2  # rank 1's buffers (x, and gathered tensors)

    def small(d: dict) -> None:  # each of rank 1's buffers fits, not all of them
        d["ranks"][1]["memory_mb"] = max(sizes) / 1e6

    words = (f"its buffers take {sum(sizes):,} bytes", f"the {max(sizes):,} bytes of memory")
    refused(tampered(deployed, tmp_path / "b", small), "ranks[1]", *words)

    def lifted(d: dict) -> None:
        d["ranks"][1]["memory_mb"] = 1e12
        d["tensors"]["x"]["shape"] = [10**11]  # 400 GB

    d = tampered(deployed, tmp_path / "c", lifted)
    refused(d, "ranks[1]", "more than the 1,000 MB", host_memory=10**9)


def test_a_plan_without_its_reference_is_refused(deployed: Path, tmp_path: Path) -> None:
    refused(tampered(deployed, tmp_path / "a", lambda d: d.pop("reference")), "no reference")
    d = tampered(deployed, tmp_path / "b")
    (d / EXPECTED).unlink()
    refused(d, "expected.npz", "is missing")


def test_the_whole_model_outside_the_deployment_is_checked_before_it_is_read(
    deployed: Path, tmp_path: Path
) -> None:
    """``reference.path`` names a file of the deploying machine: a rank and the check run.sh
    runs never read it (a plan naming /etc/passwd passes them), and the launching machine's
    readers (the speed probe) read it only as an ONNX model with the plan's inputs and
    outputs, one line otherwise."""
    good = read_plan(deployed)
    assert good.reference is not None
    assert whole_model(good, deployed) == Path(good.reference.path)
    where = tmp_path / "x" / "d" / PLAN
    other = tmp_path / "other.onnx"
    model = onnx.load(good.reference.path, load_external_data=False)
    model.graph.input[0].name = "image"
    onnx.save(model, str(other))
    cases = {
        "/etc/passwd": f"{where}: reference.path '/etc/passwd' is not an ONNX model",
        "/etc": f"{where}: reference.path '/etc' is not a file here",
        "model.onnx": f"{where}: reference.path 'model.onnx' is not an absolute path",
        str(other): f"{where}: reference.path '{other}' is not the plan's model: it has no "
        f"'{good.inputs[0].name}'",
    }
    for path, line in cases.items():

        def edit(d: dict, path: str = path) -> None:
            d["reference"]["path"] = path

        shutil.rmtree(tmp_path / "x", ignore_errors=True)
        d = tampered(deployed, tmp_path / "x", edit)
        plan = read_plan(d)  # what a rank reads: the plan, not the whole model
        with pytest.raises(DseError) as info:
            whole_model(plan, d)
        assert str(info.value) == f"{line} (deploy the mapping again)"
        with pytest.raises(DseError) as info:
            SpeedProbe(d, [{0}], 1)()
        assert str(info.value) == f"{line} (deploy the mapping again)"
    check = run_all({"ok": ("dse.runtime.rank.check", [str(d)])})["ok"]
    assert check.returncode == 0 and check.stderr == ""


def test_the_check_command_is_one_line_with_status_2(deployed: Path, tmp_path: Path) -> None:
    """``python -m dse.runtime.rank.check`` (run.sh runs it first) on a few tampered plans."""
    cases = {}
    words = {}
    for i, (case, table) in enumerate(
        [("tag as text", SCHEMA), ("deadlock", MESSAGES), ("gap", GATHERS)]
    ):
        edit, w = table[case]
        d = tampered(deployed, tmp_path / str(i), edit)
        cases[case] = ("dse.runtime.rank.check", [str(d)])
        words[case] = w
    assert_each_one_line(run_all(cases), words)
    ok = run_all({"ok": ("dse.runtime.rank.check", [str(deployed)])})["ok"]
    assert ok.returncode == 0 and ok.stderr == ""


BOARD = "no-such-board.invalid"


def test_a_host_that_cannot_be_reached_is_named_before_mpiexec(deployed: Path, tmp_path: Path):
    """The check run.sh runs before mpiexec: a hostfile edited to name a host where the
    rankfile places no rank, and one whose host (none of the plan's) does not resolve, are each
    one line naming the host (and its ranks' devices) and what to check."""
    a = tampered(deployed, tmp_path / "a")
    (a / "hostfile").write_text(f"{BOARD} slots=2\n")
    b = tampered(deployed, tmp_path / "b")
    (b / "hostfile").write_text(f"{BOARD} slots=2\n")
    (b / "rankfile").write_text(f"rank 0={BOARD} slot=0\nrank 1={BOARD} slot=1\n")
    results = run_all({k: ("dse.runtime.rank.check", [str(d)]) for k, d in (("a", a), ("b", b))})
    assert results["a"].returncode == 2 and results["b"].returncode == 2
    assert results["a"].stderr == (
        f"error: {a}/hostfile names host '{BOARD}', where the rankfile places no rank (it "
        "places them on localhost): deploy the mapping again, or edit both files alike\n"
    )
    assert results["b"].stderr == (
        f"error: host '{BOARD}' of {b}/hostfile (rank 0 (localhost_cpu0), rank 1 "
        "(localhost_cpu1)) does not resolve here: check the name (the plan's hosts are "
        "localhost) and that DNS or /etc/hosts knows it\n"
    )


@pytest.mark.mpi
def test_a_plans_host_that_ssh_cannot_reach_is_named_once(deployed: Path, tmp_path: Path):
    """A plan whose own host does not resolve passes the check (a board's name may be known to
    the launcher's ssh only); mpiexec's ssh then fails, and the run names the host and its ranks
    at once, not Open MPI's daemon page after three launches."""

    def on_board(d: dict) -> None:
        for r in d["ranks"]:
            r["host"] = BOARD

    d = tampered(deployed, tmp_path, on_board)
    (d / "hostfile").write_text(f"{BOARD} slots=2\n")
    (d / "rankfile").write_text(f"rank 0={BOARD} slot=0\nrank 1={BOARD} slot=1\n")
    r = launch(d, timeout_s=120)
    assert r.status == "failed"
    assert r.reason == (
        f"mpiexec exited with 255: host '{BOARD}' (ranks 0, 1) could not be reached: its name "
        f"does not resolve here (Name or service not known): check the host names in "
        f"{d}/hostfile and that the board is up and reachable from here"
    )


def tiny_dir(deployed: Path, tmp_path: Path, expected: dict[str, np.ndarray]) -> Path:
    """A copy of the deployment whose stored whole-model outputs are ``expected``."""
    d = tmp_path / "tiny"
    shutil.copytree(deployed, d, symlinks=True)
    plan = read_plan(d)
    arrays = {f"o{i}": expected[o.name].astype(np.float32) for i, o in enumerate(plan.outputs)}
    np.savez(d / EXPECTED, **arrays)  # type: ignore[arg-type]
    return d


def test_outputs_are_checked_against_the_stored_whole_model(deployed: Path, tmp_path: Path):
    """equivalence() reads the whole model's outputs from the deployment: equal outputs pass,
    outputs off by 1 % or holding NaN fail, and without them nothing passes."""
    plan = read_plan(deployed)
    with np.load(deployed / EXPECTED) as z:
        want = {o.name: z[f"o{i}"] for i, o in enumerate(plan.outputs)}
    eq = equivalence(plan, want, deployed)
    assert eq.passed is True and eq.max_rel_error == 0.0 and verdict(eq) is None
    off = {k: v * 1.01 for k, v in want.items()}
    eq = equivalence(plan, off, deployed)
    assert eq.passed is False and eq.max_rel_error == pytest.approx(0.01, rel=1e-3)
    assert verdict(eq).startswith("outputs differ from the whole model: max rel error 0.01")
    # outputs all near 0 (a saturated probability map): judged on 1e-6 beside 1e-4 of their
    # largest value, whatever share of it that is; 2e-6 apart fails
    tiny = {k: v / np.abs(v).max() * 1.2e-5 for k, v in want.items()}
    small = tiny_dir(deployed, tmp_path, tiny)
    eq = equivalence(plan, {k: v + 1.5e-7 for k, v in tiny.items()}, small)
    assert eq.passed is True and eq.max_rel_error == pytest.approx(1.5e-7 / 1.2e-5, rel=1e-2)
    eq = equivalence(plan, {k: v + 2e-6 for k, v in tiny.items()}, small)
    assert eq.passed is False
    nan = {k: np.full_like(v, np.nan) for k, v in want.items()}
    eq = equivalence(plan, nan, deployed)
    assert eq.passed is False and "NaN" in verdict(eq)
    d = tampered(deployed, tmp_path)
    (d / EXPECTED).unlink()
    eq = equivalence(plan, want, d)
    assert eq.passed is None
    assert verdict(eq).startswith("outputs not checked against the whole model")


@pytest.mark.mpi
def test_a_run_whose_outputs_differ_fails_with_status_2(deployed: Path, tmp_path: Path):
    """Stored outputs off by 1 %: launch() gives the failed measurement rank 0 wrote, and
    run.sh ends with status 2 and rank 0's line first."""
    d = tampered(deployed, tmp_path)
    plan = read_plan(d)
    with np.load(d / EXPECTED) as z:
        arrays = {f"o{i}": z[f"o{i}"] * 1.01 for i in range(len(plan.outputs))}
    np.savez(d / EXPECTED, **arrays)
    r = launch(d, timeout_s=120)
    assert r.status == "failed" and r.reason.startswith("outputs differ")
    assert read_measurements(d) == r and r.equivalence.passed is False
    script = (d / "run.sh").read_text().replace(str(deployed), str(d))
    (d / "run.sh").write_text(script)
    done = subprocess.run(
        [str(d / "run.sh")], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {d}: outputs differ from the whole model")


def test_random_damage_is_accepted_or_one_line(deployed: Path, tmp_path: Path) -> None:
    """300 seeded random edits of the plan's JSON (fields removed, lists shortened or an entry
    doubled, values replaced by values of other types): each plan is read or refused with one
    DseError line, never another exception (this found a dtype given as a list)."""
    import random

    base = json.loads((deployed / PLAN).read_text())
    values = [None, True, 0, -1, 2, 10**20, 1.5, "", "x", "../x", [], [1], {}, "float64"]

    def paths(obj: Any, path: tuple = ()) -> list[tuple]:
        out = [path] if path else []
        if isinstance(obj, dict | list):
            for k, v in obj.items() if isinstance(obj, dict) else enumerate(obj):
                out += paths(v, (*path, k))
        return out

    every = paths(base)
    rng = random.Random(0)
    d = tampered(deployed, tmp_path)
    refusals = 0
    for _ in range(300):
        doc = json.loads(json.dumps(base))
        *head, key = rng.choice(every)
        parent = doc
        for k in head:
            parent = parent[k]
        roll = rng.random()
        if roll < 0.2:
            parent.pop(key)
        elif roll < 0.3 and isinstance(parent, list):
            parent.insert(key, parent[key])
        else:
            parent[key] = rng.choice(values)
        (d / PLAN).write_text(json.dumps(doc))
        try:
            read_plan(d)
        except DseError as exc:
            assert "\n" not in str(exc)
            refusals += 1
    assert refusals > 250  # most damage is refused (what passes: a dropped "free", layers)
