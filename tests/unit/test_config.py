"""Every setting of ``Scheduler(...)`` has a ``SOLOIST_*`` variable: arguments win over
variables, variables over defaults, a bad value names the variable; the reference table
of docs/reference/configuration.md lists them all as the constructor has them."""

from __future__ import annotations

import inspect
import re
from datetime import timedelta
from pathlib import Path

import pytest

from soloist import Scheduler
from soloist.config import VARIABLES
from soloist.errors import ConfigError

DOC = Path(__file__).parents[2] / "docs" / "reference" / "configuration.md"

#: A value for each variable and the setting it must give (other than the default).
FROM_ENV: dict[str, tuple[str, str, object]] = {
    "store": ("SOLOIST_STORE_URL", "memory://", "memory://"),
    "instance_id": ("SOLOIST_INSTANCE_ID", "env-node", "env-node"),
    "mode": ("SOLOIST_MODE", "leader", "leader"),
    "partitions": ("SOLOIST_PARTITIONS", "8", 8),
    "lease_ttl": ("SOLOIST_LEASE_TTL", "30s", timedelta(seconds=30)),
    "heartbeat": ("SOLOIST_HEARTBEAT", "2s", timedelta(seconds=2)),
    "http": ("SOLOIST_HTTP", "9100", ("127.0.0.1", 9100)),
    "token": ("SOLOIST_TOKEN", "sekrit", "sekrit"),
    "concurrency": ("SOLOIST_CONCURRENCY", "50", 50),
    "max_leaked_threads": ("SOLOIST_MAX_LEAKED_THREADS", "0", 0),
    "poll_interval": ("SOLOIST_POLL_INTERVAL", "250ms", timedelta(milliseconds=250)),
    "grace_period": ("SOLOIST_GRACE_PERIOD", "0", timedelta(0)),
    "misfire_grace": ("SOLOIST_MISFIRE_GRACE", "1m", timedelta(minutes=1)),
    "migrate": ("SOLOIST_MIGRATE", "false", False),
    "timezone": ("SOLOIST_TIMEZONE", "Europe/Paris", "Europe/Paris"),
    "metrics_jobs": (
        "SOLOIST_METRICS_JOBS",
        "report-1, report-2",
        frozenset({"report-1", "report-2"}),
    ),
}

#: An argument of each setting that differs from the variable's value above.
ARGUMENTS: dict[str, tuple[object, object]] = {
    "store": ("memory://given", "memory://given"),
    "instance_id": ("given", "given"),
    "mode": ("local", "local"),
    "partitions": (4, 4),
    "lease_ttl": ("20s", timedelta(seconds=20)),
    "heartbeat": ("3s", timedelta(seconds=3)),
    "http": ("0.0.0.0:9200", ("0.0.0.0", 9200)),
    "token": ("given", "given"),
    "concurrency": (3, 3),
    "max_leaked_threads": (2, 2),
    "poll_interval": ("2s", timedelta(seconds=2)),
    "grace_period": ("5s", timedelta(seconds=5)),
    "misfire_grace": ("7s", timedelta(seconds=7)),
    "migrate": (True, True),
    "timezone": ("America/New_York", "America/New_York"),
    "metrics_jobs": (["report-9"], frozenset({"report-9"})),
}

BAD = {
    "SOLOIST_INSTANCE_ID": None,  # any non-empty text is an id
    "SOLOIST_STORE_URL": "ftp://x",
    "SOLOIST_MODE": "solo",
    "SOLOIST_PARTITIONS": "many",
    "SOLOIST_LEASE_TTL": "forever",
    "SOLOIST_HEARTBEAT": "often",
    "SOLOIST_HTTP": "localhost:99999",
    "SOLOIST_TOKEN": None,  # any non-empty text is a token
    "SOLOIST_CONCURRENCY": "lots",
    "SOLOIST_MAX_LEAKED_THREADS": "-1",
    "SOLOIST_POLL_INTERVAL": "1 fortnight",
    "SOLOIST_GRACE_PERIOD": "-5s",
    "SOLOIST_MISFIRE_GRACE": "soon",
    "SOLOIST_MIGRATE": "maybe",
    "SOLOIST_TIMEZONE": "Mars/Olympus_Mons",
    "SOLOIST_METRICS_JOBS": "report-1,,report-2",
}


