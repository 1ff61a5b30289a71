"""Store URLs shown to people: one masking rule for logs, errors and status pages."""

from __future__ import annotations

import re

__all__ = ["mask_url", "scrub"]

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
