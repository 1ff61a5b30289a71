"""README.md's examples, extracted from its fenced code blocks and executed as written.

The first ```python block is the user's ``app.py`` and runs as a real process; the second
(enqueue) and the one under "Dynamic schedules" run as scripts beside it; the ``soloist
history`` lines of the ```sh block after "Then look at the audit history" run as commands.
What the test expects (which task, how many runs, which job is triggered) is read from the
blocks too, so editing the README changes the expectations instead of silently passing.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from soloist import Scheduler
from soloist.testing import wait_until

README = Path(__file__).resolve().parents[2] / "README.md"
SOLOIST = Path(sys.executable).parent / "soloist"
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.S | re.M)
HEADING = re.compile(r"^#{1,6} +(?P<title>.+?)\s*$", re.M)
DEADLINE_S = 30.0

T = TypeVar("T")


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    section: str  # the heading the block sits under
    before: str  # the prose between the previous block (or heading) and this one


def readme_blocks(text: str) -> list[Block]:
    blocks = []
    previous_end = 0
    for match in FENCE.finditer(text):
        headings = list(HEADING.finditer(text, 0, match.start()))
        section = headings[-1]["title"] if headings else ""
        start = max(previous_end, headings[-1].end() if headings else 0)
        blocks.append(Block(match["lang"], match["body"], section, text[start : match.start()]))
        previous_end = match.end()
    return blocks


def pick(blocks: list[Block], what: str, test: Callable[[Block], bool]) -> Block:
    found = [b for b in blocks if test(b)]
    assert found, f"README.md has no {what}"
    return found[0]


def calls_to(source: str, method: str) -> list[ast.Call]:
    """Every ``<something>.method(...)`` call in ``source``."""
    return [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == method
    ]


def keyword(call: ast.Call, name: str) -> Any:
    for kw in call.keywords:
        if kw.arg == name:
            return ast.literal_eval(kw.value)
    return None


def first_arg_name(call: ast.Call) -> str:
    arg = call.args[0]
    if isinstance(arg, ast.Name):
        return arg.id
    value = ast.literal_eval(arg)
    assert isinstance(value, str), ast.dump(arg)
    return value


def expected_runs(enqueue_source: str) -> tuple[str, Counter[str]]:
    """The task the enqueue example queues and, per ``to`` value, how many runs it makes:
    one per call, except that repeating an idempotency ``key`` adds none."""
    calls = calls_to(enqueue_source, "enqueue")
    assert calls, "the enqueue example calls no enqueue()"
    tasks = {first_arg_name(call) for call in calls}
    assert len(tasks) == 1, f"expected one task in the enqueue example, found {tasks}"
    seen_keys: set[str] = set()
    runs: Counter[str] = Counter()
    for call in calls:
        key = keyword(call, "key")
        if key is not None and key in seen_keys:
            continue
        if key is not None:
            seen_keys.add(key)
        runs[payload_of(call)["to"]] += 1
    return tasks.pop(), runs


def payload_of(call: ast.Call) -> Any:
    """The payload of an ``enqueue(task, payload, ...)`` call (a literal dict)."""
    if len(call.args) > 1:
        return ast.literal_eval(call.args[1])
    return keyword(call, "payload")


def interval_jobs(app_source: str) -> list[str]:
    """The functions that ``app_source`` decorates with ``@<app>.job(every(...), ...)``."""
    found = []
    for node in ast.walk(ast.parse(app_source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for decorator in node.decorator_list:
            if (
                isinstance(decorator, ast.Call)
                and isinstance(decorator.func, ast.Attribute)
                and decorator.func.attr == "job"
                and decorator.args
                and isinstance(decorator.args[0], ast.Call)
                and isinstance(decorator.args[0].func, ast.Name)
                and decorator.args[0].func.id == "every"
            ):
                found.append(node.name)
    assert found, "the README app defines no every(...) job"
    return found


def registered_jobs(cwd: Path, env: dict[str, str]) -> set[str]:
    """The job names ``soloist jobs --json`` lists for the default store in ``cwd``."""
    done = subprocess.run(
        [str(SOLOIST), "jobs", "--json"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode == 1 and "no SQLite store" in done.stderr:
        return set()  # app.py has not created its store yet
    assert done.returncode == 0, done.stderr
    return {json.loads(line)["name"] for line in done.stdout.splitlines()}


def run_script(path: Path, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, path.name],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"{path.name} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture
def blocks() -> list[Block]:
    return readme_blocks(README.read_text(encoding="utf-8"))


def test_readme_examples_run_as_written(tmp_path: Path, blocks: list[Block]) -> None:
    """README's app, enqueue, dynamic-schedule and history examples work as documented."""
    python = [b for b in blocks if b.lang == "python"]
    assert len(python) >= 2, "README.md needs the app.py and enqueue ```python blocks"
    app_block, enqueue_block = python[0], python[1]
    dynamic_block = pick(
        blocks,
        "```python block under 'Dynamic schedules'",
        lambda b: b.lang == "python" and b.section.startswith("Dynamic schedules"),
    )
    history_block = pick(
        blocks,
        "```sh block after 'Then look at the audit history'",
        lambda b: b.lang == "sh" and "Then look at the audit history" in b.before,
    )
    history_commands = [
        shlex.split(line)
        for line in history_block.body.splitlines()
        if line.strip().startswith("soloist history")
    ]
    assert any("--json" in cmd for cmd in history_commands), history_block.body

    task, runs = expected_runs(enqueue_block.body)
    triggered = [first_arg_name(call) for call in calls_to(dynamic_block.body, "trigger")]
    assert triggered, "the dynamic-schedules example triggers no job"

    (tmp_path / "app.py").write_text(app_block.body)
    (tmp_path / "enqueue_example.py").write_text(enqueue_block.body)
    (tmp_path / "dynamic_example.py").write_text(dynamic_block.body)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLOIST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    history = Scheduler(f"sqlite:///{tmp_path / 'soloist.db'}").history

    def succeeded(job: str, kind: str | None = None) -> list[Any]:
        return [
            o
            for o in history(job=job, state="succeeded", limit=1000)
            if kind is None or o.kind.value == kind
        ]

    log_path = tmp_path / "app.log"
    with log_path.open("wb") as log:
        app = subprocess.Popen(
            [sys.executable, "app.py"], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        # The dynamic example pauses and triggers jobs that app.py registers when it starts.
        def started() -> bool:
            assert app.poll() is None, f"app.py exited:\n{log_path.read_text()}"
            return set(triggered) <= registered_jobs(tmp_path, env)

        wait_until(started, "app.py to register its jobs")

        run_script(tmp_path / "enqueue_example.py", tmp_path, env)
        run_script(tmp_path / "dynamic_example.py", tmp_path, env)

        wait_until(lambda: len(succeeded(task)) >= sum(runs.values()), f"{task} to run")
        for job in interval_jobs(app_block.body):
            wait_until(lambda job=job: succeeded(job, "schedule"), f"{job} to run on schedule")
        for job in triggered:
            wait_until(lambda job=job: succeeded(job, "trigger"), f"the trigger of {job} to run")

        for args in history_commands:
            done = subprocess.run(
                [str(SOLOIST), *args[1:]],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, (args, done.stdout, done.stderr)
            assert done.stdout.strip(), f"{shlex.join(args)} printed nothing"
            if "--json" in args:
                rows = [json.loads(line) for line in done.stdout.splitlines()]
                assert all(isinstance(row, dict) for row in rows), done.stdout

        app.send_signal(signal.SIGTERM)
        status = app.wait(timeout=DEADLINE_S)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait(timeout=DEADLINE_S)
    output = log_path.read_text()
    assert status == 0, output
    assert "Traceback" not in output, output

    # After the app stopped nothing more can run: the counts are final.
    done_runs = Counter(o.payload.get("to") for o in succeeded(task))
    assert done_runs == runs, f"README enqueue example: expected {runs}, ran {done_runs}"
    for job in triggered:
        runs_of_trigger = [o for o in history(job=job, limit=1000) if o.kind.value == "trigger"]
        assert len(runs_of_trigger) == triggered.count(job), runs_of_trigger
        assert {o.state.value for o in runs_of_trigger} == {"succeeded"}, runs_of_trigger


def test_readme_block_parser_finds_each_example() -> None:
    """The block extraction sees a block's language, section and preceding prose."""
    text = (
        "# t\n\n## Use it\n\n```python\nA = 1\n```\n\nThen look at it:\n\n"
        "```sh\nsoloist history\n```\n\n## Dynamic schedules, pause\n\n```python\nB = 2\n```\n"
    )
    found = readme_blocks(text)
    assert [(b.lang, b.body, b.section) for b in found] == [
        ("python", "A = 1\n", "Use it"),
        ("sh", "soloist history\n", "Use it"),
        ("python", "B = 2\n", "Dynamic schedules, pause"),
    ]
    assert "Then look at it" in found[1].before
    assert "Then look at it" not in found[2].before


def test_readme_leadership_example_registers_its_callback(blocks: list[Block]) -> None:
    """The leader-election example runs against an app and registers an on_elected
    callback that accepts an epoch."""
    block = pick(
        blocks,
        "```python block under 'Coordination modes and leader election'",
        lambda b: b.lang == "python" and b.section.startswith("Coordination modes"),
    )
    app = Scheduler("memory://")
    namespace: dict[str, Any] = {"app": app}
    exec(compile(block.body, "README.md", "exec"), namespace)
    assert len(app._on_elected) == 1
    app._on_elected[0](7)  # the documented signature: the epoch
