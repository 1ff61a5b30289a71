"""The HTTP settings: ``--http`` / ``SOLOIST_HTTP`` addresses and ``SOLOIST_TOKEN``."""

from __future__ import annotations

import pytest

from soloist import Scheduler
from soloist.config import parse_http_address
from soloist.errors import ConfigError


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("8080", ("127.0.0.1", 8080)),
        (8080, ("127.0.0.1", 8080)),
        (":8080", ("127.0.0.1", 8080)),
        ("0.0.0.0:9000", ("0.0.0.0", 9000)),
        ("localhost:0", ("localhost", 0)),
        ("[::1]:8080", ("::1", 8080)),
    ],
)
def test_http_addresses_default_to_localhost(given: object, expected: tuple[str, int]) -> None:
    """A bare port listens on 127.0.0.1; a host is used only when given."""
    assert parse_http_address(given) == expected


@pytest.mark.parametrize(
    "given", ["", "host:", "host:http", "1.2.3.4:70000", "::1:8080", "[::1]8080", "-1", True, 1.5]
)
def test_bad_http_addresses_name_the_value(given: object) -> None:
    """A bad address is a ConfigError naming the value and the expected HOST:PORT form."""
    with pytest.raises(ConfigError, match="expected HOST:PORT") as info:
        parse_http_address(given)
    assert repr(given) in str(info.value)


def test_http_and_token_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """SOLOIST_HTTP and SOLOIST_TOKEN configure a Scheduler; arguments win over them."""
    monkeypatch.setenv("SOLOIST_HTTP", "9100")
    monkeypatch.setenv("SOLOIST_TOKEN", "from-env")
    app = Scheduler("memory://")
    assert app.config.http == ("127.0.0.1", 9100)
    assert app.config.token == "from-env"
    assert "from-env" not in repr(app.config)
    app = Scheduler("memory://", http="0.0.0.0:9200", token="given")
    assert (app.config.http, app.config.token) == (("0.0.0.0", 9200), "given")


def test_no_http_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --http or SOLOIST_HTTP nothing listens and actions are disabled."""
    monkeypatch.delenv("SOLOIST_HTTP", raising=False)
    monkeypatch.delenv("SOLOIST_TOKEN", raising=False)
    app = Scheduler("memory://")
    assert app.config.http is None and app.config.token is None


def test_bad_env_address_names_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad SOLOIST_HTTP fails at construction, naming the value."""
    monkeypatch.setenv("SOLOIST_HTTP", "localhost:99999")
    with pytest.raises(ConfigError, match="'localhost:99999'"):
        Scheduler("memory://")


def test_reconfigure_sets_the_http_address_and_token_through_one_checked_path() -> None:
    """``reconfigure(http=..., token=...)`` (what ``soloist run --http/--token`` uses)
    replaces them with the constructor's checks (Config.override), keeps what is not
    given, and leaves the configuration as it was when a value is refused."""
    app = Scheduler("memory://", instance_id="w1", http="9000", token="old")
    app.reconfigure(http="0.0.0.0:9300", token="new")
    assert (app.config.http, app.config.token) == (("0.0.0.0", 9300), "new")
    assert (app.instance_id, app.config.store_url) == ("w1", "memory://")
    before = app.config
    for bad, match in (
        ({"http": "localhost:99999"}, "'localhost:99999'"),
        ({"token": "  "}, "invalid token"),
        ({"instance_id": ""}, "invalid instance id ''"),
        ({"mode": "solo"}, "invalid mode 'solo'"),
        ({"store": "ftp://x"}, "'ftp://x'"),
    ):
        with pytest.raises(ConfigError, match=match):
            app.reconfigure(**bad)  # type: ignore[arg-type]
        assert app.config is before


def test_override_with_nothing_changes_nothing() -> None:
    """Config.override() without a value returns an equal configuration."""
    config = Scheduler("memory://", http="9000", token="t").config
    assert config.override() == config
