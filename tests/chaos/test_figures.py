"""The chaos figures count what they claim to (pure, fast: runs in every test run)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from soloist.models import Attempt, Kind, Occurrence, Overlap, State

from .figures import Completion, compute

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
S = timedelta(seconds=1)


def occ(
    oid: str,
    *,
    state: State = State.SUCCEEDED,
    plan: datetime = T0,
    n: int | None = None,
    started: datetime | None = None,
    finished: datetime | None = None,
    error: str | None = None,
) -> Occurrence:
    task = n is not None
    return Occurrence(
        id=oid,
        dedupe_key=oid,
        job="work" if task else "tick",
        task="work" if task else "tick",
        scope="",
        plan_time=plan,
        due_at=plan,
        kind=Kind.TASK if task else Kind.SCHEDULE,
        state=state,
        attempt=1,
        max_attempts=1,
        overlap=Overlap.ALLOW if task else Overlap.SKIP,
        payload={"n": n, "seconds": 0.1} if task else {},
        instance_id="a",
        lease_expires_at=None,
        fencing_token=1,
        created_at=plan,
        started_at=started or plan,
        finished_at=finished if finished is not None else plan + S / 10,
        error_code=error,
        error_message=None,
    )


def done(oid: str, key: str, instance: str = "a") -> Completion:
    return Completion(oid, key, instance, 1, 1)


def test_a_clean_run_has_every_figure_zero() -> None:
    """Tasks and instants that all succeeded once: every figure is 0."""
    history = [occ("t0", n=0), occ("t1", n=1)]
    history += [occ(f"i{k}", plan=T0 + k * S) for k in range(3)]
    runs = [done("t0", "n=0"), done("t1", "n=1")]
    runs += [done(f"i{k}", (T0 + k * S).isoformat()) for k in range(3)]
    fig = compute(history, runs, tasks=[0, 1], instants=(T0, T0 + 2 * S))
    assert fig.losses() == dict.fromkeys(fig.LOSSES, 0)
    assert (fig.completions_doubled, fig.tasks, fig.instants) == (0, 2, 3)


def test_lost_tasks_lost_outcomes_and_doubled_completions_are_counted() -> None:
    """A task never run, one run but not recorded, one run twice, one never stored, one
    recorded succeeded with no completion behind it: each counted where it belongs."""
    history = [
        occ("t0", n=0, state=State.DEAD, error="lease_expired"),
        occ("t1", n=1, state=State.DEAD, error="lease_expired"),
        occ("t2", n=2),
        occ("t4", n=4),
    ]
    runs = [done("t1", "n=1"), done("t2", "n=2", "a"), done("t2", "n=2", "b")]
    fig = compute(history, runs, tasks=[0, 1, 2, 3, 4])
    assert (fig.tasks_lost, fig.outcomes_lost, fig.completions_doubled) == (3, 1, 1)


def test_missing_and_doubled_instants_are_counted() -> None:
    """An instant never planned, one that failed, one planned twice: missing 2, doubled 1."""
    history = [
        occ("i0", plan=T0),
        occ("i2", plan=T0 + 2 * S, state=State.DEAD, error="handler_error"),
        occ("i3", plan=T0 + 3 * S),
        occ("i3b", plan=T0 + 3 * S),
    ]
    runs = [done("i0", T0.isoformat()), done("i3", (T0 + 3 * S).isoformat())]
    fig = compute(history, runs, instants=(T0, T0 + 3 * S))
    assert (fig.instants_missing, fig.instants_doubled) == (2, 1)


def test_an_overlap_skip_counts_only_if_the_previous_run_was_running_at_its_due_time() -> None:
    """Skipped while the previous instant really ran (its attempt spans the due time): a
    policy skip, not missing. Skipped because a backlog was claimed at once (the previous
    one started after the due time): missing."""
    late = T0 + 5 * S
    history = [
        occ("i0", plan=T0, started=T0, finished=T0 + 2.5 * S),
        occ("i1", plan=T0 + S, state=State.SKIPPED, error="overlap", finished=T0 + S),
        occ("i2", plan=T0 + 2 * S, state=State.SKIPPED, error="overlap", finished=T0 + 2 * S),
        occ("i3", plan=T0 + 3 * S, started=late, finished=late + S / 10),
        occ("i4", plan=T0 + 4 * S, state=State.SKIPPED, error="overlap", finished=late),
    ]
    attempts = {
        "i0": [Attempt("i0", 1, 1, "a", T0, T0 + 2.5 * S, "succeeded", None, None)],
        "i3": [Attempt("i3", 1, 1, "a", late, late + S / 10, "succeeded", None, None)],
    }
    runs = [done(o.id, o.plan_time.isoformat()) for o in history if o.state is State.SUCCEEDED]
    fig = compute(
        history,
        runs,
        instants=(T0, T0 + 4 * S),
        attempts=lambda oid: attempts.get(oid, []),
    )
    assert (fig.overlap_skips, fig.instants_missing) == (2, 1)
    assert "running then: " in "\n".join(fig.details)
