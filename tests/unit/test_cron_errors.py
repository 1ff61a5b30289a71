"""A bad cron expression's error names the field at fault and what is wrong with it."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from soloist import cron
from soloist.errors import ScheduleError

FIELD_ERRORS = {
    "61 * * * *": "minute field '61' is out of range 0-59",
    "* 25 * * *": "hour field '25' is out of range 0-23",
    "* * 32 * *": "day-of-month field '32' is out of range 1-31",
    "* * 0 * *": "day-of-month field '0' is out of range 1-31",
    "* * * 13 *": "month field '13' is out of range 1-12",
    "* * * * 8": "day-of-week field '8' is out of range 0-7",
    "70 * * * * *": "second field '70' is out of range 0-59",
    "0 61 * * * *": "minute field '61' is out of range 0-59",
    "a * * * *": "minute field 'a' is not a number: expected a number 0-59",
    "* * * JANX *": "month field 'JANX' is not a number: expected a number 1-12 or a name JAN-DEC",
    "* * * * MON-XYZ": "day-of-week field 'MON-XYZ': 'XYZ' is not a number: expected a number "
    "0-7 or a name SUN-SAT",
    "1-70 * * * *": "minute field '1-70': '70' is out of range 0-59",
    "1,2,99 * * * *": "minute field '1,2,99': '99' is out of range 0-59",
    "*/0 * * * *": "minute field '*/0': '0' is not a step: expected a whole number >= 1",
    "5-1 * * * *": "minute field '5-1' is a range that runs backwards: expected start <= end",
    "* * * DEC-JAN *": "month field 'DEC-JAN' is a range that runs backwards",
    "1,,2 * * * *": "minute field '1,,2' has an empty item in its list",
    "-5 * * * *": "minute field '-5' has a missing number: expected a number 0-59",
    "* * * * 1#9": "day-of-week field '1#9': '9' is not an nth day: expected 1 to 5",
    "0 0 31 2 *": "day-of-month field '31' never comes in month field '2' (no such date)",
}


@pytest.mark.parametrize("expr", FIELD_ERRORS, ids=FIELD_ERRORS.values())
def test_a_bad_field_is_named_with_its_problem(expr: str) -> None:
    """The error names the expression, the bad field and its problem, not the field count."""
    with pytest.raises(ScheduleError) as info:
        cron(expr)
    message = str(info.value)
    assert message.startswith(f"invalid cron expression {expr!r}: {FIELD_ERRORS[expr]}")
    assert "5 fields" not in message


def test_a_wrong_number_of_fields_says_how_many_are_expected() -> None:
    """Only a wrong field count explains the expected fields."""
    with pytest.raises(ScheduleError, match=r"3 fields; expected 5 fields \(minute hour"):
        cron("* * *")


@pytest.mark.parametrize(
    "expr", ["1-5,10-20/5 * * * MON-FRI", "0 9 L * *", "0 9 * * 5L", "*/5 * * JAN,dec 1#2"]
)
def test_valid_expressions_are_still_accepted(expr: str) -> None:
    """Lists, ranges, steps, names and the L and # forms stay valid (cronsim decides)."""
    assert cron(expr).next_after(datetime(2030, 1, 1, tzinfo=timezone.utc)) is not None
