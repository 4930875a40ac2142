"""What a new user meets first on the command line: hints for the likeliest mistakes (one line,
exit 2, naming the fix), ``--help`` (a usage line, a sentence saying what the command does, its
own groups and keys, its page of the manual: no config dump) and ``--version``."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from importlib import metadata

import pytest
from omegaconf import OmegaConf

from dse import config
from dse.cli import did_you_mean
from dse.paths import CONF_DIR
from dse.usage import GROUPS, HELP, module_of
from tests.helpers.cli import ROOT
from tests.helpers.hostile import assert_one_line, run_all
from tests.helpers.markdown import anchors

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
    "list without brackets": (
        "dse.inspect",
        ["+net=alexnet", "net.input_shape=1,3,640,640"],
        ("for one list value write 'net.input_shape=[1,3,640,640]'",),
    ),
    "list in parentheses": (
        "dse.inspect",
        ["+net=alexnet", "net.input_shape=(1,3,640,640)"],
        ("write a list in brackets: 'net.input_shape=[1,3,640,640]'",),
    ),
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


#: A list written as a sweep or a tuple: the form to write.
LISTS = [
    (["net.input_shape=1,3,640,640"], "net.input_shape=1,3,640,640: a comma list sweeps its "
     "values (with --multirun); for one list value write 'net.input_shape=[1,3,640,640]'"),
    (["+net=onnx", "net.input_shape=(1,3,640,640)"], "net.input_shape=(1,3,640,640): write "
     "a list in brackets: 'net.input_shape=[1,3,640,640]'"),
    (["+net=alexnet", "seed=range(1,3)"], "seed=range(1,3) sweeps several values: add "
     "--multirun"),
]  # fmt: skip
#: A value of the wrong type: the type to write.
WRONG_TYPES = [
    (["+net=alexnet", "seed=abc"], "seed=abc: seed takes a whole number, not 'abc'"),
    (["+net=alexnet", "seed=1.5"], "seed=1.5: seed takes a whole number, not '1.5'"),
    (["+net=alexnet", "algorithm.n_gen=nan"], "algorithm.n_gen=nan: algorithm.n_gen takes a "
     "whole number, not 'nan'"),
    (["+net=alexnet", "net.measure_mb=lots"], "net.measure_mb=lots: net.measure_mb takes a "
     "number, not 'lots'"),
    (["+net=alexnet", "progress=maybe"], "progress=maybe: progress takes true or false, not "
     "'maybe'"),
    (["+net=alexnet", "seed=[1,2]"], "seed=[1,2]: seed takes a whole number, not '[1, 2]'"),
]  # fmt: skip
#: Hydra's own settings, wrong: one line before Hydra starts.
HYDRA_SETTINGS = [
    (["-m", "+net=alexnet", "hydra/sweeper=dse_optuna", "hydra.sweeper.n_trials=abc"],
     "hydra.sweeper.n_trials=abc: hydra.sweeper.n_trials takes a whole number, not 'abc'"),
    (["-m", "+net=alexnet", "hydra/sweeper=dse_optuna", "hydra/sweeper/sampler=nope"],
     "In 'hydra/sweeper/dse_optuna': Could not find 'hydra/sweeper/sampler/nope': choose "
     "one of bruteforce, nsga2, nsga3, nsgaii, qmc, random, tpe"),
    (["-m", "+net=alexnet", "hydra.sweeper.n_trials=3"], "hydra.sweeper.n_trials=3: "
     "Hydra's basic sweeper has no key n_trials: add hydra/sweeper=dse_optuna"),
    (["+net=alexnet", "hydra.job.chdir=maybe"], "hydra.job.chdir=maybe: hydra.job.chdir "
     "takes true or false, not 'maybe'"),
]  # fmt: skip


@pytest.mark.parametrize("args, message", LISTS + WRONG_TYPES + HYDRA_SETTINGS)
def test_a_mistaken_override_is_one_line_naming_what_to_write(args, message):
    from dse.cli import check_overrides
    from dse.errors import DseError

    config.register()
    with pytest.raises(DseError) as caught:
        check_overrides(args, "config")
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "value", ["interval(4,8)", "tag(int,interval(4,8))", "tag(log,interval(4,8))"]
)
def test_an_interval_for_hydras_basic_sweeper_is_one_line_naming_dses(value):
    """Hydra's basic sweeper (the default of --multirun) runs lists, not intervals: one line
    before any job, naming the sweeper that samples them and the forms the basic one runs."""
    from dse.cli import check_overrides
    from dse.errors import DseError

    config.register()
    with pytest.raises(DseError) as caught:
        check_overrides(["-m", "+net=alexnet", f"algorithm.pop_size={value}"], "config")
    assert str(caught.value) == (
        f"algorithm.pop_size={value}: Hydra's basic sweeper runs lists, not intervals: add "
        "hydra/sweeper=dse_optuna hydra.sweeper.n_trials=N to sample it, or give "
        "range(start,stop,step) or choices"
    )
    check_overrides(
        ["-m", "+net=alexnet", "hydra/sweeper=dse_optuna", f"algorithm.pop_size={value}"],
        "config",
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["+net="], "+net= names no net: choose one of alexnet, densenet121, googlenet, "
         "mobilenetv2, onnx, resnet50, vgg16"),
        (["+net=alexnet", "platform="], "platform= names no platform: choose one of "
         "edge3_ethernet, edge3_wifi, jetson_xavier_nx_x8, localhost, xavier_cpu_only_x8"),
    ],
)  # fmt: skip
def test_a_group_given_no_option_is_one_line_with_the_options(args, message):
    """An option left empty (an unset shell variable: platform=$P) names the options."""
    from dse.cli import check_overrides
    from dse.errors import DseError

    config.register()
    with pytest.raises(DseError) as caught:
        check_overrides(args, "config")
    assert str(caught.value) == message


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
    groups = cluster[cluster.index("Config groups (group=option):") + 1 :]
    assert groups[0].startswith("  platform: ") and groups[1] == ""  # the cluster's only group
    version = pages["version"].stdout.strip()
    assert version.startswith(f"dse {metadata.version('dse')} (Python ")


# --- every entry point's help: a sentence, its own options, its manual page ---------------------

#: The schema whose keys every Hydra entry point shares (the groups and the search's keys).
SHARED = {f.name for f in dataclasses.fields(config.BaseConfig)}
#: The config groups each Hydra entry point reads, from reading its code: inspect loads a
#: network only, evaluate and deploy a network and a platform (no encoding, no search),
#: calibrate and cluster a platform only; the search and fidelity's short search all of them.
READS = {
    "config": GROUPS,
    "inspect": ("net",),
    "evaluate": ("net", "platform"),
    "deploy": ("net", "platform"),
    "calibrate": ("platform",),
    "fidelity": GROUPS,
    "cluster": ("platform",),
}


def documented_commands() -> set[str]:
    """The ``python -m MODULE`` commands of the manual's entry-point table."""
    text = (ROOT / "docs" / "reference" / "entry-points.md").read_text()
    return set(re.findall(r"^\| `python -m ([\w.]+)", text, flags=re.M))


