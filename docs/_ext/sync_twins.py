"""A Griffe extension for the docs build: show each sync twin as the method it is.

In the source a sync twin is one line, ``trigger = sync_twin(atrigger)``
(:func:`soloist.bridge.sync_twin`), which static analysis sees as an attribute. This turns
each such attribute into a method with its async source's parameters and return type, and
the docstring the twin has at run time (:func:`soloist.bridge.twin_docstring`).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

from griffe import Class, Docstring, ExprCall, ExprName, Extension, Function, ObjectNode

from soloist.bridge import twin_docstring


def _sibling(name: str) -> Any:
    """The module ``name`` of this folder (extensions are loaded by path, not as a package)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


to_markdown = _sibling("sphinx_roles").to_markdown


class SyncTwins(Extension):
    """Replaces ``name = sync_twin(aname)`` attributes of a class by methods."""

    def on_class_members(
        self, *, node: ast.AST | ObjectNode, cls: Class, agent: Any, **kwargs: Any
    ) -> None:
        for name, member in list(cls.members.items()):
            value = getattr(member, "value", None) if member.is_attribute else None
            if not isinstance(value, ExprCall) or str(value.function) != "sync_twin":
                continue
            argument = value.arguments[0]  # the source; then keywords (hop=...)
            source = cls.members[argument.name if isinstance(argument, ExprName) else ""]
            if not isinstance(source, Function) or source.docstring is None:
                raise ValueError(f"{cls.path}.{name}: sync_twin of a method without a docstring")
            text = to_markdown(twin_docstring(source.name, source.docstring.value))
            twin = Function(
                name,
                parameters=source.parameters,
                returns=source.returns,
                lineno=member.lineno,
                endlineno=member.endlineno,
                docstring=Docstring(text, parser=source.docstring.parser),
            )
            twin.labels = set(source.labels) - {"async"}
            cls.set_member(name, twin)
