"""A pytest plugin for mutmut's test runs (``pytest_add_cli_args`` of [tool.mutmut] in
pyproject.toml): a mutant's tests run fastest first, by the times mutmut measured, so that
with ``-x`` the test that kills it comes early. mutmut's fork server (which this project
uses) runs them in no particular order; a 30-second test first made every mutant cost 30 s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

#: Written by mutmut in its working directory (mutants/), where it runs pytest.
STATS = Path("mutmut-stats.json")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    try:
        durations = json.loads(STATS.read_text(encoding="utf-8"))["duration_by_test"]
    except (OSError, ValueError, KeyError):
        return  # the first run, which measures them
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))
