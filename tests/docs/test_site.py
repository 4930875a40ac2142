"""The manual builds (mkdocs build --strict: no warning, no broken link or anchor, no page left
out of the navigation), and the README, its landing page, stays short and links only to what
exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.runnable import ROOT
from tests.helpers.markdown import anchors

README = ROOT / "README.md"
#: The README is a landing page: what dse does, install, a quick start, links (issue 32).
README_MAX_LINES = 160
#: The README's picture is committed beside the manual: a small PNG.
PICTURE_MAX_BYTES = 200_000


def test_the_site_builds_strictly(tmp_path: Path):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e .[docs]")
    pytest.importorskip(
        "material", reason="the docs extra is not installed: pip install -e .[docs]"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's banner about its future
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "WARNING" not in log, log[-3000:]
    assert (tmp_path / "site" / "reference" / "config" / "index.html").is_file()


def links(page: Path) -> list[str]:
    """Relative link targets of a Markdown page (outside code)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    found = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'src="([^"]+)"', text)
    return [t for t in found if not re.match(r"^[a-z]+:", t)]


def test_the_readme_is_a_landing_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move text to docs/"
    for marker in ("<!-- ci:install -->", "<!-- ci:test -->"):
        assert marker in lines, f"README.md lost its {marker} marker (.ci/run reads it)"
    install = lines[lines.index("<!-- ci:install -->") + 2]
    assert "docs" in install, "the README's install must install the docs extra the tests use"


def test_the_readmes_links_and_picture_exist():
    targets = links(README)
    assert any(t.startswith("docs/") for t in targets)
    for target in targets:
        path, _, anchor = target.partition("#")
        file = (README.parent / path) if path else README
        assert file.exists(), f"README.md links to {target}, which does not exist"
        if anchor and file.suffix == ".md":
            assert anchor in anchors(file), f"README.md links to {target}: no such heading"
    pictures = [t for t in targets if t.endswith(".png")]
    assert pictures, "the README shows no picture the tool drew"
    for picture in pictures:
        size = (README.parent / picture).stat().st_size
        assert size <= PICTURE_MAX_BYTES, f"{picture} is {size} bytes: keep it under 200 KB"
