"""Store URLs shown to people: one masking rule for logs, errors and status pages."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import parse_qsl

from soloist.durations import parse_duration
from soloist.errors import ConfigError

__all__ = [
    "DEFAULT_HISTORY_AGE",
    "DEFAULT_HISTORY_MAX",
    "Retention",
    "history_bounds",
    "mask_url",
    "query_options",
    "scrub",
]

#: Finished occurrences a SQL store keeps by default (Redis's default too).
DEFAULT_HISTORY_MAX = 100_000
#: How long a SQL store keeps finished occurrences by default (Redis's default too).
DEFAULT_HISTORY_AGE = timedelta(days=30)


@dataclass(frozen=True)
class Retention:
    """How much history a store keeps (its URL's ``history_max`` and ``history_age``): the
    newest ``history_max`` finished occurrences (0: no count limit), and those finished
    within ``history_age`` (None: no age limit). A store that has one as its ``retention``
    attribute is pruned to it by the runtime's pruner
    (:class:`soloist.runtime.pruner.Pruner`)."""

    history_max: int = DEFAULT_HISTORY_MAX
    history_age: timedelta | None = DEFAULT_HISTORY_AGE

    @property
    def bounded(self) -> bool:
        """Whether anything is ever pruned."""
        return self.history_max > 0 or self.history_age is not None


_PASSWORD_PARAM = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (in the userinfo or a ``password``
    query parameter), fit for status pages, logs and errors; the rest is left as written."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    if "@" in authority:
        userinfo, _, hostport = authority.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        authority = f"{user}{':***' if colon else ''}@{hostport}"
    tail = _PASSWORD_PARAM.sub(r"\1***", tail)
    return f"{scheme}{sep}{authority}{slash}{tail}"


def scrub(text: str, password: str | None) -> str:
    """``text`` (a driver's error message) with ``password``, if any, masked."""
    return text.replace(password, "***") if password else text


def query_options(query: str, allowed: Sequence[str], shown: str, kind: str) -> dict[str, str]:
    """The options of a store URL's query (``kind``: ``Redis``, ``etcd``, for messages;
    ``shown``: the URL, masked): ConfigError for one not in ``allowed`` or given twice."""
    options: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in allowed:
            raise ConfigError(
                f"unknown option {key!r} in {kind} store URL {shown!r}: expected one of "
                + ", ".join(allowed)
            )
        if key in options:
            raise ConfigError(f"option {key!r} is given twice in {kind} store URL {shown!r}")
        options[key] = value
    return options


def history_bounds(
    options: dict[str, str], shown: str, kind: str, default_max: int, default_age: timedelta
) -> tuple[int, timedelta | None]:
    """``history_max`` and ``history_age`` of a store URL's options (defaults as given;
    ``0`` is no limit: an age of None)."""
    text = options.get("history_max")
    history_max = default_max
    if text is not None:
        if not text.isdigit():
            raise ConfigError(
                f"invalid history_max {text!r} in {kind} store URL {shown!r}: expected a "
                "whole number of occurrences (0: no limit)"
            )
        history_max = int(text)
    age = options.get("history_age")
    history_age = default_age
    if age is not None:
        try:
            history_age = parse_duration(age if age != "0" else 0, allow_zero=True)
        except ConfigError:
            raise ConfigError(
                f"invalid history_age {age!r} in {kind} store URL {shown!r}: expected a "
                "duration such as '30d', '12h' or '90m' (0: no limit)"
            ) from None
    return history_max, history_age if history_age > timedelta(0) else None
