"""What a new user meets first on the command line: hints for the likeliest mistakes (one line,
exit 2, naming the fix), ``--help`` (a usage line, the commands, the groups: no config dump)
and ``--version``."""

from __future__ import annotations

from importlib import metadata

from dse.cli import did_you_mean
from tests.helpers.hostile import assert_one_line, run_all

#: case -> (module, arguments, words its one line holds)
MISTAKES = {
    "net without +": ("dse", ["net=vgg16"], ("net=vgg16", "did you mean +net=vgg16?")),
    "net sweep without +": (
        "dse",
        ["--multirun", "net=vgg16,alexnet"],
        ("did you mean +net=vgg16,alexnet?",),
    ),
    "popsize": ("dse", ["+net=alexnet", "popsize=3"], ("did you mean algorithm.pop_size?",)),
    "algorithm.popsize": (
        "dse",
        ["+net=alexnet", "algorithm.popsize=3"],
        ("no key algorithm.popsize", "did you mean algorithm.pop_size?"),
    ),
    "+popsize": ("dse", ["+net=alexnet", "+popsize=3"], ("did you mean algorithm.pop_size?",)),
    "net.pth": ("dse", ["+net=alexnet", "net.pth=x.onnx"], ("did you mean net.path?",)),
    "group by path": (
        "dse",
        ["+net=alexnet", "algorithm/crosover=sbx"],
        ("no group algorithm/crosover", "did you mean algorithm/crossover?"),
    ),
    "option": (
        "dse",
        ["+net=alexnet", "chromosome=advancd"],
        ("unknown chromosome 'advancd'", "did you mean chromosome=advanced?"),
    ),
    "zoo name": ("dse", ["+net=vgg"], ("did you mean +net=vgg16?",)),
    "+ on a key": ("dse", ["+net=alexnet", "+seed=3"], ("drop the plus: seed=3",)),
    "+ on a group": ("dse", ["+net=alexnet", "+chromosome=naive"], ("drop the plus",)),
    "no near key": ("dse", ["+net=alexnet", "xyzzy=1"], ("no key xyzzy", "--cfg job")),
    "evaluate": ("dse.evaluate", ["net=alexnet"], ("did you mean +net=alexnet?",)),
}


def test_likeliest_mistakes_get_one_line_naming_the_fix():
    results = run_all({k: (m, a) for k, (m, a, _) in MISTAKES.items()})
    failed = []
    for case, r in results.items():
        try:
            assert_one_line(r, *MISTAKES[case][2])
        except AssertionError as exc:
            failed.append(f"case '{case}': {exc}")
    assert not failed, "\n".join(failed)


def test_did_you_mean_by_whole_key_or_by_its_last_part():
    keys = ["seed", "algorithm", "algorithm.pop_size", "algorithm.n_gen", "phase2.enabled"]
    assert did_you_mean("popsize", keys) == "algorithm.pop_size"
    assert did_you_mean("algorithm.popsize", keys) == "algorithm.pop_size"
    assert did_you_mean("algorithm.ngen", keys) == "algorithm.n_gen"
    assert did_you_mean("phase2.enable", keys) == "phase2.enabled"
    assert did_you_mean("xyzzy", keys) is None


def test_help_starts_with_a_usage_line_then_the_commands_and_groups():
    pages = run_all(
        {
            "dse": ("dse", ["--help"]),
            "-h": ("dse", ["-h"]),
            "deploy": ("dse.deploy", ["--help"]),
            "cluster": ("dse.cluster", ["--help"]),
            "version": ("dse", ["--version"]),
        }
    )
    for r in pages.values():
        assert r.returncode == 0 and r.stderr == "", r.stderr
    page = pages["dse"].stdout
    lines = page.splitlines()
    assert lines[0] == "usage: python -m dse +net=NAME chromosome=advanced"
    assert pages["-h"].stdout == page
    for command in (
        "python -m dse +net=vgg16 chromosome=advanced",
        "python -m dse.evaluate",
        "python -m dse.deploy",
        "python -m dse.calibrate",
        "python -m dse.fidelity",
        "hydra/sweeper=dse_optuna",
    ):
        assert sum(command in line for line in lines) >= 1, command
    assert "  chromosome: advanced, naive, vertical" in lines
    assert "  algorithm: nsga2" in lines  # its own groups are not options
    assert len(lines) < 40 and "== Config ==" not in page  # no dump of the config
    assert pages["deploy"].stdout.splitlines()[0].startswith("usage: python -m dse.deploy ")
    cluster = pages["cluster"].stdout.splitlines()
    assert cluster[0].startswith("usage: python -m dse.cluster up|status|check|down")
    assert [ln for ln in cluster if ln.startswith("  ")] == [
        ln for ln in cluster if ln.startswith("  platform: ")
    ]
    version = pages["version"].stdout.strip()
    assert version.startswith(f"dse {metadata.version('dse')} (Python ")
