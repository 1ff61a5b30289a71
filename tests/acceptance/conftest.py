"""Fixtures of the acceptance tier (helpers live in cluster.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A fresh SQLite store in ``tmp_path``; every instance started is killed at the end."""
    group = Cluster(tmp_path)
    try:
        yield group
    finally:
        group.close()


@pytest.fixture
def pg_cluster(tmp_path: Path, postgres_url: str) -> Iterator[Cluster]:
    """A fresh PostgreSQL schema; every instance started is killed at the end."""
    group = Cluster(tmp_path, postgres_url)
    try:
        yield group
    finally:
        group.close()
