"""Retry policies: how many attempts an occurrence gets, how long to wait between them, and
which exceptions a handler raises are worth another attempt.

``retry_on`` and ``no_retry_on`` filter the exceptions a handler raises itself (recorded as
``handler_error``, ``handler_panic``, or ``timeout`` when the handler raised a
``TimeoutError`` of its own). They never change the two rules that are not about the
handler's code: a run cut by soloist's own ``timeout=`` is retried while attempts remain,
and a lost lease (a crash) spends no attempt at all (``max_crashes`` bounds those).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from soloist.durations import parse_duration
from soloist.errors import ConfigError

BACKOFF_KINDS = ("fixed", "exponential")

ExceptionClasses = tuple[type[BaseException], ...]
#: What ``retry_on`` / ``no_retry_on`` accept: one exception class or a tuple of them.
ExceptionFilter = type[BaseException] | ExceptionClasses


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` extra attempts after the first; delay ``base`` (fixed) or
    ``base * 2**(attempt-1)`` (exponential), capped at ``cap``, plus up to ``jitter`` x delay
    of random jitter so that failing jobs do not retry in lock step."""

    retries: int = 0
    backoff: str = "exponential"
    base: timedelta = timedelta(seconds=1)
    cap: timedelta = timedelta(minutes=10)
    jitter: float = 0.1
    #: Only these exceptions (and their subclasses) are retried; None: any exception.
    retry_on: ExceptionClasses | None = None
    #: These exceptions (and their subclasses) are never retried: the run is ``dead`` at
    #: once, with its error recorded. Checked before ``retry_on``.
    no_retry_on: ExceptionClasses = ()

    @classmethod
    def build(
        cls,
        retries: object = 0,
        backoff: object = "exponential",
        backoff_base: object = "1s",
        backoff_cap: object = "10m",
        backoff_jitter: object = 0.1,
        retry_on: object = None,
        no_retry_on: object = None,
    ) -> RetryPolicy:
        """Validate user input; raise ConfigError naming the bad value."""
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"invalid retries {retries!r}: expected an integer >= 0")
        if backoff not in BACKOFF_KINDS:
            raise ConfigError(f"invalid backoff {backoff!r}: expected 'fixed' or 'exponential'")
        if (
            isinstance(backoff_jitter, bool)
            or not isinstance(backoff_jitter, (int, float))
            or not 0 <= backoff_jitter <= 1
        ):
            raise ConfigError(
                f"invalid backoff_jitter {backoff_jitter!r}: expected a fraction in [0, 1]"
            )
        only = None if retry_on is None else exception_classes(retry_on, "retry_on")
        never = () if no_retry_on is None else exception_classes(no_retry_on, "no_retry_on")
        both = [c for c in never if c in (only or ())]
        if both:
            names = ", ".join(c.__name__ for c in both)
            raise ConfigError(
                f"invalid retry_on and no_retry_on: {names} is in both; an exception is either "
                "retried or not"
            )
        return cls(
            retries=retries,
            backoff=str(backoff),
            base=parse_duration(backoff_base, what="backoff_base", allow_zero=True),
            cap=parse_duration(backoff_cap, what="backoff_cap"),
            jitter=float(backoff_jitter),
            retry_on=only,
            no_retry_on=never,
        )

    @property
    def max_attempts(self) -> int:
        return self.retries + 1

    def refuses(self, exc: BaseException) -> str | None:
        """Why ``exc``, raised by the handler, must not be retried (None: it may be, while
        attempts remain): it is in ``no_retry_on``, or ``retry_on`` is given and it is not
        in it."""
        if isinstance(exc, self.no_retry_on):
            return f"{type(exc).__name__} is in no_retry_on"
        if self.retry_on is not None and not isinstance(exc, self.retry_on):
            return f"{type(exc).__name__} is not in retry_on"
        return None

    def delay(self, attempt: int, rng: random.Random | None = None) -> timedelta:
        """Delay before the attempt after ``attempt`` (1-based) failed."""
        if self.backoff == "fixed":
            delay = self.base
        else:
            delay = self.base * (2 ** min(max(attempt - 1, 0), 32))
        delay = min(delay, self.cap)
        if self.jitter:
            delay += delay * (rng or random).uniform(0, self.jitter)
        return delay


def exception_classes(value: object, what: str) -> ExceptionClasses:
    """``value`` as a tuple of exception classes: one class, or a tuple, list or set of
    them (each a subclass of BaseException); ConfigError naming ``what`` otherwise."""
    items: Any = value
    if isinstance(value, type):
        items = (value,)
    if not isinstance(items, (tuple, list, set, frozenset)) or not all(
        isinstance(c, type) and issubclass(c, BaseException) for c in items
    ):
        raise ConfigError(
            f"invalid {what} {value!r}: expected exception classes, e.g. "
            "(ConnectionError, TimeoutError)"
        )
    return tuple(dict.fromkeys(items))
