"""Whether the tests run in CI, and the one way a test that lacks something skips.

A test that needs something the machine lacks (a server, a binary, a library) calls
:func:`missing` (or :func:`require`, for a module, as ``pytest.importorskip``): it skips
with the reason, except in CI, where it fails, since a skip in CI is a defect. CI is the
environment variable ``CI`` set to ``true``, ``1`` or ``yes``, in any case (``CI=true``,
``CI=True``, ``CI=1``), as CI services set it. Importable from any tier: ``tests/`` is on
``sys.path`` (its conftest.py sits there).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

_TRUE = ("true", "1", "yes")


def in_ci() -> bool:
    """Whether the environment variable ``CI`` says the tests run in CI."""
    return os.environ.get("CI", "").strip().lower() in _TRUE


def missing(reason: str) -> NoReturn:
    """Skip the test for ``reason``, or fail it in CI."""
    if in_ci():
        pytest.fail(reason)
    pytest.skip(reason)


def require(module: str, why: str = "") -> ModuleType:
    """``pytest.importorskip(module)``, except that in CI a missing module fails."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing(f"{module} is not installed{f' ({why})' if why else ''}: {exc}")
