"""Architecture rules that a linter would otherwise have to keep."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import soloist

SRC = Path(soloist.__file__).parent
DRIVERS = {"sqlite3", "psycopg", "psycopg_pool", "redis", "aetcd", "grpc"}


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
    """Only soloist.stores.* may import a database driver, anywhere in a module."""
    offenders = {}
    for path in SRC.rglob("*.py"):
        if "stores" in path.relative_to(SRC).parts:
            continue
        offenders[str(path.relative_to(SRC))] = sorted(imported_modules(path) & DRIVERS)
    assert {k: v for k, v in offenders.items() if v} == {}


BENCH = "soloist_bench"


def bench_imports(path: Path) -> list[str]:
    """Where ``path`` imports the benchmark: ``<module>`` for its body, else the path of
    the function or class holding the import (``outer.inner``, ``Class.method``)."""
    found: list[str] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, f"{scope}.{child.name}" if scope != "<module>" else child.name)
                continue
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0:
                names = [child.module or ""]
            else:
                names = []
            if any(name.split(".")[0] == BENCH for name in names):
                found.append(scope)
            visit(child, scope)

    visit(ast.parse(path.read_text(encoding="utf-8")), "<module>")
    return found


def test_the_library_never_imports_the_bench() -> None:
    """The benchmark (soloist_bench, installed from a clone, not in the wheel) is imported
    by one place of the library: inside the CLI's ``bench`` commands (``bench`` and ``bench
    operator``), when they run; never by a module body, and importing soloist and its CLI
    does not load it."""
    places = {
        f"{path.relative_to(SRC)}:{scope}"
        for path in SRC.rglob("*.py")
        for scope in bench_imports(path)
    }
    assert places == {"cli.py:bench", "cli.py:bench_operator"}
    code = "import sys, soloist, soloist.cli, soloist.testing; print(*sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert [name for name in loaded if name.split(".")[0] == BENCH] == []


def test_schedules_do_no_io() -> None:
    """Schedule maths is pure: it imports no I/O, store, runtime or clock module."""
    forbidden = {"os", "socket", "sqlite3", "asyncio", "time", "subprocess", "soloist.clock"}
    forbidden |= {"soloist.stores", "soloist.runtime"}
    for module in ("schedules.py", "_timemath.py"):
        assert imported_modules(SRC / module) & forbidden == set(), module


WEB_FRAMEWORKS = {"django", "fastapi", "starlette", "uvicorn"}


def test_core_never_imports_a_web_framework() -> None:
    """Only soloist.contrib.* (integrations) and soloist.http (the opt-in endpoint) may
    import Django, FastAPI, Starlette or uvicorn; ``import soloist`` loads none of them."""
    offenders = {
        str(path.relative_to(SRC)): sorted(imported_modules(path) & WEB_FRAMEWORKS)
        for path in SRC.rglob("*.py")
        if path.relative_to(SRC).parts[0] not in {"contrib", "http"}
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    code = "import sys, soloist, soloist.cli, soloist.contrib.asgi; print(*sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert {name.split(".")[0] for name in loaded} & WEB_FRAMEWORKS == set()


WEB = {"starlette", "uvicorn"}


def test_only_the_http_package_imports_the_web_stack() -> None:
    """starlette and uvicorn (the extra soloist[http]) are imported only by soloist.http."""
    offenders = {
        str(path.relative_to(SRC)): sorted(imported_modules(path) & WEB)
        for path in SRC.rglob("*.py")
        if path.relative_to(SRC).parts[0] != "http"
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_importing_the_core_loads_no_web_module() -> None:
    """Importing soloist, its CLI and a Scheduler loads neither starlette nor uvicorn."""
    code = (
        "import sys, soloist, soloist.cli, soloist.metrics\n"
        "soloist.Scheduler('memory://')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


#: What a store driver may not import: the layers above the store seam.
ABOVE_THE_STORES = {
    "soloist.runtime",
    "soloist.scheduler",
    "soloist.operations",
    "soloist.http",
    "soloist.cli",
    "soloist.contrib",
    "soloist.registry",
}


def test_store_drivers_import_nothing_above_the_store_seam() -> None:
    """soloist.stores.* (the core and every driver) imports nothing from the runtime, the
    facade, the operations, the web layer or the CLI: the seam is one way."""
    offenders = {}
    for path in (SRC / "stores").rglob("*.py"):
        found = {
            name
            for name in imported_modules(path)
            if any(name == above or name.startswith(above + ".") for above in ABOVE_THE_STORES)
        }
        if found:
            offenders[str(path.relative_to(SRC))] = sorted(found)
    assert offenders == {}


def test_drivers_do_not_repeat_the_core_checks() -> None:
    """The checks of soloist.stores.core live once: no driver imports them (they get
    checked input from CheckedStore), and no driver keeps its own outcome-state tuple."""
    offenders = {}
    for path in (SRC / "stores").rglob("*.py"):
        parts = path.relative_to(SRC / "stores").parts
        if parts[0] == "core" or len(parts) == 1:
            continue
        text = path.read_text(encoding="utf-8")
        found = [
            needle
            for needle in (
                "soloist.stores.core.checks",
                "aware_utc(",
                "positive_ttl(",
                "expected succeeded, failed or dead",
            )
            if needle in text
        ]
        if found:
            offenders[str(path.relative_to(SRC))] = found
    assert offenders == {}


def soloist_imports(path: Path) -> set[str]:
    """The soloist modules ``path`` imports anywhere (module level, in functions, under
    TYPE_CHECKING): ``from soloist.x import y`` counts as soloist.x.y if that is a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.split(".")[0] == "soloist")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "soloist":
                continue
            submodules = {f"{node.module}.{a.name}" for a in node.names}
            found = {name for name in submodules if module_path(name) is not None}
            names.update(found or {node.module})
            if found != submodules:  # a name defined in the package itself
                names.add(node.module)
    return names


