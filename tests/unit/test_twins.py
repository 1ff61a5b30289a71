"""The sync twins of the facade's operations are built from their async sources
(soloist.bridge.sync_twin), so that a twin cannot drift from its source."""

from __future__ import annotations

import inspect

import pytest

from soloist import Scheduler
from soloist.errors import SoloistError
from soloist.scheduler import Schedules

#: Coroutine methods that are not short operations with a sync twin: the life cycle and
#: the store of the running loop.
NOT_TWINNED = {"start", "stop", "serve", "astore", "aclose"}


def async_operations(owner: type) -> list[str]:
    return [
        name
        for name, value in vars(owner).items()
        if inspect.iscoroutinefunction(value) and not name.startswith("_")
    ]


@pytest.mark.parametrize("owner", [Scheduler, Schedules], ids=lambda o: o.__name__)
def test_each_async_operation_has_a_documented_twin_with_its_signature(owner: type) -> None:
    """Every public coroutine ``aNAME`` (but the life cycle's) has a docstring and a sync
    ``NAME`` with exactly its parameters and return annotation, whose docstring is the
    source's plus a line naming it."""
    names = [name for name in async_operations(owner) if name not in NOT_TWINNED]
    assert len(names) >= 4
    for name in names:
        source, twin = getattr(owner, name), getattr(owner, name[1:])
        assert source.__doc__, name
        assert not inspect.iscoroutinefunction(twin), name
        assert inspect.signature(twin) == inspect.signature(source), name
        assert twin.__name__ == name[1:] and twin.__qualname__ == f"{owner.__name__}.{name[1:]}"
        assert twin.__doc__.startswith(inspect.cleandoc(source.__doc__)), name
        assert f":meth:`{name}`" in twin.__doc__, name


async def test_a_twin_called_inside_a_running_loop_names_the_async_twins() -> None:
    """A sync twin called from a running event loop refuses, pointing to the async ones,
    and leaves no coroutine unawaited."""
    app = Scheduler("memory://")
    with pytest.raises(SoloistError, match="use its async twin"):
        app.history()
    with pytest.raises(SoloistError, match="use its async twin"):
        app.schedules.list()


def test_schedules_add_and_aadd_take_the_same_typed_options() -> None:
    """``schedules.aadd`` names its options like ``add`` (no ``**options``)."""
    parameters = inspect.signature(Schedules.aadd).parameters.values()
    assert all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in parameters)


def test_a_sync_twin_runs_an_override_of_its_source() -> None:
    """The twin calls the async method found on the instance, as a hand-written twin did:
    a subclass's override (or a test's patch) applies to the sync call too."""

    class Audited(Scheduler):
        async def atrigger(self, job: str) -> str:
            return f"audited {job}"

    app = Audited("memory://")
    try:
        assert app.trigger("nightly") == "audited nightly"
    finally:
        app.close()
