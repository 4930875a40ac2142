"""NSGA-II search: recovering an enumerable front, determinism, resume, and the app's errors."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from onnx import helper

import tests.helpers.onnx_factory as f
from chromosomes import make_chromosome
from dse.config import REFILLS, AlgorithmConfig
from dse.net.build import build_graph
from dse.search import checkpoint
from dse.search import nsga2 as search
from dse.search.problem import MappingProblem
from models_analytical.model import AnalyticalModel
from tests.helpers.cli import run_module
from tests.helpers.figures import pixels, showing
from tests.helpers.platforms import coefficients, platform


def small_problem(chromosome: str = "naive", spatial: bool = False) -> MappingProblem:
    """conv -> relu -> conv on 3 devices: 3**7 naive gene vectors, few enough to enumerate
    (x 4 with the two convolutions' axis genes)."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2"),
    ]
    inits = [f.weight("w1", [12, 8, 3, 3]), f.weight("w2", [6, 12, 3, 3])]
    g = build_graph(f.model(nodes, {"x": [1, 8, 16, 16]}, ["y"], inits), "small")
    plat = platform(n=3, bw=2e6, latency=1e-3)
    return MappingProblem(
        make_chromosome(chromosome, g, 3, spatial=spatial),
        AnalyticalModel(g, plat, coefficients()),
        ["latency", "memory", "energy"],
    )


def non_dominated(f: np.ndarray) -> np.ndarray:
    keep = np.ones(len(f), dtype=bool)
    for i in range(len(f)):
        dominated = (f <= f[i]).all(axis=1) & (f < f[i]).any(axis=1)
        keep[i] = not dominated.any()
    return keep


def objective_set(f: np.ndarray) -> set[tuple[float, ...]]:
    return {tuple(row) for row in np.round(f, 6).tolist()}


def settings(**kw) -> AlgorithmConfig:
    return AlgorithmConfig(**{"pop_size": 40, "n_gen": 40, **kw})


@pytest.mark.parametrize("spatial", [False, True])
def test_nsga2_recovers_the_enumerated_front(spatial):
    problem = small_problem(spatial=spatial)
    every = np.array(list(itertools.product(*(range(int(u) + 1) for u in problem.xu))))
    f_every, _ = problem.evaluate(every)
    truth = objective_set(f_every[non_dominated(f_every)])
    if spatial:  # rows reach mappings channels cannot: the true front moves
        plain = small_problem()
        base = np.array(list(itertools.product(range(3), repeat=plain.n_var)))
        f_base, _ = plain.evaluate(base)
        assert truth != objective_set(f_base[non_dominated(f_base)])
    state = search.run(search.new_search(problem, settings(n_gen=80 if spatial else 40), 3))
    _, f_found, g_found = search.front(state)
    assert (g_found <= 0).all()
    found = objective_set(f_found)
    assert found == truth, (len(found & truth), len(truth))
    assert state.evaluations < len(every)  # found with fewer evaluations


def test_same_seed_same_front():
    fronts = [
        search.front(
            search.run(search.new_search(small_problem("advanced"), settings(n_gen=15), 3))
        )[1]
        for _ in range(2)
    ]
    assert np.array_equal(fronts[0], fronts[1])


@pytest.mark.parametrize("refill, spatial", [(r, False) for r in REFILLS] + [("mutation", True)])
def test_resume_continues_exactly(tmp_path, refill, spatial):
    def problem_() -> MappingProblem:
        return small_problem(spatial=spatial)

    full = search.run(search.new_search(problem_(), settings(n_gen=12, refill=refill), 3))
    half = search.run(search.new_search(problem_(), settings(n_gen=6, refill=refill), 3))
    problem = problem_()
    ident = checkpoint.identity(problem, "fp", ["a", "b", "c"])
    checkpoint.save(half, tmp_path, ident, {})
    meta, data = checkpoint.read(tmp_path)
    resumed = checkpoint.restore(meta, data, problem, settings(n_gen=6, refill=refill), ident)
    search.extend(resumed, 12, None)
    search.run(resumed)
    assert resumed.generation == full.generation  # 12, or fewer if no new mapping was left
    assert np.array_equal(search.front(resumed)[1], search.front(full)[1])
    assert np.array_equal(resumed.pop.X, full.pop.X)
    assert resumed.evaluations == full.evaluations
    assert [h["generation"] for h in resumed.history] == list(range(1, full.generation + 1))
    assert resumed.history == full.history and resumed.stop_reason == full.stop_reason


