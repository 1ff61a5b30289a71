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


@pytest.fixture(params=["postgres", "redis", "etcd"])
def server_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A fresh PostgreSQL schema, Redis key prefix or etcd key prefix (the test runs once
    on each); every instance started is killed at the end."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    group = Cluster(tmp_path, url)
    try:
        yield group
    finally:
        group.close()


@pytest.fixture
def store_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """The cluster on the store a test names by indirect parametrisation
    (``@pytest.mark.parametrize("store_cluster", ["sqlite", "etcd"], indirect=True)``): a
    fresh SQLite file in ``tmp_path``, or a fresh schema or key prefix on the session's
    PostgreSQL, Redis or etcd server; every instance started is killed at the end."""
    store: str = request.param
    url: str | None = None if store == "sqlite" else request.getfixturevalue(f"{store}_url")
    group = Cluster(tmp_path, url)
    try:
        yield group
    finally:
        group.close()
