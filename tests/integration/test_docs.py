"""Facts the documentation states, checked against the code.

The strict build (``make docs``) catches broken links and docstrings; these tests catch
docs that build fine but say something the code does not do: a CLI option or command,
an environment variable, an HTTP route or a metric that one side has and the other does
not, a code example that names an API that does not exist, and the quickstart itself,
run as a reader would run it.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import click
import pytest

import soloist
import soloist.errors
from ci import in_ci, require
from soloist import JobContext, Scheduler
from soloist.cli import main as cli_main
from soloist.config import VARIABLES
from soloist.models import OccurrenceCounts, State
from soloist.scheduler import Schedules
from soloist.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SRC = ROOT / "src" / "soloist"
SOLOIST = Path(sys.executable).parent / "soloist"
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.S | re.M)
#: Whether soloist[http] (starlette) is installed: docs blocks importing soloist.http need it.
HTTP_EXTRA = importlib.util.find_spec("starlette") is not None
ENV_NAME = re.compile(r"\bSOLOIST_[A-Z][A-Z_]*[A-Z]\b")


def page(relative: str) -> str:
    return (DOCS / relative).read_text(encoding="utf-8")


def sections(text: str, level: str = "##") -> dict[str, str]:
    """Heading text -> the text up to the next heading of the same or a higher level."""
    pattern = re.compile(rf"^{level} +(.+?)\s*$", re.M)
    found = list(pattern.finditer(text))
    return {
        m[1]: text[m.end() : found[i + 1].start() if i + 1 < len(found) else len(text)]
        for i, m in enumerate(found)
    }


def code_blocks(lang: str) -> list[tuple[str, str]]:
    """(page, body) of every fenced block of ``lang`` in the docs."""
    return [
        (str(path.relative_to(DOCS)), m["body"])
        for path in sorted(DOCS.rglob("*.md"))
        for m in FENCE.finditer(path.read_text(encoding="utf-8"))
        if m["lang"] == lang
    ]


# -- command line -------------------------------------------------------------------------------
def test_cli_reference_has_a_section_per_command_and_no_other() -> None:
    """Every command of `soloist --help` has a `## soloist CMD` section, and every such
    section names a real command."""
    documented = {
        title.removeprefix("soloist ")
        for title in sections(page("reference/cli.md"))
        if title.startswith("soloist ")
    }
    assert documented == set(cli_main.commands)


@pytest.mark.parametrize("name", sorted(cli_main.commands))
def test_cli_reference_lists_every_option_of_the_command(name: str) -> None:
    """Each option of the command (and the environment variable it reads) appears in the
    command's section of the CLI reference."""
    text = sections(page("reference/cli.md"))[f"soloist {name}"]
    command = cli_main.commands[name]
    for param in command.params:
        if not isinstance(param, click.Option):
            continue
        flag = max(param.opts, key=len)
        assert re.search(rf"(?<![\w-]){flag}\b", text), f"soloist {name}: {flag} not documented"
        envvar = param.envvar if isinstance(param.envvar, str) else None
        # --store and its SOLOIST_STORE_URL are explained once, at the top of the page.
        if envvar is not None and flag != "--store":
            assert envvar in text, f"soloist {name} {flag}: env {envvar} is not documented"


# -- environment variables ------------------------------------------------------------------------
def variables_read_by_the_code() -> set[str]:
    """``SOLOIST_*`` names read by config.py (a setting's variable, ``VARIABLES``) and by
    the CLI (``envvar=``)."""
    names = set(VARIABLES.values())
    for command in cli_main.commands.values():
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(param.envvar, str):
                names.add(param.envvar)
    return names


def test_every_environment_variable_is_documented_and_real() -> None:
    """The configuration reference names exactly the environment variables the code reads."""
    documented = set(ENV_NAME.findall(page("reference/configuration.md")))
    read = variables_read_by_the_code()
    assert read, "found no environment variable read by the code"
    assert read - documented == set(), "read by the code, missing from the reference"
    assert documented - read == set(), "in the reference, not read by the code"


def variables_read_by_the_tests() -> set[str]:
    """``SOLOIST_*`` names the test suite itself reads (how it finds servers, chaos sizes):
    the pages about running the tests may name them."""
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"environ(?:\.get\(|\[)\s*\"(SOLOIST_\w+)\"", text))
    return names


