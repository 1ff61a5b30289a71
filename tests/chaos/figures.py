"""The figures of a chaos scenario: what a fault lost or doubled, counted two ways.

The store's history says what soloist *recorded*; the completions file written by the
app's handlers (``apps/workload.py``) says what the handlers *did*, independently of
soloist. From both:

- ``tasks_lost``: queued tasks whose handler never completed (absent from the store,
  ended ``dead``, or recorded ``succeeded`` with no completion behind it);
- ``outcomes_lost``: occurrences (tasks or recurring instants) whose handler completed but
  which did not end ``succeeded``;
- ``instants_missing``: whole seconds of the every-second job, from its first plan time to
  ``until``, with no successful, completed run, unless the overlap policy skipped it
  *because its previous instant was really running at its due time* (counted apart as
  ``overlap_skips``: the default ``overlap="skip"`` says so). An instant skipped because a
  backlog was claimed at once is missing;
- ``instants_doubled``: instants with more than one occurrence in the store, or completed
  by handlers of more than one occurrence, or off the one-second grid;
- ``completions_doubled``: handler completions beyond the first, per task and per
  instant. A kill (or a freeze, or a cut from the store, past the lease) that lands between
  a handler's side effect and its outcome write makes one; nothing else may.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from soloist.models import Attempt, Kind, Occurrence, State

#: The recurring job of the workload app, and its period.
TICK = "tick"
PERIOD = timedelta(seconds=1)
#: How far back to look for the running run that justifies an overlap skip.
OVERLAP_LOOKBACK = timedelta(minutes=2)


@dataclass(frozen=True)
class Completion:
    """One line of the completions file: a handler finished its side effect."""

    occurrence_id: str
    key: str  # "n=<n>" for a task, the plan time (ISO) for an instant
    instance_id: str
    pid: int
    token: int


def read_completions(path: Path) -> list[Completion]:
    """The completions in ``path`` (none if it does not exist yet)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 5:  # a line cut by a kill -9 mid-write would be shorter
            out.append(Completion(parts[0], parts[1], parts[2], int(parts[3]), int(parts[4])))
    return out


@dataclass
class Figures:
    tasks_lost: int = 0
    outcomes_lost: int = 0
    instants_missing: int = 0
    instants_doubled: int = 0
    completions_doubled: int = 0
    # Context, not verdicts.
    tasks: int = 0
    instants: int = 0
    overlap_skips: int = 0
    crashes: int = 0
    details: list[str] = field(default_factory=list)

    LOSSES = ("tasks_lost", "outcomes_lost", "instants_missing", "instants_doubled")

    def line(self) -> str:
        figures = " ".join(
            f"{name}={getattr(self, name)}" for name in (*self.LOSSES, "completions_doubled")
        )
        return (
            f"{figures} (tasks={self.tasks} instants={self.instants} "
            f"overlap_skips={self.overlap_skips} crashes={self.crashes})"
        )

    def report(self, limit: int = 30) -> str:
        shown = self.details[:limit]
        more = len(self.details) - len(shown)
        return "\n".join([self.line(), *shown, *([f"... {more} more"] if more > 0 else [])])

    def losses(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.LOSSES}


def compute(
    history: Iterable[Occurrence],
    completions: Iterable[Completion],
    *,
    tasks: Iterable[int] = (),
    instants: tuple[datetime, datetime] | None = None,
    attempts: Callable[[str], list[Attempt]] = lambda _id: [],
) -> Figures:
    """The figures of a run: ``tasks`` are the ``n`` of the queued tasks, ``instants`` the
    (first, last) plan times of the every-second job that must have run; ``attempts`` reads
    an occurrence's audit log (to judge overlap skips)."""
    history = list(history)
    done_by_key: dict[str, list[Completion]] = defaultdict(list)
    for c in completions:
        done_by_key[c.key].append(c)
    fig = Figures(crashes=sum(getattr(o, "crashes", 0) for o in history))

    queued: dict[int, list[Occurrence]] = defaultdict(list)
    for occ in history:
        if occ.kind is Kind.TASK and isinstance(occ.payload.get("n"), int):
            queued[occ.payload["n"]].append(occ)
    expected = sorted(set(tasks))
    fig.tasks = len(expected)
    for n in expected:
        occs, done = queued.get(n, []), done_by_key.get(f"n={n}", [])
        fig.completions_doubled += _doubles(fig, f"task n={n}", done)
        if len(occs) != 1:
            fig.tasks_lost += not done
            fig.details.append(f"task n={n}: {len(occs)} occurrences in the store")
            continue
        occ = occs[0]
        if not done:
            fig.tasks_lost += 1
            fig.details.append(f"task n={n}: never completed; {_describe(occ)}")
        elif occ.state is not State.SUCCEEDED:
            fig.outcomes_lost += 1
            fig.details.append(f"task n={n}: completed, but {_describe(occ)}")

    if instants is not None:
        _instants(fig, history, done_by_key, instants, attempts)
    return fig