def module_path(name: str) -> Path | None:
    """The source file of the soloist module ``name``, or None if it is not one."""
    base = SRC.joinpath(*name.split(".")[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def reachable(start: Path) -> dict[str, str]:
    """Every soloist module ``start`` depends on, directly or through others, each mapped
    to the module that imports it (to name the path in a failure)."""
    seen: dict[str, str] = {}
    queue = [("<start>", start)]
    while queue:
        importer, path = queue.pop()
        for name in sorted(soloist_imports(path)):
            found = module_path(name)
            if name not in seen and found is not None:
                seen[name] = importer
                queue.append((name, found))
    return seen


def test_the_http_package_does_not_depend_on_the_scheduler() -> None:
    """soloist.http depends on the read/act interface (soloist.control), never on
    soloist.scheduler: not directly, not lazily, not under TYPE_CHECKING, not through
    another module."""
    offenders = {}
    for path in (SRC / "http").rglob("*.py"):
        seen = reachable(path)
        if "soloist.scheduler" in seen:
            chain, name = ["soloist.scheduler"], "soloist.scheduler"
            while seen[name] != "<start>":
                name = seen[name]
                chain.append(name)
            offenders[str(path.relative_to(SRC))] = " <- ".join(chain)
    assert offenders == {}


def test_the_scheduler_does_not_import_the_http_package() -> None:
    """scheduler.py imports nothing from soloist.http (it starts the endpoint through
    soloist.endpoint), and a scheduler without an HTTP address, started and stopped, never
    loads soloist.http."""
    found = {
        name
        for name in soloist_imports(SRC / "scheduler.py")
        if name == "soloist.http" or name.startswith("soloist.http.")
    }
    assert found == set()
    code = (
        "import asyncio, sys, soloist\n"
        "app = soloist.Scheduler('memory://', lease_ttl='2s')\n"
        "async def main():\n"
        "    await app.start()\n"
        "    await app.stop()\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.startswith('soloist.http')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
