"""A Griffe extension for the docs build: render Sphinx cross-reference roles.

soloist's docstrings use reST roles (``:class:`Store```, ``:meth:`aenqueue```) and double
backquotes, which Markdown would print as they are. This turns ``:role:`target``` into
```target``` (code) and ````x```` into ```x```, in the docs only; the source stays as
written.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj):`~?([^`]+)`")
_DOUBLE = re.compile(r"``([^`]+)``")


def to_markdown(text: str) -> str:
    """Docstring text with Sphinx roles and reST inline literals as Markdown code."""
    return _DOUBLE.sub(r"`\1`", _ROLE.sub(r"`\1`", text))


class SphinxRoles(Extension):
    """Rewrites each docstring once it is loaded."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