def test_no_page_mentions_an_environment_variable_that_does_not_exist() -> None:
    """Every ``SOLOIST_*`` name anywhere in the docs is one the code reads (or a Django
    setting of the same family), or one the test suite reads (on the pages about it)."""
    from soloist.contrib.django.stores import DATABASE_SETTING, OPTIONS_SETTING

    django_settings = {"SOLOIST_APP", DATABASE_SETTING, OPTIONS_SETTING}
    known = variables_read_by_the_code() | variables_read_by_the_tests() | django_settings
    for path in sorted(DOCS.rglob("*.md")):
        unknown = set(ENV_NAME.findall(path.read_text(encoding="utf-8"))) - known
        assert not unknown, f"{path.relative_to(DOCS)} mentions {sorted(unknown)}"


# -- HTTP and metrics -----------------------------------------------------------------------------
def test_http_reference_documents_exactly_the_routes() -> None:
    """Each route of soloist.http.create_app has a `### METHOD /path` heading in the HTTP
    reference, and each such heading is a route."""
    require("starlette", "soloist[http]")
    from soloist.http import create_app

    app = create_app(Scheduler("memory://"))
    routes = {
        (method, route.path.replace(":path}", "}"))
        for route in app.routes
        for method in (route.methods or set()) - {"HEAD"}  # type: ignore[attr-defined]
    }
    headings = " ".join(sections(page("reference/http.md"), "###"))
    documented = set(re.findall(r"\b(GET|POST) (/[^\s,]*)", headings))
    assert routes == documented


def test_metrics_table_matches_the_exposed_metrics() -> None:
    """The metrics table lists exactly the metric names /metrics exposes."""
    from soloist.metrics import Metrics

    metrics = Metrics("docs-test", "distributed")
    metrics.run_finished("job", "failed", 0.1)
    metrics.run_started("job", 0.01)
    metrics.lease_stolen("job")
    metrics.leadership(True)
    metrics.store_error("occurrence_counts")
    metrics.counts = OccurrenceCounts(by_job_state={("job", State.DEAD): 1}, due=0)
    exposed = set()
    for family in metrics.registry.collect():
        exposed.add(family.name + ("_total" if family.type == "counter" else ""))
    table = sections(page("reference/http.md"))["Metrics"]
    documented = set(re.findall(r"^\| `(soloist_\w+)` \|", table, re.M))
    assert exposed == documented


# -- errors ---------------------------------------------------------------------------------------
def test_every_error_class_is_in_the_errors_table() -> None:
    """Each exception class in soloist.errors has a row in the errors reference."""
    classes = {
        name
        for name, obj in vars(soloist.errors).items()
        if inspect.isclass(obj)
        and issubclass(obj, Exception)
        and obj.__module__ == "soloist.errors"
    }
    rows = set(re.findall(r"^\| `(\w+Error)` \|", page("reference/errors.md"), re.M))
    assert classes - {"SoloistError"} == rows


# -- code examples --------------------------------------------------------------------------------
def test_python_examples_compile_and_import_real_names() -> None:
    """Every ```python block in the docs parses, and each `from soloist... import X` names
    something that exists. Without starlette (soloist[http]) the imports of a block that
    imports soloist.http are not checked, that block's only, with a warning (in CI: fails)."""
    blocks = code_blocks("python")
    assert len(blocks) > 10
    unchecked = []
    for where, body in blocks:
        tree = ast.parse(body, filename=where)
        imports = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("soloist")
        ]
        if any(node.module == "soloist.http" for node in imports) and not HTTP_EXTRA:
            if in_ci():
                pytest.fail(f"{where} imports soloist.http, which needs starlette")
            unchecked.append(where)
            continue
        for node in imports:
            module = __import__(node.module or "", fromlist=["_"])
            for alias in node.names:
                assert hasattr(module, alias.name), f"{where}: {node.module}.{alias.name}"
    if unchecked:
        warnings.warn(f"imports not checked (no starlette): {unchecked}", stacklevel=1)


def test_yaml_and_json_examples_parse() -> None:
    """Every ```yaml block (Kubernetes, Compose) and ```json block in the docs parses."""
    yaml = require("yaml", "PyYAML comes with mkdocs")
    blocks = code_blocks("yaml")
    assert len(blocks) >= 3
    for where, body in blocks:
        assert yaml.safe_load(body) is not None, where
    for where, body in code_blocks("json"):
        assert isinstance(json.loads(body), dict), where


