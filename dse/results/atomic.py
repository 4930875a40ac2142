"""Writing files so a reader (or a crash) only ever sees the old complete file or the new one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def staged(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path``; renamed onto it when the block succeeds, removed when
    it fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    with staged(path) as tmp:
        tmp.write_text(text)


def write_bytes(path: Path, data: bytes) -> None:
    with staged(path) as tmp:
        tmp.write_bytes(data)


def remove_stale(directory: Path) -> None:
    """Temporary files a killed writer left behind."""
    for p in Path(directory).glob(".*.tmp"):
        p.unlink(missing_ok=True)
