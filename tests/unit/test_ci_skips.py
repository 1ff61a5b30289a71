"""The one rule for skips (tests/ci.py): a missing server, binary or module skips a test,
except in CI, where it fails; CI is read in any case."""

from __future__ import annotations

import pytest

from ci import in_ci, missing, require


@pytest.mark.parametrize("value", ["true", "True", "TRUE", " true ", "1", "yes", "Yes"])
def test_ci_is_read_in_any_case(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """CI=true, CI=True, CI=TRUE, CI=1 and CI=yes all mean CI, and a missing need fails."""
    monkeypatch.setenv("CI", value)
    assert in_ci()
    with pytest.raises(pytest.fail.Exception, match="no server"):
        missing("no server")
    with pytest.raises(pytest.fail.Exception, match="no_such_module_here"):
        require("no_such_module_here")


@pytest.mark.parametrize("value", [None, "", "false", "0", "no"])
def test_outside_ci_a_missing_need_skips(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    """Without CI (unset, empty, false, 0, no), a missing need skips with its reason."""
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert not in_ci()
    with pytest.raises(pytest.skip.Exception, match="no server"):
        missing("no server")
    assert require("json").dumps([]) == "[]"
