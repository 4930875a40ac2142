"""`python -m dse.cluster up|status|check|down|set platform=NAME [name=CLUSTER]`: an emulated
cluster.

``up`` builds it and checks it, ``status`` reprints it and its last check, ``check`` measures it
again, ``down`` removes it. ``set`` changes a running cluster's port rate (``board=B
rate_mbit=R``; a shared medium's: ``rate_mbit=R`` alone) or a device's CPU share (``device=D
share=S``) while ranks run on it (:mod:`dse.cluster.live`). ``exec BOARD
[name=CLUSTER|platform=NAME] -- COMMAND...`` runs COMMAND on a board of a running cluster over
ssh with the cluster's key and known hosts (as ``ssh BOARD COMMAND...`` on a real board: the
board's shell reads the words; without a COMMAND, a login shell), and exits with its status.
"""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports: a signal now ends the process cleanly
    from dse.cli import stop_early_on_signals

    stop_early_on_signals()

import json
import os
import sys
from collections.abc import Mapping
from typing import Any, cast

import hydra
from omegaconf import DictConfig, OmegaConf

from dse.cli import fail, guarded, output_format, run
from dse.cluster import hosts
from dse.cluster.build import clusters, down, leftovers, up
from dse.cluster.check import CheckSettings, check, format_check
from dse.cluster.live import set_rate, set_share
from dse.cluster.net import namespaces
from dse.cluster.runs import launcher_for
from dse.cluster.spec import ClusterSpec, describe_shares, parse_spec
from dse.cluster.state import State, load, load_check, save_check
from dse.config import ClusterConfig
from dse.errors import DseError
from dse.paths import CONF_DIR
from dse.platform import load_platform
from dse.records import read, to_json
from dse.runtime.launch.preflight import Preflight, format_preflight, memory_by_host, preflight
from dse.runtime.launch.ship import Remote
from dse.usage import HELP

ACTIONS = ("up", "status", "check", "down", "set", "exec")
#: The keys of ``set`` (no other action takes them).
SET_KEYS = ("board", "rate_mbit", "device", "share")
USAGE = f"usage: {HELP['cluster'].command}"


def platform_cfg(cfg: DictConfig) -> Mapping | None:
    """The platform's config (conf/platform/NAME.yaml) as plain containers, if one is given."""
    raw = cfg.get("platform")
    if raw is None:
        return None
    return dict(cast("dict[str, Any]", OmegaConf.to_container(raw, resolve=True)))  # a mapping


def cluster_name(cfg: DictConfig) -> str | None:
    if cfg.get("name"):
        return str(cfg.name)
    raw = platform_cfg(cfg)
    return str(raw["name"]) if isinstance(raw, Mapping) and raw.get("name") else None


def describe(state: State) -> str:
    spec: ClusterSpec = state.spec
    port = "ports" if spec.network == "switched" else "one shared medium"
    shares = describe_shares(spec.cpu_share, spec.cfs_period_us)
    lines = [
        f"cluster {spec.name} is up: {len(spec.boards)} boards on {state.subnet} ({spec.network}, "
        f"{port} of {spec.rate_mbit:g} Mbit/s; {shares}), each board a host reached by ssh "
        f"(ssh -F {hosts.ssh_config(state.names)} BOARD, or python -m dse.cluster exec BOARD)"
    ]
    for b in spec.boards:
        devices = ", ".join(
            f"{d.name} (share {d.share:g}, {d.memory_mb:g} MB)" for d in spec.devices_of(b.name)
        )
        rate = f"{b.rate_mbit:g} Mbit/s port" if spec.network == "switched" else "on the medium"
        cpus = ",".join(map(str, b.cpus))
        lines.append(
            f"  {b.name}: {state.address(b.name)}, cpus {cpus}, {rate}, {b.disk_mb} MB disk; "
            f"{devices}"
        )
    return "\n".join(lines)


def settings(cfg: ClusterConfig) -> CheckSettings:
    return CheckSettings(
        size_mb=cfg.check_mb,
        reps=cfg.check_reps,
        rounds=cfg.check_rounds,
        chunk_ms=cfg.check_chunk_ms,
        tolerance=cfg.tolerance,
    )