def _config_value(app: Scheduler, name: str) -> object:
    return getattr(app.config, "store_url" if name == "store" else name)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in VARIABLES.values():
        monkeypatch.delenv(variable, raising=False)


def _table() -> dict[str, str]:
    """argument -> variable ('' for none) from the reference's Scheduler table."""
    text = DOC.read_text()
    section = text.split("## Scheduler arguments and their variables", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| `"):
            continue
        argument = re.match(r"`(\w+)`", cells[0])
        assert argument, line
        variable = re.fullmatch(r"`(SOLOIST_\w+)`", cells[1])
        rows[argument.group(1)] = variable.group(1) if variable else ""
    return rows


def test_the_reference_table_lists_every_argument_and_its_variable() -> None:
    """The table names each Scheduler argument once with the variable the code reads; only
    an argument that is an object (clock) has none."""
    parameters = [p for p in inspect.signature(Scheduler.__init__).parameters if p != "self"]
    table = _table()
    assert sorted(table) == sorted(parameters)
    assert {name: var for name, var in table.items() if var} == VARIABLES
    assert [name for name, var in table.items() if not var] == ["clock"]


def test_every_variable_sets_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no argument, each SOLOIST_* variable gives its setting."""
    assert sorted(FROM_ENV) == sorted(VARIABLES)
    for variable, text, _ in FROM_ENV.values():
        monkeypatch.setenv(variable, text)
    app = Scheduler()
    for name, (_, _, expected) in FROM_ENV.items():
        assert _config_value(app, name) == expected, name


def test_arguments_win_over_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """An argument given to Scheduler(...) wins over its variable."""
    for variable, text, _ in FROM_ENV.values():
        monkeypatch.setenv(variable, text)
    args = {name: given for name, (given, _) in ARGUMENTS.items() if name != "store"}
    app = Scheduler(ARGUMENTS["store"][0], **args)  # type: ignore[arg-type]
    for name, (_, expected) in ARGUMENTS.items():
        assert _config_value(app, name) == expected, name


def test_defaults_apply_without_arguments_or_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without argument or variable (or with an empty variable) the documented defaults hold."""
    monkeypatch.setenv("SOLOIST_CONCURRENCY", "")
    config = Scheduler("memory://").config
    assert (config.concurrency, config.max_leaked_threads) == (10, 10)
    assert (config.poll_interval, config.grace_period) == (
        timedelta(seconds=1),
        timedelta(seconds=30),
    )
    assert (config.misfire_grace, config.partitions, config.migrate) == (
        timedelta(seconds=12),
        64,
        True,
    )


@pytest.mark.parametrize(("variable", "text"), [(v, t) for v, t in BAD.items() if t])
def test_a_bad_variable_is_named_with_the_expected_form(
    monkeypatch: pytest.MonkeyPatch, variable: str, text: str
) -> None:
    """A bad value from the environment raises ConfigError naming the variable (or, for
    the store URL, the value) and saying what is expected."""
    monkeypatch.setenv(variable, text)
    with pytest.raises(ConfigError, match="expected") as info:
        Scheduler(None if variable == "SOLOIST_STORE_URL" else "memory://")
    message = str(info.value)
    assert repr(text) in message or text in message
    if variable != "SOLOIST_STORE_URL":
        assert variable in message


def test_a_bad_argument_is_named_as_the_argument() -> None:
    """A bad argument names the argument, not the variable."""
    with pytest.raises(ConfigError, match=r"invalid concurrency 0: expected an integer >= 1"):
        Scheduler("memory://", concurrency=0)
    with pytest.raises(ConfigError, match=r"invalid migrate 2: expected true or false"):
        Scheduler("memory://", migrate=2)  # type: ignore[arg-type]
