"""Architecture rules that a linter would otherwise have to keep."""

from __future__ import annotations

import ast
from pathlib import Path

import soloist

SRC = Path(soloist.__file__).parent
DRIVERS = {"sqlite3", "psycopg", "psycopg_pool", "redis"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.update((alias.name, alias.name.split(".")[0]))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update((node.module, node.module.split(".")[0]))
    return names


def test_core_never_imports_a_store_driver() -> None:
    """Only soloist.stores.* may import a database driver."""
    offenders = {
        str(path.relative_to(SRC)): sorted(imported_modules(path) & DRIVERS)
        for path in SRC.rglob("*.py")
        if "stores" not in path.relative_to(SRC).parts
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_schedules_do_no_io() -> None:
    """Schedule maths is pure: it imports no I/O, store, runtime or clock module."""
    forbidden = {"os", "socket", "sqlite3", "asyncio", "time", "subprocess", "soloist.clock"}
    forbidden |= {"soloist.stores", "soloist.runtime"}
    for module in ("schedules.py", "_timemath.py"):
        assert imported_modules(SRC / module) & forbidden == set(), module