def do_up(cfg: DictConfig, conf: ClusterConfig, fmt: str) -> dict:
    raw = platform_cfg(cfg)
    if raw is None:
        raise DseError("no platform given: add platform=NAME (conf/platform/NAME.yaml)")
    spec = parse_spec(raw, conf.name, conf.cfs_period_us, cpu_share=conf.cpu_share)
    state = up(spec)
    if fmt == "table":
        print(describe(state), flush=True)
    if not conf.check:
        return {"status": "ok", "state": state.as_dict()}
    return do_check(state, raw, conf, fmt)


def do_check(state: State, raw: Mapping | None, conf: ClusterConfig, fmt: str) -> dict:
    """Measure the running cluster, keep the result for `status`, print it; an error names the
    first link off its rate."""
    links = (raw or {}).get("links") or {}
    result = check(state, settings(conf), {k: dict(v) for k, v in links.items()})
    save_check(state.name, result)
    print(format_check(result) if fmt == "table" else json.dumps(result, indent=1))
    if result["errors"]:
        raise DseError(
            f"{result['errors'][0]} (the cluster stays up: `status` shows the check, `down` "
            "removes it)"
        )
    memory = memory_by_host((d.board, d.memory_mb) for d in state.spec.devices)
    ready = preflight(Remote(ssh=hosts.ssh_command(state.names)), memory)
    save_check(state.name, {**result, "hosts": to_json(ready)})  # `status` shows it too
    report_preflight(ready, fmt)
    return {"status": "ok", "check": result, "hosts": to_json(ready)}


def do_preflight(raw: Mapping, fmt: str) -> dict:
    """``check`` of a platform of real boards: the preflight of its hosts (one line per
    problem, exit 2 if any)."""
    launcher = launcher_for(raw)
    platform = load_platform(raw)
    memory = memory_by_host((d.host, d.memory_mb) for d in platform.devices)
    if launcher.remote is None:
        print(f"platform '{platform.name}': every host is this machine or shares its disk: "
              "nothing to check over ssh")  # fmt: skip
        return {"status": "ok"}
    result = preflight(launcher.remote, memory)
    report_preflight(result, fmt)
    return {"status": "ok", "hosts": to_json(result)}


def report_preflight(result: Preflight, fmt: str) -> None:
    print(format_preflight(result) if fmt == "table" else json.dumps(to_json(result), indent=1))
    if not result.ok:
        n = len(result.problems)
        raise DseError(f"{n} problem{'s' * (n > 1)} on the hosts: {result.problems[0].line()}")


def do_status(name: str | None, fmt: str) -> dict:
    if name is None:  # every cluster of which anything exists here
        found = {n: leftovers(n) for n in clusters()}
        if fmt == "json":
            print(json.dumps(found, indent=1))
        elif not found:
            print("no emulated cluster on this machine")
        for n, left in found.items() if fmt == "table" else ():
            more = ", ..." if len(left) > 3 else ""
            print(f"{n}: {len(left)} pieces ({', '.join(left[:3])}{more})")
        return {"status": "ok", "clusters": found}
    state = load(name)
    present = set(namespaces())
    missing = [b.name for b in state.spec.boards if state.names.board_ns(b.name) not in present]
    if missing:
        raise DseError(
            f"cluster {name} is broken: boards {', '.join(missing)} are gone: run down, then up"
        )
    result = load_check(name)
    if fmt == "json":
        print(json.dumps({"state": state.as_dict(), "check": result}, indent=1))
    else:
        print(describe(state))
        try:
            print(format_check(result) if result else "no self-check yet: run check")
            if result and "hosts" in result:
                print(format_preflight(read(Preflight, result["hosts"], "the last check")))
        except (KeyError, TypeError, ValueError, DseError):
            print("the last self-check was written by another version of dse: run check")
    return {"status": "ok"}


