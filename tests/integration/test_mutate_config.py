"""make mutate's configuration cannot rot silently: the files and tests mutmut is given
exist, every group names functions that exist in those files, the committed list of
surviving mutants is well formed, and make test does not run the mutation tool."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


def _load_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation_run", ROOT / "tests/mutation/run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


run = _load_runner()


def module_file(module: str) -> Path:
    return SRC.joinpath(*module.split(".")).with_suffix(".py")


def functions_of(path: Path) -> tuple[set[str], dict[str, set[str]]]:
    """The module's top-level functions, and each top-level class's methods."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defs = (ast.FunctionDef, ast.AsyncFunctionDef)
    functions = {node.name for node in tree.body if isinstance(node, defs)}
    classes = {
        node.name: {item.name for item in node.body if isinstance(item, defs)}
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }
    return functions, classes


def test_mutmut_is_given_files_and_tests_that_exist() -> None:
    """Every path in [tool.mutmut] exists: the sources, the files to mutate (within the
    sources), the tests selected and ignored, the files copied, the ordering plugin."""
    settings = run.mutmut_settings()
    sources = [ROOT / p for p in settings["source_paths"]]
    assert sources and all(p.is_dir() for p in sources), sources
    mutated = settings["only_mutate"]
    assert mutated, "only_mutate is empty: mutmut would mutate the whole library"
    for path in mutated:
        assert (ROOT / path).is_file(), f"only_mutate names {path}, which does not exist"
        assert any((ROOT / path).is_relative_to(s) for s in sources), path
    for arg in settings["pytest_add_cli_args_test_selection"]:
        path = arg.removeprefix("--ignore=") if arg.startswith("--ignore=") else arg
        assert not path.startswith("-"), f"unexpected option {arg} in the test selection"
        assert (ROOT / path.split("::")[0]).exists(), f"the test selection names {path}"
    for path in settings["also_copy"]:
        assert (ROOT / path).exists(), f"also_copy names {path}, which does not exist"
    args = settings["pytest_add_cli_args"]
    plugins = [args[i + 1] for i, a in enumerate(args) if a == "-p"]
    ours = [p for p in plugins if p.startswith("tests.")]
    assert ours == ["tests.mutation.order"], plugins
    assert (ROOT / "tests/mutation/order.py").is_file()


def test_every_group_targets_functions_of_the_mutated_files() -> None:
    """Each target of groups.toml is a module mutmut mutates, or a function or method
    defined in one; and no other function of that module starts with a target's name (the
    runner's glob, ``module.x_name*``, would take it in too)."""
    groups = run.load_groups()
    assert set(groups) == {
        "schedules",
        "planner",
        "leases",
        "stores-memory",
        "stores-sqlite",
        "stores-postgres",
        "stores-redis",
    }
    mutated = {ROOT / p for p in run.mutmut_settings()["only_mutate"]}
    for group in groups.values():
        assert group.about and group.targets, group.name
        for target in group.targets:
            module, _, function = target.partition(":")
            path = module_file(module)
            assert path in mutated, f"{group.name}: {module} is not in only_mutate"
            if not function:
                continue
            functions, classes = functions_of(path)
            owner, _, name = function.rpartition(".")
            siblings = classes.get(owner, set()) if owner else functions
            assert name in siblings, f"{group.name}: {target} is not defined in {path.name}"
            prefixed = sorted(s for s in siblings if s != name and s.startswith(name))
            assert not prefixed, f"{group.name}: {target}'s glob also takes {prefixed}"


def test_group_globs_and_ownership_agree_on_mutmut_names() -> None:
    """A target becomes mutmut's names for its function (``x_f`` for a function,
    ``xǁClassǁm`` for a method), and a group owns exactly its functions' mutants."""
    group = run.Group("g", "about", ("pkg.mod:Store.claim", "pkg.mod:helper", "pkg.whole"))
    assert group.globs() == [
        "pkg.mod.x\u01c1Store\u01c1claim*",
        "pkg.mod.x_helper*",
        "pkg.whole.x_*",
        "pkg.whole.x\u01c1*",
    ]
    assert group.owns("pkg.mod.x\u01c1Store\u01c1claim__mutmut_3")
    assert group.owns("pkg.mod.x_helper__mutmut_12")
    assert group.owns("pkg.whole.x\u01c1Any\u01c1thing__mutmut_1")
    assert not group.owns("pkg.mod.x\u01c1Store\u01c1claim_many__mutmut_1")
    assert not group.owns("pkg.mod.x_helper2__mutmut_1")
    assert not group.owns("pkg.whole.sub.x_f__mutmut_1")


def test_the_list_of_survivors_is_well_formed() -> None:
    """Every heading of docs/contributing/mutants.md is a group, and every entry is a
    mutant of its group's functions, listed once, with a known kind and a reason."""
    groups = run.load_groups()
    text = run.SURVIVORS.read_text(encoding="utf-8")
    headings = [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]
    assert headings == list(groups), "one heading per group, in the order of groups.toml"
    entries = run.parse_survivors(text)
    names = [entry.name for entry in entries]
    assert len(names) == len(set(names)), "a mutant is listed twice"
    for entry in entries:
        assert groups[entry.group].owns(entry.name), f"{entry.name} is not in {entry.group}"
        assert entry.kind in run.KINDS and len(entry.reason) > 10, entry


@pytest.mark.parametrize(
    "line",
    [
        "- `soloist.m.x_f__mutmut_1`: maybe: no idea",
        "- `soloist.m.x_f__mutmut_1`: equivalent:",
        "- `soloist.m.x_f`: equivalent: not a mutant's name",
        "- `soloist.m.x_f__mutmut_1`: KIND: REASON",
    ],
)
def test_a_malformed_entry_is_refused_naming_its_line(line: str) -> None:
    """An entry without a known kind and a reason (the runner's placeholder included) is an
    error naming the line."""
    with pytest.raises(ValueError, match="line 2: "):
        run.parse_survivors(f"## planner\n{line}\n")


def test_an_unknown_group_is_refused_naming_it_and_the_groups(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """make mutate MUTATE=nope stops before mutmut starts, naming nope and the groups."""
    with pytest.raises(SystemExit) as exited:
        run.main(["nope"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "no group nope: expected one of schedules, planner, leases" in err


def test_make_test_does_not_run_the_mutation_tool() -> None:
    """make test never starts mutmut; make mutate runs the runner with the groups and the
    budget given."""
    test = subprocess.run(
        ["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "pytest" in test and "mutmut" not in test and "mutation/run.py" not in test
    mutate = subprocess.run(
        ["make", "-n", "mutate", "MUTATE=planner leases", "MUTATE_MINUTES=5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "tests/mutation/run.py --minutes 5 planner leases" in mutate
