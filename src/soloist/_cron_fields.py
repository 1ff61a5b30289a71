"""Why cronsim refused a cron expression, field by field, for the error message.

cronsim (which parses and evaluates every expression) says only which field is bad
(``Bad minute``). This module re-reads that one field with the same grammar to say what
is wrong with it (``minute field '61' is out of range 0-59``); it never decides whether an
expression is valid, so it cannot disagree with cronsim about what runs.
"""

from __future__ import annotations

#: cronsim's field names, in the order of a 6-field expression, with their ranges.
FIELDS = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
RANGES = {
    "second": (0, 59),
    "minute": (0, 59),
    "hour": (0, 23),
    "day-of-month": (1, 31),
    "month": (1, 12),
    "day-of-week": (0, 7),
}
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_NAMES = {"month": MONTHS, "day-of-week": DAYS}


def field_problem(cronsim_message: str, fields: list[str]) -> str | None:
    """What is wrong with the field that cronsim's ``Bad <field>`` names, among the 5 or
    6 ``fields`` of the expression, or None if the message names no field."""
    name = cronsim_message.removeprefix("Bad ").strip()
    if name not in FIELDS or len(fields) not in (5, 6):
        return None
    index = FIELDS.index(name) - (6 - len(fields))
    if index < 0:
        return None
    text = fields[index]
    found = _problem(name, text.upper())
    if found is None and name == "day-of-month":
        return (
            f"day-of-month field {text!r} never comes in month field {fields[index + 1]!r} "
            "(no such date)"
        )
    if found is None:
        return f"{name} field {text!r} is not valid"
    piece, problem = found
    if piece is None or piece == text.upper():
        return f"{name} field {text!r} {problem}"
    return f"{name} field {text!r}: {piece!r} {problem}"


#: A problem: the piece of the field at fault (None: the field as a whole) and what is
#: wrong with it.
Problem = tuple[str | None, str]


def _problem(name: str, text: str) -> Problem | None:
    """The first problem of one field (upper case), or None."""
    for term in text.split(","):
        if term == "":
            return None, "has an empty item in its list"
        found = _term_problem(name, term)
        if found is not None:
            return found
    return None


def _term_problem(name: str, term: str) -> Problem | None:
    if term == "*" or (name == "day-of-month" and term in ("L", "LW")):
        return None
    if name == "day-of-week" and term.endswith("L"):
        return _value_problem(name, term[:-1], names=False)
    if name == "day-of-week" and "#" in term:
        day, _, nth = term.partition("#")
        if not nth.isdigit() or not 1 <= int(nth) <= 5:
            return nth, "is not an nth day: expected 1 to 5"
        return _value_problem(name, day)
    if "/" in term:
        base, _, step = term.partition("/")
        if not step.isdigit() or int(step) == 0:
            return step, "is not a step: expected a whole number >= 1"
        return _term_problem(name, base)
    if "-" in term:
        first, _, last = term.partition("-")
        problem = _value_problem(name, first) or _value_problem(name, last)
        if problem is not None:
            return problem
        if _number(name, last) < _number(name, first):
            return term, "is a range that runs backwards: expected start <= end"
        return None
    return _value_problem(name, term)


def _value_problem(name: str, value: str, *, names: bool = True) -> Problem | None:
    low, high = RANGES[name]
    known = _NAMES.get(name) if names else None
    if known is not None and value in known:
        return None
    if not value:
        return None, f"has a missing number: expected a number {low}-{high}"
    if not value.isdigit():
        expected = f"a number {low}-{high}"
        if known is not None:
            expected += f" or a name {known[0]}-{known[-1]}"
        return value, f"is not a number: expected {expected}"
    if not low <= int(value) <= high:
        return value, f"is out of range {low}-{high}"
    return None


def _number(name: str, value: str) -> int:
    known = _NAMES.get(name)
    if known is not None and value in known:
        return known.index(value) + (1 if name == "month" else 0)
    return int(value)
