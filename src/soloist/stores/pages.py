"""Pages of jobs with their last outcome: the values of the store capability ``pages_jobs``
(:class:`~soloist.stores.core.PagesJobs`) and what every store shares to answer it.

The operator's views (``GET /status``, ``GET /api/jobs``, ``soloist status``, the
dashboard) cost a bounded number of store round trips, whatever the number of jobs: one
page of jobs, each with its last outcome, is one query (one statement, one script call, a
few range reads), and the summary (:class:`JobCounts`) is one more.

* **Order.** Jobs by name, code point by code point: the order of the names' UTF-8 bytes,
  which is SQLite's ``BINARY``, PostgreSQL's ``COLLATE "C"``, Redis's lexical ranges and
  etcd's keys. A page continues *after* a name (the cursor), so pages stay stable while
  jobs are added or deleted: none is shown twice, and a job present all along is shown
  once.
* **The last outcome** of a job is its finished occurrence (``succeeded``, ``dead`` or
  ``skipped``) with the newest plan time, ties the newest inserted: the first finished row
  that ``soloist history --job NAME`` lists. None when the job has none (it never ran, or
  history retention deleted them; the SQL stores and memory keep each job's newest).
* **Filters and the scan bound.** A name prefix narrows the range of names read, at no
  cost. ``paused`` and ``outcome`` are tested job by job, so a call examines at most
  :data:`JOB_SCAN` jobs (from the cursor on) when it has one: a page may then hold fewer
  than ``limit`` jobs, even none, while ``next_after`` says where to go on. Paging until
  ``next_after`` is None visits every matching job exactly once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from soloist.errors import ConfigError
from soloist.models import JobRecord, Occurrence, State

__all__ = [
    "DEFAULT_PAGE",
    "JOB_SCAN",
    "MAX_PAGE",
    "NEVER",
    "OUTCOMES",
    "JobCounts",
    "JobPage",
    "JobQuery",
    "JobView",
    "LastOutcome",
    "check_prefix",
    "check_query",
    "page_in_python",
    "page_of",
    "prefix_end",
]

#: Jobs per page by default, and at most.
DEFAULT_PAGE = 50
MAX_PAGE = 500
#: Jobs a call examines at most when it filters by ``paused`` or ``outcome``.
JOB_SCAN = 2000
#: The ``outcome`` filter of jobs without a last outcome.
NEVER = "none"
#: The values of the ``outcome`` filter.
OUTCOMES = (State.SUCCEEDED.value, State.DEAD.value, State.SKIPPED.value, NEVER)


@dataclass(frozen=True)
class LastOutcome:
    """What a job's last outcome shows (see the module docstring): the occurrence's id,
    its state (``succeeded``, ``dead`` or ``skipped``), plan and finish time, error code."""

    id: str
    state: State
    plan_time: datetime
    finished_at: datetime | None
    error_code: str | None

    @classmethod
    def of(cls, occ: Occurrence) -> LastOutcome:
        return cls(occ.id, occ.state, occ.plan_time, occ.finished_at, occ.error_code)


@dataclass(frozen=True)
class JobView:
    """A job and its last outcome (None: it has none)."""

    record: JobRecord
    last: LastOutcome | None


@dataclass(frozen=True)
class JobPage:
    """One page: the jobs, by name, and ``next_after``, the cursor of the next page (the
    ``after`` to ask with), or None when no job is left to examine."""

    jobs: list[JobView]
    next_after: str | None


@dataclass(frozen=True)
class JobCounts:
    """How many jobs have names with the prefix asked, and how many of them are paused
    (None where the store cannot count them without reading every job: Redis, etcd)."""

    total: int
    paused: int | None


@dataclass(frozen=True)
class JobQuery:
    """Which page of jobs: those whose names start with ``prefix``, after the name
    ``after`` (None: from the first), paused or not (None: both), whose last outcome is
    ``outcome`` (one of :data:`OUTCOMES`; None: any), at most ``limit`` (1 to
    :data:`MAX_PAGE`). :func:`check_query` checks one."""

    after: str | None = None
    prefix: str = ""
    paused: bool | None = None
    outcome: str | None = None
    limit: int = DEFAULT_PAGE

    @property
    def filtered(self) -> bool:
        """Whether jobs are tested one by one (``paused`` or ``outcome``)."""
        return self.paused is not None or self.outcome is not None

    @property
    def scan(self) -> int:
        """How many jobs the call examines at most (from the start, in name order)."""
        return max(self.limit, JOB_SCAN) if self.filtered else self.limit

    @property
    def start(self) -> tuple[str, bool]:
        """Where the names read start: ``(name, inclusive)``, the later of the cursor
        (exclusive) and the prefix (inclusive)."""
        if self.after is not None and self.after >= self.prefix:
            return self.after, False
        return self.prefix, True

    @property
    def end(self) -> str | None:
        """The first name past the prefix's range (exclusive), None: no end."""
        return prefix_end(self.prefix)

    def contains(self, name: str) -> bool:
        """Whether ``name`` is in the range of names read."""
        start, inclusive = self.start
        end = self.end
        return (name >= start if inclusive else name > start) and (end is None or name < end)

    def wants(self, record: JobRecord, last: LastOutcome | None) -> bool:
        """Whether an examined job matches the filters."""
        if self.paused is not None and record.paused != self.paused:
            return False
        if self.outcome is None:
            return True
        return (last.state.value if last is not None else NEVER) == self.outcome