def _instants(
    fig: Figures,
    history: list[Occurrence],
    done_by_key: dict[str, list[Completion]],
    window: tuple[datetime, datetime],
    attempts: Callable[[str], list[Attempt]],
) -> None:
    first, last = window
    ticks = [o for o in history if o.job == TICK and first <= o.plan_time <= last]
    by_plan: dict[datetime, list[Occurrence]] = defaultdict(list)
    for occ in ticks:
        by_plan[occ.plan_time].append(occ)
    grid = [first + k * PERIOD for k in range(int((last - first) / PERIOD) + 1)]
    fig.instants = len(grid)
    off_grid = sorted(set(by_plan) - set(grid))
    fig.instants_doubled += len(off_grid)
    fig.details += [f"instant {t.isoformat()}: off the 1 s grid" for t in off_grid]
    for t in grid:
        occs = by_plan.get(t, [])
        done = done_by_key.get(t.isoformat(), [])
        fig.completions_doubled += _doubles(fig, f"instant {t.isoformat()}", done)
        if len(occs) > 1 or len({c.occurrence_id for c in done}) > 1:
            fig.instants_doubled += 1
            fig.details.append(
                f"instant {t.isoformat()}: {len(occs)} occurrences, {len(done)} runs"
            )
        if not occs:
            fig.instants_missing += 1
            fig.details.append(f"instant {t.isoformat()}: never planned")
            continue
        occ = occs[0]
        if occ.state is State.SUCCEEDED and done:
            continue
        if done:
            fig.outcomes_lost += 1
            fig.details.append(f"instant {t.isoformat()}: completed, but {_describe(occ)}")
        elif occ.state is State.SKIPPED and _overlapped(occ, ticks, attempts):
            fig.overlap_skips += 1
        else:
            fig.instants_missing += 1
            why = _describe(occ)
            if occ.state is State.SKIPPED:
                why += _blockers(occ, ticks, attempts)
            fig.details.append(f"instant {t.isoformat()}: {why}")


def _overlapped(
    skipped: Occurrence, ticks: list[Occurrence], attempts: Callable[[str], list[Attempt]]
) -> bool:
    """Whether an earlier instant of the stream was running at ``skipped``'s due time
    (then ``overlap="skip"`` skipping it is the policy, not a loss)."""
    if skipped.error_code != "overlap":
        return False
    due = skipped.due_at
    for other in ticks:
        if not (due - OVERLAP_LOOKBACK <= other.plan_time < skipped.plan_time):
            continue
        if other.state is State.RUNNING and other.started_at and other.started_at <= due:
            return True
        for run in attempts(other.id):
            if run.started_at is not None and run.started_at <= due <= run.finished_at:
                return True
    return False


def _blockers(
    skipped: Occurrence, ticks: list[Occurrence], attempts: Callable[[str], list[Attempt]]
) -> str:
    """Which earlier instants were running when ``skipped`` was skipped (a diagnosis)."""
    at = skipped.finished_at
    if at is None:
        return ""
    found = []
    for other in ticks:
        if not (at - OVERLAP_LOOKBACK <= other.plan_time < skipped.plan_time):
            continue
        for run in attempts(other.id):
            if run.started_at is not None and run.started_at <= at <= run.finished_at:
                found.append(
                    f"{other.plan_time.time()} {run.outcome} {run.started_at.time()}-"
                    f"{run.finished_at.time()} on {run.instance_id}"
                )
        if other.state is State.RUNNING:
            found.append(f"{other.plan_time.time()} still running on {other.instance_id}")
    if not found:
        # Say what the previous instant went through instead.
        before = [o for o in ticks if o.plan_time < skipped.plan_time]
        if before:
            prev = max(before, key=lambda o: o.plan_time)
            runs = "; ".join(
                f"{r.outcome} {r.started_at.time() if r.started_at else '?'}-"
                f"{r.finished_at.time()} on {r.instance_id}"
                for r in attempts(prev.id)
            )
            found.append(
                f"none (previous {prev.plan_time.time()}: {_describe(prev)}, "
                f"started {prev.started_at.time() if prev.started_at else '?'}; "
                f"attempts: {runs or 'none recorded'})"
            )
    return f"; skipped at {at.time()}, running then: {', '.join(found) or 'none'}"


def _doubles(fig: Figures, what: str, done: list[Completion]) -> int:
    if len(done) <= 1:
        return 0
    runs = ", ".join(f"{c.instance_id}/pid {c.pid}/token {c.token}" for c in done)
    fig.details.append(f"{what}: completed {len(done)} times ({runs})")
    return len(done) - 1


def _describe(occ: Occurrence) -> str:
    text = f"{occ.state.value}"
    if occ.error_code:
        text += f"/{occ.error_code}"
    return (
        f"{text} (attempt {occ.attempt}, crashes {getattr(occ, 'crashes', 0)}, "
        f"token {occ.fencing_token}, "
        f"on {occ.instance_id}: {occ.error_message or ''})"
    )