def do_set(name: str, conf: ClusterConfig) -> dict:
    """``set``: one change of a running cluster, then one line saying it (old -> new)."""
    rate, share = conf.rate_mbit is not None, conf.share is not None
    if rate == share or (rate and conf.device) or (share and conf.board):
        raise DseError(
            "set takes either rate_mbit=R (with board=B on a switched network) or device=D "
            "share=S: one change at a time"
        )
    old = load(name)
    if conf.rate_mbit is not None:
        new = set_rate(old, conf.board, conf.rate_mbit)
        if conf.board is None:
            what, before, after = "the medium", old.spec.rate_mbit, new.spec.rate_mbit
        else:
            what = f"{conf.board}'s port"
            before, after = (
                old.spec.board(conf.board).rate_mbit,
                new.spec.board(conf.board).rate_mbit,
            )
        print(f"cluster {name}: {what} {before:g} -> {after:g} Mbit/s")
    else:
        if conf.device is None:
            raise DseError("set share= needs the device: add device=NAME")
        assert conf.share is not None  # the one change asked for
        new = set_share(old, conf.device, conf.share)
        d = new.spec.device(conf.device)
        before = old.spec.device(conf.device).share
        print(f"cluster {name}: {d.name}'s share {before:g} -> {d.share:g} of {d.board}'s CPUs")
    return {"status": "ok", "state": new.as_dict()}


@hydra.main(config_path=str(CONF_DIR), config_name="cluster", version_base="1.3")
@guarded
def main(cfg: DictConfig) -> dict:
    fmt = output_format(cfg)
    conf = ClusterConfig(**{str(k): v for k, v in cfg.items() if k != "platform"})  # its checks
    given = [k for k in SET_KEYS if getattr(conf, k) is not None]
    if given and ACTION != "set":
        raise DseError(f"{given[0]}= is for set only: python -m dse.cluster set ... {given[0]}=...")
    if ACTION == "up":
        return do_up(cfg, conf, fmt)
    name = cluster_name(cfg)
    if ACTION == "status":
        return do_status(name, fmt)
    if name is None:
        raise DseError("which cluster? add platform=NAME or name=CLUSTER")
    if ACTION == "set":
        return do_set(name, conf)
    if ACTION == "check":
        raw = platform_cfg(cfg)
        if raw is not None and not raw.get("emulation"):
            return do_preflight(raw, fmt)
        return do_check(load(name), raw, conf, fmt)
    existed = down(name)
    print(f"cluster {name} removed" if existed else f"no cluster {name} here: nothing to remove")
    return {"status": "ok"}


def do_exec(argv: list[str]) -> None:
    """``exec BOARD [name=C|platform=P] [--] COMMAND...``: replaces this process with ssh."""
    words = list(argv)
    command = words[words.index("--") + 1 :] if "--" in words else []
    words = words[: words.index("--")] if "--" in words else words
    if not words:
        fail("exec needs a board: python -m dse.cluster exec BOARD -- COMMAND...")
    board, options = words[0], words[1:]
    named = [w.split("=", 1)[1] for w in options if w.startswith(("name=", "platform="))]
    others = [w for w in options if not w.startswith(("name=", "platform="))]
    if others:
        fail(f"exec takes only name= or platform= before --, not {others[0]!r}")
    try:
        state = board_cluster(board, named[-1] if named else None)
    except DseError as exc:
        fail(str(exc))
        raise
    ssh = hosts.ssh_command(state.names)
    os.execvp(ssh[0], [*ssh, board, *command])


def board_cluster(board: str, name: str | None) -> State:
    """The running cluster with the board ``board`` (the one named, else the only one)."""
    candidates = [name] if name else clusters()
    found = []
    for n in candidates:
        try:
            state = load(n)
        except DseError:
            if name:
                raise
            continue
        if any(b.name == board for b in state.spec.boards):
            found.append(state)
    if not found:
        where = f"cluster {name}" if name else "no running cluster"
        raise DseError(f"{where} has no board '{board}': python -m dse.cluster status lists them")
    if len(found) > 1:
        names = ", ".join(s.name for s in found)
        raise DseError(f"board '{board}' is on clusters {names}: add name=CLUSTER")
    return found[0]


ACTION = ""

if __name__ == "__main__":
    if sys.argv[1:2] == ["exec"]:
        do_exec(sys.argv[2:])
    if sys.argv[1:2] and sys.argv[1] in ("-h", "--help", "--version"):
        ACTION = ""  # run() prints the page and exits before any action
    elif len(sys.argv) < 2 or sys.argv[1] not in ACTIONS:
        fail(USAGE)
    else:
        ACTION = sys.argv.pop(1)
    run(main, "cluster")
