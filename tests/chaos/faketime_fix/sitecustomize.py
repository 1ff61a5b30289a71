"""Put on ``PYTHONPATH`` (as ``sitecustomize``) of the processes that the clock-skew
scenarios run under libfaketime, only when the installed libfaketime needs it.

libfaketime 0.9.10 (Debian 12's) mistranslates ``clock_nanosleep(CLOCK_MONOTONIC,
TIMER_ABSTIME, ...)`` when ``FAKETIME_DONT_FAKE_MONOTONIC=1`` is set: it hands the kernel
a deadline in the past-of-epoch and gets EINVAL, so ``time.sleep`` (which uses that call
since Python 3.11) raises ``OSError: [Errno 22] Invalid argument``
(https://github.com/wolfcw/libfaketime/issues/426). Faking the monotonic clock too is no
way out: thread waits then hang (glibc passes the faked deadline straight to the kernel).
So the monotonic clock stays real, and ``time.sleep`` here waits on an event that is never
set, which blocks just as long on that real monotonic clock (``sem_clockwait``, not
affected) and is interrupted by signals the same way.
"""

from __future__ import annotations

import threading
import time


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    threading.Event().wait(seconds)


time.sleep = _sleep
