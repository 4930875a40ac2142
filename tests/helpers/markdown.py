"""Headings of the manual's Markdown pages as MkDocs anchors them."""

from __future__ import annotations

import re
from pathlib import Path


def slug(heading: str) -> str:
    """A heading's anchor as MkDocs' toc extension makes it."""
    from markdown.extensions.toc import slugify

    text = re.sub(r"[`*]", "", heading)
    return slugify(text, "-")


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings (outside fenced code)."""
    out, fence = set(), False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            out.add(slug(line.lstrip("#").strip()))
    return out
