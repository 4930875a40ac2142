"""The commands the README and the guides mark as runnable, read out of their Markdown.

A fenced ``bash`` block is run by ``tests/docs/test_commands.py`` when the line before it (blank
lines aside) is a marker::

    <!-- run [continue] [slow] [mpi] [postgres] [with KEY=VALUE ...] -->

* each line of the block is one command (a trailing ``\\`` continues it; ``# ...`` comments and
  blank lines are skipped), run by bash in a fresh working directory, one after the other;
* ``continue``: the block runs after the runnable block before it on the same page, in the same
  directory (a deployment of the mapping a search wrote); the chain is one test;
* ``slow`` and ``mpi``: the chain gets pytest's marks of those names;
* ``postgres``: the chain runs against the test session's PostgreSQL server (the ``postgres``
  fixture): libpq's ``PGHOST``, ``PGPORT`` and ``PGUSER`` name it and its administrator, as
  ``sudo -u postgres`` on a database host does, ``HOME`` is a folder of the chain's own (for
  ``~/.pgpass``), and the database host a command names, :data:`DB_HOST`, is that server;
* ``with KEY=VALUE ...``: small settings the test appends to each ``python -m dse...`` command of
  the block (Hydra takes the last value of a key), so a command documented with the thesis's
  settings is still run as written, only smaller.

A block that is not to be run says why on its marker line: ``<!-- not run: needs boards -->``.
Every ``bash`` block of the README and the guides has one marker or the other (:func:`unmarked`),
or is one of the README's ``<!-- ci:install -->`` and ``<!-- ci:test -->`` blocks, which
``.ci/run`` runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The pages whose commands are checked: the README and the guides.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]
MARKER = re.compile(r"^<!-- run(?P<args>( [^>]*)?) -->$")
NOT_RUN = re.compile(r"^<!-- not run: .+ -->$")
#: The README's install and test blocks: .ci/run runs them (in a fresh virtual environment).
CI = re.compile(r"^<!-- ci:\w+ -->$")
FLAGS = ("continue", "slow", "mpi", "postgres")
#: The database server's host and port as the guides write them (``postgres`` chains).
DB_HOST = "dbhost:5432"


@dataclass
class Block:
    """A runnable block: where it is, its commands, its flags and small settings."""

    page: Path
    line: int  # 1-based line of its marker
    commands: list[str]
    flags: set[str] = field(default_factory=set)
    settings: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


@dataclass
class Chain:
    """Blocks run one after the other in one working directory: one test."""

    blocks: list[Block]

    @property
    def id(self) -> str:
        return self.blocks[0].where

    @property
    def flags(self) -> set[str]:
        return set().union(*(b.flags for b in self.blocks)) - {"continue"}


def strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` (a ``#`` outside quotes that starts a word)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands(body: list[str]) -> list[str]:
    """The commands of a block's lines: continuations joined, comments and blanks dropped."""
    out, current = [], ""
    for raw in body:
        line = strip_comment(raw)
        if line.endswith("\\"):
            current += line[:-1].rstrip() + " "
            continue
        current += line.strip()
        if current.strip():
            out.append(current.strip())
        current = ""
    if current.strip():
        out.append(current.strip())
    return out


def fenced(lines: list[str], start: int) -> tuple[str, list[str]] | None:
    """(language, body lines) of the fenced block starting at or after ``start`` (blank lines
    skipped); None if the next non-blank line opens none."""
    i = start
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i >= len(lines) or not lines[i].lstrip().startswith("```"):
        return None
    indent = len(lines[i]) - len(lines[i].lstrip())
    lang = lines[i].strip()[3:].strip()
    body = []
    for line in lines[i + 1 :]:
        if line.strip().startswith("```"):
            return lang, body
        body.append(line[indent:])
    raise ValueError(f"unclosed code block after line {start}")


def blocks(page: Path) -> list[Block]:
    """The runnable blocks of a page, in order."""
    lines = page.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        m = MARKER.match(line.strip())
        if not m:
            continue
        where = f"{page.relative_to(ROOT)}:{i + 1}"
        block = fenced(lines, i + 1)
        if block is None or block[0] != "bash":
            raise ValueError(f"{where}: a run marker must come right before a ```bash block")
        words = m.group("args").split()
        flags, settings = set(), []
        if "with" in words:
            at = words.index("with")
            words, settings = words[:at], words[at + 1 :]
        unknown = set(words) - set(FLAGS)
        if unknown:
            raise ValueError(f"{where}: unknown run flag(s) {sorted(unknown)}: use {FLAGS}")
        flags = set(words)
        out.append(Block(page, i + 1, commands(block[1]), flags, settings))
    return out


def chains(pages: list[Path] = PAGES) -> list[Chain]:
    """Every page's runnable blocks, each ``continue`` block joined to the chain before it."""
    out: list[Chain] = []
    for page in pages:
        first = True
        for b in blocks(page):
            if "continue" in b.flags:
                if first:
                    raise ValueError(f"{b.where}: 'continue' with no runnable block before it")
                out[-1].blocks.append(b)
            else:
                out.append(Chain([b]))
            first = False
    return out


def unmarked(page: Path) -> list[str]:
    """Where a page has a ``bash`` block with neither marker before it."""
    lines = page.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("```bash"):
            continue
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        before = lines[j].strip() if j >= 0 else ""
        if not (MARKER.match(before) or NOT_RUN.match(before) or CI.match(before)):
            out.append(f"{page.relative_to(ROOT)}:{i + 1}")
    return out


#: The commands that take Hydra's ``key=value`` settings: ``python -m dse`` and the entry points
#: configured by ``conf/<name>.yaml`` (not dse.compare, whose arguments are paths).
HYDRA = re.compile(r"^python -m dse(\.(inspect|evaluate|deploy|calibrate|fidelity|cluster))?( |$)")


def with_settings(command: str, settings: list[str]) -> str:
    """``command`` with the block's small settings appended when it runs a Hydra entry point."""
    if not settings or not HYDRA.match(command):
        return command
    return command + " " + " ".join(f"'{s}'" for s in settings)


def on_server(command: str, address: str) -> str:
    """``command`` with the guides' database host (:data:`DB_HOST`) as ``address``."""
    return command.replace(DB_HOST, address)
