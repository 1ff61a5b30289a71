"""The store core: what every store shares, whatever its dialect.

* :mod:`~soloist.stores.core.checks`: argument checks and the state and outcome rules;
* :mod:`~soloist.stores.core.capabilities`: the extras a store may declare;
* :mod:`~soloist.stores.core.checked`: :class:`CheckedStore`, the wrapper that applies
  them to every store (:func:`checked`).

Drivers (``soloist.stores.memory``, ``sqlite``, ``postgres``, ``redis``) only translate.
See ``docs/howto/write-a-store.md``.
"""

from __future__ import annotations

from soloist.stores.core.capabilities import (
    PLAIN,
    Capabilities,
    CountsJobs,
    PagesJobs,
    Reach,
    capabilities_of,
)
from soloist.stores.core.checked import CheckedStore, checked

__all__ = [
    "PLAIN",
    "Capabilities",
    "CheckedStore",
    "CountsJobs",
    "PagesJobs",
    "Reach",
    "capabilities_of",
    "checked",
]
