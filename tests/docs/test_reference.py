"""The configuration reference (docs/reference/config.md) is what its generator gives now, and
what it says a run starts from is what Hydra composes."""

from __future__ import annotations

import re

import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from dse import config_reference as ref
from dse.config import register
from dse.paths import CONF_DIR


def page() -> str:
    return (ref.ROOT / ref.PAGE).read_text()


def test_the_committed_page_is_the_generated_one():
    assert page() == ref.render(), (
        "docs/reference/config.md is out of date: run python -m dse.config_reference --write"
    )


def test_every_note_names_a_key_the_source_does_not_comment():
    assert ref.check_notes(ref.schemas()) == []


def test_every_key_has_a_meaning():
    blank = [f"{c.__name__}.{k.name}" for c in ref.schemas() for k in ref.keys(c) if not k.meaning]
    assert blank == [], "say what these keys mean: a comment beside them, or NOTES"


def rows(text: str) -> dict[str, list[str]]:
    """Key -> its table cells, for every `| `key` | ... |` row (the first table naming it)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = re.match(r"^\| `([^`]+)` \|(.*)\|$", line)
        if m and m.group(1) not in out:
            out[m.group(1)] = [c.strip() for c in re.split(r"(?<!\\)\|", m.group(2))]
    return out


def leaves(node: object, prefix: str = "") -> dict[str, object]:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            out.update(leaves(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): node}


def test_the_defaults_are_what_hydra_composes():
    """Independently of the generator's reading of the dataclasses: compose the run a user gets
    from `python -m dse +net=vgg16` and find each value on the page, as the key's default or as
    what the group option the run starts from sets."""
    text = page()
    table = rows(text)
    register()  # the structured configs, as the entry points register them before composing
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=["+net=vgg16"])
    values = leaves(OmegaConf.to_container(cfg.copy(), resolve=False))
    checked = 0
    for key, value in values.items():
        if key.startswith("platform.") or key.endswith(("._target_", ".name")):
            continue  # a platform file's keys; Hydra's class names and the options' names
        shown = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
        shown = shown.removesuffix("...").strip()
        cells = table.get(key)
        assert cells is not None, f"{key} is not on the page"
        default = cells[1]
        if default == f"`{shown}`":
            checked += 1
            continue
        # set by the option the group starts from (chromosome=advanced sets splits=2)
        group, name = key.rsplit(".", 1)
        option = cfg
        for part in group.split("."):
            option = option[part]
        chosen = option.get("name")
        found = rows(text).get(str(chosen))
        assert found is not None and f"`{name}={shown}`" in found[0], (
            f"{key}: composed {shown}, the page says {default} and option {chosen} does not set it"
        )
        checked += 1
    assert checked >= 25
