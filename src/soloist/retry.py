"""Retry policies: how many attempts an occurrence gets and how long to wait between them."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

from soloist.durations import parse_duration
from soloist.errors import ConfigError

BACKOFF_KINDS = ("fixed", "exponential")


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

    @classmethod
    def build(
        cls,
        retries: object = 0,
        backoff: object = "exponential",
        backoff_base: object = "1s",
        backoff_cap: object = "10m",
        backoff_jitter: object = 0.1,
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
        return cls(
            retries=retries,
            backoff=str(backoff),
            base=parse_duration(backoff_base, what="backoff_base", allow_zero=True),
            cap=parse_duration(backoff_cap, what="backoff_cap"),
            jitter=float(backoff_jitter),
        )

    @property
    def max_attempts(self) -> int:
        return self.retries + 1

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