def test_resume_of_a_checkpoint_without_the_new_history_columns(tmp_path):
    """A checkpoint written before history.csv counted new offspring: its rows get the
    generation's evaluations as new offspring (each evaluation is a new mapping) and an empty
    refilled count, so the resumed run's history.csv has one set of columns."""
    from dse.results import writers

    full = search.run(search.new_search(small_problem(), settings(n_gen=5), 3))
    half = search.run(search.new_search(small_problem(), settings(n_gen=3), 3))
    problem = small_problem()
    ident = checkpoint.identity(problem, "fp", ["a", "b", "c"])
    for row in half.history:
        del row["new_offspring"], row["refilled"]
    checkpoint.save(half, tmp_path, ident, {})
    meta, data = checkpoint.read(tmp_path)
    resumed = checkpoint.restore(meta, data, problem, settings(n_gen=3), ident)
    search.extend(resumed, 5, None)
    search.run(resumed)
    writers.write_history(tmp_path / "history.csv", resumed.history)
    lines = (tmp_path / "history.csv").read_text().splitlines()
    assert lines[0].endswith(",new_offspring,refilled") and len(lines) == 6
    new = [r["new_offspring"] for r in resumed.history]
    assert new == [r["new_offspring"] for r in full.history] and new[0] < 40  # copies dropped
    assert [r["refilled"] for r in resumed.history[:3]] == [None] * 3
    assert resumed.history[3:] == full.history[3:]
    assert lines[1].endswith(f",{new[0]},") and not lines[-1].endswith(",")


def dse(*args: str):
    return run_module("dse", "progress=false", *args)


def _checkpoint_with(tmp_path, meta_change=None, **arrays) -> str:
    """A checkpoint of a short search of the small problem, its meta changed by
    ``meta_change`` and the arrays given replaced; read and restored, the one line refusing it
    (with the file's path as ``PATH``), or '' when it resumes."""
    import io

    from dse.errors import DseError

    state = search.run(search.new_search(small_problem(), settings(pop_size=10, n_gen=2), 3))
    ident = checkpoint.identity(state.problem, "fp", ["a", "b", "c"])
    path = checkpoint.save(state, tmp_path, ident, {})
    with np.load(path, allow_pickle=False) as z:
        members = {k: z[k] for k in z.files}
    meta = json.loads(members["meta"].tobytes())
    if meta_change:
        meta_change(meta)
    members["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **{**members, **arrays})
    path.write_bytes(buf.getvalue())
    try:
        meta, data = checkpoint.read(tmp_path)
        checkpoint.restore(meta, data, small_problem(), settings(pop_size=10, n_gen=2), ident)
    except DseError as exc:
        return str(exc).replace(str(path), "PATH")
    return ""


def _set(key: str, value):
    def change(meta: dict) -> None:
        *parents, last = key.split(".")
        for k in parents:
            meta = meta[int(k) if k.isdigit() else k]
        meta[last] = value

    return change


BAD = "PATH is not a readable dse checkpoint"


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("generation", "abc", "generation: expected an integer, not text"),
        ("generation", 0, "generation: 0 is out of range: expected at least 1"),
        ("evaluations", -3, "evaluations: -3 is out of range: expected at least 0"),
        ("seconds", "x", "seconds: expected a number, not text"),
        ("exhausted", 1, "exhausted: expected true or false, not an integer"),
        ("reference.ideal", "abc", "reference.ideal: expected a list, not text"),
        ("reference.nadir", [1, None, 2], "reference.nadir[1]: expected a number, not null"),
        ("reference", None, "reference: expected an object, not null"),
        ("history", ["x"], "history[0]: expected an object, not text"),
        ("history.0.generation", "2", "history[0].generation: expected an integer, not text"),
        ("history.0.hypervolume", -1.0,
         "history[0].hypervolume: -1 is out of range: expected at least 0"),
        ("history.1.best_latency", None, "history[1].best_latency: expected a number, not null"),
        ("identity", [], "identity: expected an object, not a list"),
        ("rng", {"bit_generator": "PCG64", "state": {"state": -1, "inc": 3}, "has_uint32": 0,
                 "uinteger": 0}, None),
        ("seed", -1, "seed: -1 is out of range: expected at least 0"),
        ("seed", 2**32, "seed: 4294967296 is out of range: expected at most 4294967295"),
    ],
)  # fmt: skip
def test_a_checkpoint_meta_wrong_in_one_field_is_one_line_naming_it(tmp_path, key, value, message):
    expected = (
        f"{BAD}: {message} (start a new run)"
        if message
        else "the checkpoint's random state is damaged: start a new run"
    )
    assert _checkpoint_with(tmp_path, _set(key, value)) == expected


