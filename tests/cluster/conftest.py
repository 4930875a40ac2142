"""Fixtures of the cluster tests: unique cluster names, every cluster taken down at the end."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest

from dse.cluster import clusters, down, missing
from dse.errors import DseError
from tests.helpers.cli import pid_alive
from tests.helpers.cluster import TEST_PREFIX, TWO_CPUS


@pytest.fixture(scope="module")
def cluster_names() -> Iterator[Callable[[str], str]]:
    """Unique names for this module's clusters; every one is taken down at the end. Clusters of
    earlier test runs killed before their finalizers (their pid is gone) are removed first."""
    lacks = missing()
    if lacks:
        pytest.skip(f"no emulated cluster here: this machine lacks {'; '.join(lacks)}")
    if not TWO_CPUS:
        pytest.skip("the test clusters' boards need CPUs 0 and 1: this machine has one")
    for name in clusters():
        parts = name.split("-")
        if name.startswith(TEST_PREFIX) and parts[1].isdigit() and not pid_alive(int(parts[1])):
            down(name)
    made: list[str] = []

    def new(tag: str) -> str:
        name = f"{TEST_PREFIX}{os.getpid()}-{tag}-{uuid.uuid4().hex[:6]}"
        made.append(name)
        return name

    yield new
    for name in made:
        try:
            down(name)
        except DseError as exc:  # still try the others; the test of down catches this
            print(f"cleanup: {exc}", file=sys.stderr)
