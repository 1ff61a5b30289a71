"""Using a store that must already exist, without creating or changing anything.

Read-only commands (``soloist history``, ``show``, ``status``, ``jobs``) and
``Scheduler(..., migrate=False)`` never migrate: pointed at a mistyped path, another app's
database or an empty Redis prefix, they must say so, not create soloist's tables there.
A store that can tell declares the capability ``checks_schema``
(:class:`soloist.stores.core.Capabilities`): its ``schema_check()`` reads whether
it holds soloist's newest schema (without creating a file, schema, table or key) and
raises :class:`~soloist.errors.StoreUnavailableError` naming the store otherwise.
"""

from __future__ import annotations

from soloist.errors import StoreError, StoreUnavailableError
from soloist.stores.base import Store
from soloist.stores.core import checked

__all__ = ["require_schema", "schema_problem"]


async def require_schema(store: Store) -> None:
    """Check that ``store`` holds soloist's newest schema, creating nothing. Stores without
    persistence (memory) have nothing to check."""
    await checked(store).schema_check()


def schema_problem(
    where: str, found: int, needed: int, what: str, kind: str = "soloist"
) -> StoreError | None:
    """The error for a store at schema version ``found`` when this code needs ``needed``
    (``what``: what is missing when ``found`` is 0; ``kind`` of store, for the message), or
    None when they agree."""
    if found == needed:
        return None
    if found == 0:
        return StoreUnavailableError(
            f"no {kind} store at {where}: {what}; check the store URL (--store, "
            "SOLOIST_STORE_URL): a store is created by 'soloist migrate' or by a running "
            "instance"
        )
    if found < needed:
        return StoreUnavailableError(
            f"the soloist store at {where} has schema version {found}, this soloist needs "
            f"{needed}: upgrade it with 'soloist migrate' (or by starting an instance)"
        )
    return StoreError(
        f"the soloist store at {where} has schema version {found}, newer than this "
        f"soloist supports ({needed}): upgrade soloist"
    )