def test_a_checkpoint_history_row_declares_every_objectives_best():
    from dse.objectives import OBJECTIVES

    assert {f"best_{o}" for o in OBJECTIVES} <= checkpoint.Row.__optional_keys__


def test_a_checkpoint_history_row_lacking_a_column_is_one_line_naming_it(tmp_path):
    def drop(meta: dict) -> None:
        del meta["history"][1]["best_memory"]

    assert _checkpoint_with(tmp_path, drop) == (
        "the checkpoint's history[1] lacks 'best_memory': start a new run"
    )


def test_a_checkpoint_of_nan_objectives_is_refused(tmp_path):
    nan = np.full((10, 3), np.nan)
    assert _checkpoint_with(tmp_path, F=nan) == (
        f"{BAD}: array 'F' holds a value that is not a finite number (start a new run)"
    )
    assert _checkpoint_with(tmp_path) == ""  # the same checkpoint untouched resumes


def test_app_writes_its_outputs(tmp_path):
    out = tmp_path / "run"
    r = dse("+net=alexnet", "algorithm.pop_size=40", "algorithm.n_gen=5", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    for name in (
        "pareto.csv",
        "history.csv",
        "convergence.png",
        "pareto.png",
        "summary.json",
        "best_latency/mapping.json",
        "best_memory/horizontal.json",
        "best_energy/mapping.md",
    ):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["generations"] == 5 and summary["evaluations"] == 200
    history = (out / "history.csv").read_text().splitlines()
    assert len(history) == 6 and history[0].startswith("generation,evaluations")
    columns = history[0].split(",")
    new = [int(row.split(",")[columns.index("new_offspring")]) for row in history[1:]]
    assert new == [40] * 5 and "refilled" in columns  # every generation new mappings only
    assert summary["stopped"] == "generations"
    mapping = json.loads((out / "best_latency" / "mapping.json").read_text())
    assert sum(len(v) for v in mapping.values()) >= 24  # every layer somewhere
    # the figures read back (panels of 4.2 x 3.4 in, 0.6 in for the title, 110 dpi). The
    # convergence: four panels a row (hypervolume, the best latency, memory and energy), the
    # run's curve (C0) in each. The front: three scatter panels over the parallel coordinates,
    # each objective's best in its own colour (C1-C3)
    convergence = pixels(out / "convergence.png")
    assert convergence.shape == (440, 1848, 3)  # (3.4 + 0.6) x 110 by 4 x 4.2 x 110
    curve = showing(convergence, "C0")
    assert [bool(curve[:, k * 462 : (k + 1) * 462].any()) for k in range(4)] == [True] * 4
    front = pixels(out / "pareto.png")
    assert front.shape == (814, 1386, 3)  # (2 x 3.4 + 0.6) x 110 by 3 x 4.2 x 110
    assert [bool(showing(front, f"C{k}").any()) for k in (1, 2, 3)] == [True] * 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no network given: add +net=NAME with NAME one of alexnet"),
        (
            ["+net=alexnet", "chromosome=fancy"],
            "unknown chromosome 'fancy': choose one of advanced",
        ),
        (["+net=alexnet", "platform=mars"], "unknown platform 'mars'"),
        (["+net=alexnet", "chromosome.splits=17"], "chromosome.splits=17 must be between 1 and"),
        (["+net=alexnet", "algorithm.pop_size=0"], "algorithm.pop_size=0"),
        (["+net=alexnet", "objectives=[speed]"], "unknown objective 'speed'"),
        (["+net=alexnet", "resume=/nonexistent"], "nothing to resume in /nonexistent"),
        (
            ["+net=alexnet", "algorithm.pop_size=abc"],
            "algorithm.pop_size takes a whole number, not 'abc'",
        ),
        (["+net=alexnet", "algorithm/mutation=gauss"], "unknown algorithm/mutation 'gauss'"),
        (["+net=alexnet", "algorithm.refill=retry"], "algorithm.refill='retry' is not one of"),
        (["+net=alexnet", "chromosome._target_=os.system"], "is not one of dse's classes"),
    ],
)
def test_bad_input_is_one_line(args, message, tmp_path):
    r = dse(*args, f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr


def test_network_without_splittable_layer_refused_for_hybrid(tmp_path):
    path = tmp_path / "relu.onnx"
    import onnx

    onnx.save(f.model([helper.make_node("Relu", ["x"], ["y"])], {"x": [4]}, ["y"]), path)
    r = dse("+net=onnx", f"net.path={path}", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2 and "use chromosome=vertical" in r.stderr
    ok = dse(
        "+net=onnx",
        f"net.path={path}",
        "chromosome=vertical",
        "algorithm.pop_size=8",
        "algorithm.n_gen=2",
        f"hydra.run.dir={tmp_path / 'run2'}",
    )
    assert ok.returncode == 0, ok.stderr


def test_run_where_nothing_fits_says_so_and_exits_non_zero(tmp_path):
    out = tmp_path / "run"
    r = dse(
        "+net=alexnet",
        "platform.resources.cpu.memory_mb=50",
        "platform.resources.gpu.memory_mb=50",
        "algorithm.pop_size=20",
        "algorithm.n_gen=2",
        f"hydra.run.dir={out}",
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no mapping fits in memory"), r.stderr
    assert "of its 50 MB" in lines[0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["feasible"] is False and summary["feasible_points"] == 0
    assert "INFEASIBLE" in (out / "best_latency" / "mapping.md").read_text()


def test_operator_groups_build_the_operators_they_name():
    """algorithm/crossover=uniform and algorithm/mutation=random, composed as the CLI composes
    them, give operators that act as named: each child gene comes from the parent in its place
    (the two children complementary, both parents contributing), and each mutated vector differs
    from its parent in at least one gene, inside the bounds."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from pymoo.core.problem import Problem

    from dse import config
    from dse.paths import CONF_DIR

    config.register()
    overrides = ["+net=alexnet", "algorithm/crossover=uniform", "algorithm/mutation=random"]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        algorithm = OmegaConf.to_object(compose("config", overrides=overrides).algorithm)
    n_var, rng = 40, np.random.default_rng(0)
    problem = Problem(n_var=n_var, xl=np.zeros(n_var), xu=np.full(n_var, 5.0))

    parents = rng.integers(0, 6, (2, 100, n_var)).astype(float)
    children = algorithm.crossover.build()._do(problem, parents, random_state=rng)
    from_first = children[0] == parents[0]
    assert np.all(from_first | (children[0] == parents[1]))
    assert np.all(np.where(from_first, children[1] == parents[1], children[1] == parents[0]))
    differ = parents[0] != parents[1]
    assert 0.4 < from_first[differ].mean() < 0.6  # a fair coin per gene

    X = rng.integers(0, 6, (500, n_var)).astype(float)
    mutated = algorithm.mutation.build()._do(problem, X, random_state=rng)
    assert np.all((mutated != X).sum(axis=1) >= 1)
    assert np.all((mutated >= 0) & (mutated <= 5) & (mutated == np.round(mutated)))
    assert np.unique(mutated[mutated != X]).size == 6  # every value reachable


def test_multirun_job_failing_does_not_stop_the_others(tmp_path):
    r = run_module(
        "dse",
        "--multirun",
        "progress=false",
        "+net=alexnet",
        "chromosome=advanced",
        "chromosome.splits=17,2",  # 17 > 16 devices: job 0 fails when it builds the encoding
        "algorithm.pop_size=10",
        "algorithm.n_gen=2",
        f"hydra.sweep.dir={tmp_path}",
    )
    assert r.returncode == 2
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "job 0" in errors[0] and "chromosome.splits=17" in errors[0]
    assert not (tmp_path / "0").exists()  # the failed job left no directory
    assert json.loads((tmp_path / "1" / "summary.json").read_text())["generations"] == 2


def test_crowding_distance_is_pymoos():
    from pymoo.operators.survival.rank_and_crowding.metrics import get_crowding_function

    rng = np.random.default_rng(3)
    pymoo_cd = get_crowding_function("cd")
    for n in (1, 2, 3, 10, 200):
        F = rng.integers(0, 5, size=(n, 3)).astype(float)  # ties and equal columns
        F[:, 2] = 1.0 if n % 2 else F[:, 2]
        assert np.array_equal(search.crowding_distance(F), pymoo_cd.do(F), equal_nan=True)


@pytest.mark.parametrize("spatial", [False, True])
def test_pymoos_operators_breed_from_the_problem_as_from_a_pymoo_problem(spatial):
    """MappingProblem is a plain class (no pymoo algorithm drives it): what pymoo's operators
    read of it (n_var, xl, xu) is what pymoo's own Problem holds for the same encoding, so each
    operator a config can name breeds the same offspring from the same draws with either."""
    from pymoo.core.problem import Problem

    from dse.config import CROSSOVERS, MUTATIONS

    problem = small_problem(spatial=spatial)
    chrom = problem.chromosome
    theirs = Problem(
        n_var=chrom.n_genes, n_obj=3, n_ieq_constr=1, xl=chrom.lower, xu=chrom.upper, vtype=int
    )
    assert problem.n_var == theirs.n_var == chrom.n_genes
    for ours_bound, their_bound in ((problem.xl, theirs.xl), (problem.xu, theirs.xu)):
        assert ours_bound.dtype == their_bound.dtype == np.float64
        assert np.array_equal(ours_bound, their_bound)
    X = chrom.sample(200, np.random.default_rng(7)).astype(np.float64)
    parents = X.reshape(2, 100, chrom.n_genes)
    for name, op in [(n, c.build()) for n, c in CROSSOVERS.items()]:
        got = op._do(problem, parents.copy(), random_state=np.random.default_rng(1))
        want = op._do(theirs, parents.copy(), random_state=np.random.default_rng(1))
        assert np.array_equal(got, want), name
        assert not np.array_equal(got, parents), name
    for name, op in [(n, m.build()) for n, m in MUTATIONS.items()]:
        got = op._do(problem, X.copy(), random_state=np.random.default_rng(2))
        want = op._do(theirs, X.copy(), random_state=np.random.default_rng(2))
        assert np.array_equal(got, want), name
        assert not np.array_equal(got, X), name


@pytest.mark.parametrize("seed", range(4))
def test_compiled_sbx_and_pm_are_pymoos(seed):
    """The compiled operators draw what pymoo draws and give its offspring exactly: parents
    equal in some genes, genes with equal bounds, non-default parameters."""
    from types import SimpleNamespace

    from pymoo.operators.crossover.sbx import SBX
    from pymoo.operators.mutation.pm import PM

    from dse.search import operators

    rng = np.random.default_rng(seed)
    n_var = 13
    xl = rng.integers(0, 2, n_var).astype(float)
    xu = xl + rng.integers(0, 9, n_var)  # some genes with xl == xu
    problem = SimpleNamespace(xl=xl, xu=xu, n_var=n_var)
    X = np.stack([xl + np.floor(rng.random((200, n_var)) * (xu - xl + 1)) for _ in range(2)])
    X[1, :20] = X[0, :20]  # identical parents are not crossed
    for cx in (SBX(prob=0.9, eta=15.0), SBX(prob_var=0.8, eta=4.0, prob_exch=0.5)):
        assert operators.fast_path(cx)
        want = cx._do(problem, X.copy(), random_state=np.random.default_rng(seed + 10))
        got = operators.sbx(cx, X.copy(), xl, xu, np.random.default_rng(seed + 10))
        # equal here; numpy may take another pow (SVML) on AVX-512 machines: an ulp apart
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    for mut in (PM(prob=0.9, eta=20.0), PM(eta=3.0, prob_var=0.4)):
        assert operators.fast_path(mut)
        want = mut._do(problem, X[0].copy(), random_state=np.random.default_rng(seed + 20))
        got = operators.pm(mut, X[0].copy(), xl, xu, n_var, np.random.default_rng(seed + 20))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        assert not np.array_equal(got, X[0])
    assert not operators.fast_path(PM(at_least_once=True))
    assert not operators.fast_path(SBX(n_offsprings=1))


def test_plot_helpers_write_the_figures_and_failures_are_raised(tmp_path):
    """Figures drawn by helper processes (one drawing both, or one each) are complete PNGs; a
    helper that died draws nothing and its figure is drawn in the run's process instead; a
    figure that cannot be drawn is an error of the run, not a silent gap."""
    from dse.results import plot_worker

    history = [
        {"generation": g, "hypervolume": g / 10, "best_latency": 10.0 - g, "best_memory": 5.0}
        for g in range(1, 6)
    ]
    front = np.array([[1.0, 4.0], [2.0, 3.0], [3.0, 1.0]])
    names = ["latency", "memory"]
    for helpers, kill in ((1, False), (2, True)):
        out = tmp_path / f"{helpers}"
        plot_worker.prestart(helpers)
        assert len(plot_worker._idle) == helpers
        if kill:
            plot_worker._idle[0].kill()
            plot_worker._idle[0].wait()
        plot_worker.draw(
            [
                ("plot_convergence", (out / "c.png", {"run": history}, names, "t")),
                ("plot_pareto", (out / "p.png", front, np.ones(3, bool), names, "t")),
            ]
        )
        assert not plot_worker._idle
        for name in ("c.png", "p.png"):
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert not list(out.glob(".*.tmp"))
    nothing = (tmp_path / "x.png", np.zeros((0, 2)), np.zeros(0, bool), names, "t")
    plot_worker.prestart(1)
    with pytest.raises(ValueError):  # no point to mark as best: fails in the helper and here
        plot_worker.draw([("plot_pareto", nothing)])
    assert not (tmp_path / "x.png").exists()


def test_mapping_keys_equal_exactly_when_mappings_are():
    """Every gene vector of the small problem: two get one key exactly when their whole-number
    mappings (devices and channels) are equal, compared as rows by numpy."""
    chrom = small_problem("naive").chromosome
    upper = chrom.upper.tolist()
    genes = np.array(list(itertools.product(*[range(u + 1) for u in upper])), dtype=np.int64)
    mappings = chrom.decode(genes)
    rows = np.concatenate([mappings.device, mappings.sizes.reshape(len(genes), -1)], axis=1)
    _, by_row = np.unique(rows, axis=0, return_inverse=True)
    _, by_key = np.unique(mappings.keys(), return_inverse=True)
    assert len(set(zip(by_row.tolist(), by_key.tolist(), strict=True))) == by_row.max() + 1
    assert by_key.max() == by_row.max()


def test_spare_cores_counts_what_else_runs_now(tmp_path, monkeypatch):
    from dse import host

    loadavg = tmp_path / "loadavg"
    monkeypatch.setattr(host, "PROC_LOADAVG", str(loadavg))
    monkeypatch.setattr(host.os, "cpu_count", lambda: 4)
    loadavg.write_text("0.90 0.50 0.20 1/345 6789\n")  # this process alone: 3 cores spare
    assert host.spare_cores() == 3
    loadavg.write_text("3.10 2.00 1.00 3/345 6789\n")  # two more running
    assert host.spare_cores() == 1
    loadavg.write_text("9.00 9.00 9.00 9/345 6789\n")
    assert host.spare_cores() == 0
    loadavg.write_text("garbled\n")  # unreadable: the 1-minute load average instead
    monkeypatch.setattr(host.os, "getloadavg", lambda: (2.5, 0.0, 0.0))
    assert host.spare_cores() == 0.5


def _jetson(weight_terms: bool) -> tuple:
    """The default platform (16 devices, cpu and gpu kinds, its fitted coefficients); with
    ``weight_terms``, resident weights and weight-class memory terms for loading and running."""
    import dataclasses

    import yaml

    from dse.paths import CONF_DIR
    from dse.platform import load_platform
    from models_analytical.coefficients import load_coefficients

    cfg = yaml.safe_load((CONF_DIR / "platform" / "jetson_xavier_nx_x8.yaml").read_text())
    plat = load_platform(cfg)
    coeff = load_coefficients(CONF_DIR / "platform" / cfg["coefficients"])
    if weight_terms:
        plat = dataclasses.replace(plat, weights="resident")
        types = {
            k: dataclasses.replace(
                c,
                memory=dataclasses.replace(
                    c.memory,
                    weights={"conv": 2.0, "other": 1.5},
                    loading={"conv": 2.5 + i, "other": 1.25},
                ),
            )
            for i, (k, c) in enumerate(coeff.types.items())
        }
        coeff = dataclasses.replace(coeff, types=types)
    return plat, coeff


@pytest.mark.parametrize("weight_terms", [False, True])
@pytest.mark.parametrize("shares", ["equal", "speed"])
@pytest.mark.parametrize("name, splits", [("naive", None), ("advanced", 3)])
@pytest.mark.parametrize("net", ["alexnet", "googlenet"])
def test_a_batch_gives_each_mappings_figures_whatever_its_threads(
    net, name, splits, shares, weight_terms
):
    """A batch of 300 (run on the thread count the tuner picks, in chunks with per-thread
    scratch) gives every figure of each mapping bit for bit as that mapping alone on one
    thread; the weights each device holds by class are those of the dense shares (einsum)."""
    import dataclasses

    from chromosomes import CHROMOSOMES
    from dse.net import load_net

    g = load_net({"name": net}).graph
    plat, coeff = _jetson(weight_terms)
    model = AnalyticalModel(g, plat, coeff)
    assert model._by_class == weight_terms and bool(model._mem_load.any()) == weight_terms
    speed = model.device_speed() if shares == "speed" else None
    chrom = CHROMOSOMES[name](g, len(plat), splits=splits, speed=speed)
    rng = np.random.default_rng(11)
    genes = chrom.sample(300, rng)
    genes[0], genes[1] = chrom.upper, 0
    genes[2:40] = rng.integers(0, 3, size=(38, chrom.n_genes))  # ties, repeats, few devices
    mappings = chrom.decode(genes)
    assert (mappings.sizes > 0).sum(axis=2).max() > 1  # some layers are split
    batch = model.evaluate(mappings)
    for p in (0, 1, 5, 37, 299):
        alone = model.evaluate(mappings.take(p))
        for fld in dataclasses.fields(batch):
            a, b = getattr(alone, fld.name), getattr(batch, fld.name)
            b = b if fld.name == "capacity_mb" else b[p : p + 1]
            assert a.dtype == b.dtype and np.array_equal(a, b), fld.name
    share, _ = mappings.dense(g)
    want = np.einsum("pld,lc->pdc", share, model._w_class)
    assert np.allclose(model.memory_terms(mappings)["weights_mb"], want, rtol=1e-12, atol=0)
    if weight_terms:  # the weight terms shape the memory figure
        plain = AnalyticalModel(g, plat, _jetson(False)[1])
        assert not np.array_equal(plain.evaluate(mappings).memory_mb, batch.memory_mb)


@pytest.mark.parametrize("structured", [False, True])
def test_structured_seeds_join_the_first_population_when_asked(structured):
    """``algorithm.seed_structured``: after the one-device mappings, the first population holds
    every splittable layer over the fastest 2 and 3 devices (chromosomes.seeds)."""
    from chromosomes.seeds import structured_seeds

    problem = small_problem()
    chrom = problem.chromosome
    x = search.initial_population(problem, settings(seed_structured=structured), 0)
    hosts = [d.host for d in problem.model.platform.devices]
    seeds = structured_seeds(chrom, problem.model.device_speed(), hosts)
    assert len(seeds) == 2
    for d in range(3):
        assert (x[d] == chrom.single_device(d)).all()
    assert (x[3:5] == seeds).all() == structured