def prefix_end(prefix: str) -> str | None:
    """The least string greater than every string that starts with ``prefix`` (None for
    ``""``, or a prefix of only U+10FFFF characters): names ``>= prefix`` and ``<`` it are
    exactly those with the prefix, in code point (UTF-8 byte) order."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1]) + 1
        if code == 0xD800:
            code = 0xE000  # surrogates are not characters of UTF-8 text
        if code <= 0x10FFFF:
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


def _printable(value: object) -> bool:
    """A string without control characters that is valid Unicode text (no lone surrogate:
    the form a command line's invalid UTF-8 bytes take in Python, which no store can
    encode)."""
    return isinstance(value, str) and not any(
        ord(c) < 32 or 0xD800 <= ord(c) <= 0xDFFF for c in value
    )


def check_prefix(prefix: object) -> str:
    """``prefix`` if it can start a job name: UTF-8 text without control characters."""
    if not _printable(prefix):
        raise ConfigError(
            f"invalid prefix {prefix!r}: expected UTF-8 text without control characters"
        )
    assert isinstance(prefix, str)
    return prefix


def check_query(query: object) -> JobQuery:
    """``query`` if it is a :class:`JobQuery` whose values are in range, else ConfigError
    naming the bad value and what was expected."""
    if not isinstance(query, JobQuery):
        raise ConfigError(f"invalid job query {query!r}: expected a JobQuery")
    limit = query.limit
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ConfigError(f"invalid limit {limit!r}: expected an integer from 1 to {MAX_PAGE}")
    if query.after is not None and (not _printable(query.after) or not query.after):
        raise ConfigError(
            f"invalid cursor {query.after!r}: expected a job name (the next_after of a page)"
        )
    check_prefix(query.prefix)
    if query.paused is not None and not isinstance(query.paused, bool):
        raise ConfigError(f"invalid paused {query.paused!r}: expected True, False or None")
    if query.outcome is not None and query.outcome not in OUTCOMES:
        raise ConfigError(
            f"invalid outcome {query.outcome!r}: expected one of {', '.join(OUTCOMES)}"
        )
    return query


def page_of(
    matches: Sequence[JobView], query: JobQuery, more: bool, last_examined: str | None
) -> JobPage:
    """The page of a call that found ``matches`` (in name order, at most ``limit + 1``)
    among the jobs it examined (at most ``query.scan``, the last one ``last_examined``);
    ``more``: jobs of the range are left past the examined ones."""
    if len(matches) > query.limit:
        kept = list(matches[: query.limit])
        return JobPage(kept, kept[-1].record.name)
    return JobPage(list(matches), last_examined if more else None)


async def page_in_python(
    records: Iterable[JobRecord],
    query: JobQuery,
    lasts: Callable[[list[str]], Awaitable[Mapping[str, LastOutcome | None]]],
) -> JobPage:
    """The page of a store that filters in Python: ``records`` are the jobs of the
    query's range in name order (at least ``query.scan + 1`` of them when there are so
    many: more are not read); ``lasts(names)`` the last outcomes of ``names``, asked once,
    for only the jobs it needs."""
    examined: list[JobRecord] = []
    more = False
    for record in records:
        if len(examined) >= query.scan:
            more = True
            break
        examined.append(record)
    candidates = [r for r in examined if query.paused is None or r.paused == query.paused]
    if query.outcome is None:
        candidates = candidates[: query.limit + 1]
    found = await lasts([r.name for r in candidates]) if candidates else {}
    matches = [JobView(r, found.get(r.name)) for r in candidates]
    matches = [view for view in matches if query.wants(view.record, view.last)]
    return page_of(matches[: query.limit + 1], query, more, examined[-1].name if examined else None)