def is_a_sentence(text: str) -> bool:
    """Starts with a capital letter and a verb in the third person ("Prints ...", "Builds ..."),
    holds at least eight words and ends with a full stop."""
    words = text.split()
    return len(words) >= 8 and words[0][0].isupper() and words[0].endswith("s") and text[-1] == "."


def test_every_documented_entry_point_has_a_help_and_every_help_a_page():
    assert {module_of(name) for name in HELP} == documented_commands()
    for name, h in HELP.items():
        assert is_a_sentence(h.does), (name, h.does)
        path, _, anchor = h.page.partition("#")
        assert path.startswith("docs/") and (ROOT / path).is_file(), (name, h.page)
        assert not anchor or anchor in anchors(ROOT / path), (name, h.page)


def test_each_help_says_what_it_does_lists_its_own_options_and_ends_with_its_page():
    pages = run_all({name: (module_of(name), ["--help"]) for name in HELP})
    for name, r in pages.items():
        h = HELP[name]
        assert r.returncode == 0 and r.stderr == "", (name, r.stderr)
        lines = r.stdout.splitlines()
        assert lines[0].startswith(f"usage: python -m {module_of(name)} "), (name, lines[0])
        # the first paragraph after the usage line is the sentence, whole
        paragraph = lines[2 : lines.index("", 2)]
        assert " ".join(paragraph) == " ".join(h.does.split()), (name, paragraph)
        assert lines[-1] == f"Manual: {h.page}", (name, lines[-1])
        if not h.schema:  # argparse lists its own options
            continue
        start = next(i for i, ln in enumerate(lines) if ln.startswith("Config groups"))
        listed = [ln.split(":")[0].strip() for ln in lines[start + 1 : lines.index("", start)]]
        assert listed == list(READS[name]), (name, listed)
        composed = OmegaConf.load(CONF_DIR / f"{name}.yaml").defaults
        if "config" in composed:  # the main tree's groups, through conf/config.yaml
            composed = [*OmegaConf.load(CONF_DIR / "config.yaml").defaults, *composed]
        chosen = {next(iter(d)) for d in composed if isinstance(d, Mapping)} | {"net"}
        assert set(h.groups) <= chosen | {"algorithm/crossover", "algorithm/mutation"}, name
        start = lines.index("Keys (key=value; the defaults shown):")
        pairs = " ".join(lines[start + 1 : lines.index("", start)]).split()
        keys = [p.split("=")[0].split(".")[0] for p in pairs]
        assert list(dict.fromkeys(keys)) == list(h.keys), (name, keys)
        schema = {f.name for f in dataclasses.fields(getattr(config, h.schema))}
        assert set(h.keys) <= schema, (name, set(h.keys) - schema)
        # a key the entry point's schema adds is its own: its help lists it
        own = schema - SHARED - set(h.groups)
        assert own <= set(h.keys), (name, own - set(h.keys))


def test_a_help_without_its_sentence_or_with_a_wrong_page_fails(monkeypatch):
    """The checks above catch a fragment for a sentence and a page that is not there."""
    assert not is_a_sentence("phase two.")
    assert not is_a_sentence("an emulated cluster.")
    assert is_a_sentence(HELP["deploy"].does)
    wrong = dataclasses.replace(HELP["deploy"], page="docs/guides/deploy.md")
    monkeypatch.setitem(HELP, "deploy", wrong)
    with pytest.raises(AssertionError, match="deploy.md"):
        test_every_documented_entry_point_has_a_help_and_every_help_a_page()
    anchored = dataclasses.replace(HELP["deploy"], page="docs/guides/deploying.md#no-such")
    monkeypatch.setitem(HELP, "deploy", anchored)
    with pytest.raises(AssertionError, match="no-such"):
        test_every_documented_entry_point_has_a_help_and_every_help_a_page()