def test_examples_call_only_methods_that_exist() -> None:
    """Calls on `app.`, `app.schedules.` and `ctx.` in the docs' Python examples name real
    methods and attributes of Scheduler, Schedules and JobContext."""
    ctx_names = set(JobContext.__dataclass_fields__) | set(dir(JobContext))
    app = Scheduler("memory://")
    checked = Counter[str]()
    for where, body in code_blocks("python"):
        for node in ast.walk(ast.parse(body)):
            if not isinstance(node, ast.Attribute):
                continue
            owner = ast.unparse(node.value)
            if owner == "app.schedules":
                assert hasattr(Schedules, node.attr), f"{where}: app.schedules.{node.attr}"
            elif owner == "app":
                assert hasattr(app, node.attr), f"{where}: app.{node.attr}"
            elif owner == "ctx":
                assert node.attr in ctx_names, f"{where}: ctx.{node.attr}"
            else:
                continue
            checked[owner] += 1
    assert checked["app"] > 10 and checked["ctx"] > 3 and checked["app.schedules"] > 1


def test_async_twins_named_in_the_api_reference_exist() -> None:
    """The async twins the API reference lists exist as coroutine functions."""
    text = page("reference/api.md")
    intro = text[text.index("**Sync and async.**") : text.index("**Durations**")]
    names = re.findall(r"`(a[a-z_]+)`", intro)
    assert len(names) >= 10
    for name in names:
        owner = Schedules if name in ("aadd", "aget", "alist", "adelete") else Scheduler
        assert inspect.iscoroutinefunction(getattr(owner, name, None)), name


def test_readme_links_to_docs_exist() -> None:
    """Every link from README.md into docs/ (absolute, so that it works on PyPI too: see
    tests/unit/test_readme_links.py) points at a file that exists."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    repo = re.escape("https://github.com/soloist-dev/soloist/blob/main/")
    targets = re.findall(rf"\]\({repo}(docs/[^)#]+)", readme)
    assert targets
    for target in targets:
        assert (ROOT / target).is_file(), target


# -- the quickstart, as a reader runs it ----------------------------------------------------------
def test_quickstart_runs_as_written(tmp_path: Path) -> None:
    """The quickstart's app.py runs as two `soloist run` instances; its enqueue command
    queues a task whose result is in the history; its counting script reports each instant
    run once, on the first attempt."""
    text = page("quickstart.md")
    app_source = next(body for where, body in code_blocks("python") if where == "quickstart.md")
    (tmp_path / "app.py").write_text(app_source, encoding="utf-8")
    shell = [m["body"] for m in FENCE.finditer(text) if m["lang"] == "sh"]
    enqueue = next(b for b in shell if b.startswith("soloist enqueue")).splitlines()[0]
    counting = next(b for b in shell if "collections.Counter" in b)
    env = {
        **os.environ,
        "PATH": f"{SOLOIST.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SOLOIST_STORE_URL": "sqlite:///soloist.db",
    }
    env.pop("SOLOIST_INSTANCE_ID", None)

    def sh(command: str) -> str:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"{command!r}: {done.stderr}"
        return done.stdout

    def history(job: str) -> list[dict[str, object]]:
        out = sh(f"soloist history --job {job} --state succeeded --limit 1000 --json")
        return [json.loads(line) for line in out.splitlines()]

    instances = [
        subprocess.Popen(
            [str(SOLOIST), "run", "app:app"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    try:
        wait_until(lambda: (tmp_path / "soloist.db").exists(), "the store file")
        wait_until(lambda: len(history("tick")) >= 2, "two tick runs", timeout=40)
        assert sh(enqueue).startswith("enqueued greet: occurrence ")
        greet = wait_until(lambda: history("greet"), "the greet task to succeed")
        assert [row["result"] for row in greet] == ["hello Ada"]
        report = sh(counting).splitlines()
        counts = re.fullmatch(r"(\d+) runs, (\d+) instants, at most 1 run\(s\) each", report[0])
        assert counts is not None, report
        assert counts[1] == counts[2] and int(counts[1]) >= 2
        assert report[1] == "attempts: [1]"
    finally:
        for proc in instances:
            proc.send_signal(signal.SIGTERM)
        for proc in instances:
            proc.wait(timeout=40)
