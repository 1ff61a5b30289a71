"""Upgrading the keys of an older Redis store, once, from :meth:`RedisStore.migrate`.

Key layout 1 to 2 (the planning index): cursors were ``last|count`` in ``:cur:<job>`` and
no index existed. Every cursor found becomes ``last|count|last|slot`` and enters the
sorted set ``:plan`` at its last plan time, so the planner looks at each stream again and
plans from where it stopped. The cursor keys are read with ``SCAN`` in batches (never
``KEYS``), and each batch is rewritten by one script call that skips cursors already in
the new format, so two instances upgrading at once, or an upgrade cut short and run again,
do each cursor once.

Key layout 2 to 3 (each job's finished index): a job's last outcome is the newest member
of ``:fin:<job>``, its finished occurrences, which the scripts keep from layout 3 on; the
finished occurrences already there (the history, ``:done``) enter it here, :data:`BATCH`
per script call, from the newest end of the history. Entering one twice does nothing, so
an upgrade run twice, or at once by two instances, is harmless; the history's trim
deletes from its oldest end, so it moves no rank still to be read. (An upgrade rather than
a fallback walk of ``:job:<job>`` in the page's script: such a walk would be either
unbounded, as before, or wrong for a job whose last finished run lies deeper than it.)
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from soloist.models import stream_slot

__all__ = ["BATCH", "index_finished", "upgrade_cursors"]

#: Cursor keys asked for per SCAN step, and script arguments sent per call, about.
BATCH = 500
MAX_ARGS = 20_000


async def upgrade_cursors(
    client: Any, base: str, run: Callable[[list[object]], Awaitable[int]]
) -> int:
    """Put every cursor of the store at key base ``base`` into the planning index: SCAN
    the ``:cur:*`` keys with ``client``, and hand ``run`` (plan.lua's 'upgrade') the
    arguments of each batch: job, number of scopes, then scope and slot of each. Returns
    how many cursors were upgraded."""
    head = f"{base}:cur:"
    match = re.sub(r"([\\*?\[\]])", r"\\\1", head) + "*"
    upgraded = 0
    keys: list[str] = []
    async for key in client.scan_iter(match=match, count=BATCH):
        keys.append(key)
        if len(keys) >= BATCH:
            upgraded += await _upgrade(client, head, keys, run)
            keys = []
    if keys:
        upgraded += await _upgrade(client, head, keys, run)
    return upgraded


async def _upgrade(
    client: Any, head: str, keys: list[str], run: Callable[[list[object]], Awaitable[int]]
) -> int:
    """Upgrade the cursors of ``keys`` (each ``head + job``), in calls of at most about
    :data:`MAX_ARGS` arguments."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hkeys(key)
    upgraded = 0
    args: list[object] = []
    for key, scopes in zip(keys, await pipe.execute(), strict=True):
        job = key[len(head) :]
        args += [job, len(scopes)]
        args += [value for scope in scopes for value in (scope, stream_slot(job, scope))]
        if len(args) >= MAX_ARGS:
            upgraded, args = upgraded + await run(args), []
    if args:
        upgraded += await run(args)
    return upgraded


async def index_finished(run: Callable[[int, int], Awaitable[int]]) -> int:
    """Enter every finished occurrence of the history in its job's finished index: ``run``
    (pages.lua's 'index') with the first rank and the count of each batch, from the newest
    end, until a batch comes back short. Returns how many were read."""
    read = 0
    while True:
        got = await run(read, BATCH)
        read += got
        if got < BATCH:
            return read
