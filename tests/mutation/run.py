"""``make mutate``: mutmut over the groups of ``groups.toml``, within a time budget, and
the mutants that survive compared with the committed list (docs/contributing/mutants.md).

Usage: ``python tests/mutation/run.py [--minutes N] [GROUP ...]`` from the repository root
(``make mutate MUTATE="planner leases" MUTATE_MINUTES=60``); no group means every group.

mutmut keeps its copy of the sources and its results in ``mutants/`` (git-ignored). A group
is tested whole each time it is named (mutmut re-tests every mutant it is given by name).
When the budget runs out mutmut is interrupted (SIGINT: it stops its workers and keeps what
it has); the group's remaining mutants are reported as not checked and later groups are not
started. The exit status is 0 when every group named was checked in full and its survivors
are exactly the ones the list gives, else 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest's own dependency before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
GROUPS = Path(__file__).resolve().parent / "groups.toml"
SURVIVORS = ROOT / "docs" / "contributing" / "mutants.md"
MUTANTS = ROOT / "mutants"
#: The [tool.mutmut] table the mutants in MUTANTS were made with (see ``fresh_workdir``).
CONFIG_STAMP = MUTANTS / "soloist-config.sha256"

#: mutmut's separator in the names of methods' mutants (``module.xǁClassǁmethod__mutmut_3``).
CLASS_SEPARATOR = "\u01c1"
#: A mutant survived when no test failed; "no tests" means none even ran it. Both belong in
#: the list. A timeout counts as caught (the tests noticed, if only by hanging).
SURVIVING = ("survived", "no tests")
#: Not tested this time: the budget ran out first, or a stop interrupted its tests.
UNCHECKED = ("not checked", "check was interrupted by user")
KINDS = ("equivalent", "test to write")
ENTRY = re.compile(r"^- `(?P<name>[\w.\u01c1]+__mutmut_\d+)`: (?P<kind>[^:]+): (?P<reason>.+)$")
HEADING = re.compile(r"^## (?P<group>[\w-]+)\s*$")


@dataclass(frozen=True)
class Group:
    name: str
    about: str
    targets: tuple[str, ...]

    def globs(self) -> list[str]:
        """mutmut's names for the functions of the targets, as globs for ``mutmut run``.

        ``module:function`` becomes ``module.x_function*``: a pattern that also matches the
        function's own (unmutated) name, so that mutmut's first clean run selects the tests
        of these functions only, not the whole suite (the config test makes sure no other
        function of the module starts with a target's name)."""
        found: list[str] = []
        for target in self.targets:
            module, _, function = target.partition(":")
            if function:
                found.append(f"{module}.{mangled(function)}*")
            else:
                found += [f"{module}.x_*", f"{module}.x{CLASS_SEPARATOR}*"]
        return found

    def owns(self, mutant: str) -> bool:
        """Whether ``mutant`` (a mutmut name) mutates a function of this group."""
        module, _, function = mutant.partition("__mutmut_")[0].rpartition(".")
        for target in self.targets:
            target_module, _, target_function = target.partition(":")
            if module == target_module and (
                not target_function or function == mangled(target_function)
            ):
                return True
        return False


def mangled(function: str) -> str:
    """mutmut's name for ``function`` or ``Class.method`` within its module."""
    owner, _, name = function.rpartition(".")
    return f"x{CLASS_SEPARATOR}{owner}{CLASS_SEPARATOR}{name}" if owner else f"x_{name}"


def load_groups(path: Path = GROUPS) -> dict[str, Group]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return {
        name: Group(name, table["about"], tuple(table["targets"])) for name, table in data.items()
    }


@dataclass(frozen=True)
class Entry:
    group: str
    name: str
    kind: str
    reason: str


def parse_survivors(text: str) -> list[Entry]:
    """The entries of the list: ``- `NAME`: KIND: REASON`` lines under ``## GROUP``
    headings. A line that starts like an entry but does not parse is an error naming it."""
    entries: list[Entry] = []
    group = ""
    for number, line in enumerate(text.splitlines(), 1):
        heading = HEADING.match(line)
        if heading:
            group = heading["group"]
            continue
        if not line.startswith("- `"):
            continue
        match = ENTRY.match(line)
        if match is None or match["kind"] not in KINDS or not match["reason"].strip():
            raise ValueError(
                f"line {number}: {line!r} is not '- `NAME`: KIND: REASON' with KIND one of "
                f"{', '.join(KINDS)}"
            )
        if not group:
            raise ValueError(f"line {number}: {match['name']} is listed before any '## group'")
        entries.append(Entry(group, match["name"], match["kind"], match["reason"].strip()))
    return entries


def mutmut() -> str:
    return str(Path(sys.executable).parent / "mutmut")


def mutmut_settings() -> dict[str, Any]:
    """The [tool.mutmut] table of pyproject.toml."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    settings: dict[str, Any] = pyproject["tool"]["mutmut"]
    return settings


def fresh_workdir() -> None:
    """Start over when [tool.mutmut] changed since the mutants were made: mutmut makes a
    file's mutants again only when the file changes, not when the options that shape them
    do (only_mutate, do_not_mutate_patterns)."""
    table = json.dumps(mutmut_settings(), sort_keys=True)
    digest = hashlib.sha256(table.encode()).hexdigest()
    if MUTANTS.exists() and (not CONFIG_STAMP.exists() or CONFIG_STAMP.read_text() != digest):
        print("[tool.mutmut] changed since mutants/ was made: starting over", flush=True)
        shutil.rmtree(MUTANTS)
    MUTANTS.mkdir(exist_ok=True)
    CONFIG_STAMP.write_text(digest)
    refresh_copies(mutmut_settings())


def refresh_copies(settings: dict[str, Any]) -> None:
    """Bring mutmut's copy up to date where mutmut does not: it copies the tests and the
    ``also_copy`` paths over the old copy (a deleted test would stay and still run), and
    the sources' other files (the Redis store's Lua scripts) only once."""
    for path in ["tests", *settings.get("also_copy", [])]:
        copy = (MUTANTS / path).resolve()
        if MUTANTS.resolve() in copy.parents:
            shutil.rmtree(copy, ignore_errors=True)
    for source in settings["source_paths"]:
        for path in sorted((ROOT / source).rglob("*")):
            if not path.is_file() or path.suffix in (".py", ".pyc"):
                continue
            copy = MUTANTS / path.relative_to(ROOT)
            if not copy.exists() or copy.read_bytes() != path.read_bytes():
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, copy)


def forget_results(group: Group) -> None:
    """Mark the group's mutants not checked, so that a run cut short by the budget reports
    what it did not check instead of the results of an earlier run (mutmut keeps a result
    until it tests that mutant again). Its results are in ``mutants/**/*.py.meta``, JSON."""
    for meta in sorted((MUTANTS / "src").rglob("*.py.meta")):
        data = json.loads(meta.read_text(encoding="utf-8"))
        results = data["exit_code_by_key"]
        mine = [name for name in results if group.owns(name)]
        if mine:
            results.update(dict.fromkeys(mine))
            meta.write_text(json.dumps(data, indent=4), encoding="utf-8")


def run_group(group: Group, deadline: float) -> bool:
    """Run mutmut over ``group``; False if the budget ran out first."""
    forget_results(group)
    # A session of its own, so that a stop reaches mutmut's fork server and workers too.
    process = subprocess.Popen([mutmut(), "run", *group.globs()], cwd=ROOT, start_new_session=True)
    try:
        process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        print(f"\nmake mutate: the time budget is spent; stopping {group.name}", flush=True)
        stop(process)
        return False
    except KeyboardInterrupt:
        stop(process)
        raise
    if process.returncode != 0:
        selection = " ".join(mutmut_settings()["pytest_add_cli_args_test_selection"])
        raise SystemExit(
            f"mutmut run failed for {group.name} (exit status {process.returncode}). Its first "
            "runs need every selected test to pass on the unmutated code; to see which one "
            f"does not: .venv/bin/python -m pytest -x -q {selection}"
        )
    return True


def stop(process: subprocess.Popen[bytes]) -> None:
    """Interrupt mutmut (it keeps what it checked); kill its processes if they do not end
    within a minute (a fork server still loading the tests does not listen)."""
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def statuses() -> dict[str, str]:
    """Every mutant mutmut knows, with its status (``mutmut results --all true``)."""
    out = subprocess.run(
        [mutmut(), "results", "--all", "true"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and "__mutmut_" in name:
            found[name] = status
    return found


def report(group: Group, known: dict[str, str], listed: list[Entry], seconds: float) -> bool:
    """Print the group's figures and how its survivors differ from the list; True if they
    are the same."""
    mine = {name: status for name, status in known.items() if group.owns(name)}
    counts = Counter(mine.values())
    figures = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    print(f"\n== {group.name}: {len(mine)} mutants in {seconds / 60:.1f} min: {figures}")
    surviving = {name for name, status in mine.items() if status in SURVIVING}
    entries = {e.name: e for e in listed if e.group == group.name}
    new = sorted(surviving - entries.keys())
    gone = sorted(name for name in entries.keys() - surviving if mine.get(name) not in UNCHECKED)
    if new:
        print(f"   surviving, not in {SURVIVORS.relative_to(ROOT)} (see `mutmut show NAME`):")
        for name in new:
            print(f"- `{name}`: KIND: REASON")
    for name in gone:
        status = mine.get(name, "no longer a mutant")
        print(f"   listed, but {status}: {name} (remove it from the list)")
    unchecked = sum(counts.get(status, 0) for status in UNCHECKED)
    if unchecked:
        print(f"   {unchecked} not checked: run the group again")
    return not new and not gone and not unchecked


def main(argv: list[str] | None = None) -> int:
    groups = load_groups()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("groups", nargs="*", metavar="GROUP", help=", ".join(groups))
    parser.add_argument("--minutes", type=float, default=90.0, help="time budget (default 90)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.groups if name not in groups]
    if unknown:
        parser.error(f"no group {', '.join(unknown)}: expected one of {', '.join(groups)}")
    if args.minutes <= 0:
        parser.error(f"--minutes {args.minutes}: expected a positive number of minutes")
    chosen = [groups[name] for name in args.groups] or list(groups.values())
    listed = parse_survivors(SURVIVORS.read_text(encoding="utf-8"))
    fresh_workdir()
    deadline = time.monotonic() + args.minutes * 60
    same = True
    for group in chosen:
        started = time.monotonic()
        if time.monotonic() >= deadline:
            print(f"\n== {group.name}: not started (the time budget is spent)")
            same = False
            continue
        finished = run_group(group, deadline)
        same = report(group, statuses(), listed, time.monotonic() - started) and same
        same = same and finished
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
