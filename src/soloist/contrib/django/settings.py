"""The ``SOLOIST_APP`` setting: which :class:`~soloist.Scheduler` the project uses."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from soloist.cli import load_app
from soloist.contrib.django.db import manage_db_connections
from soloist.errors import ConfigError
from soloist.scheduler import Scheduler

SETTING = "SOLOIST_APP"
EXAMPLE = '"myproject.tasks:app"'


def app_spec() -> str:
    """The value of ``settings.SOLOIST_APP``, checked to look like ``module:attribute``."""
    spec: object = getattr(settings, SETTING, None)
    if spec is None:
        raise ImproperlyConfigured(
            f"settings.{SETTING} is not set: name your soloist.Scheduler as "
            f"'module:attribute', e.g. {SETTING} = {EXAMPLE}"
        )
    module, _, attribute = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    # A dotted module, not a file path: a file would be imported again as another module,
    # so the command would run another Scheduler object than the project's.
    if not (
        isinstance(spec, str)
        and module
        and attribute.isidentifier()
        and all(part.isidentifier() for part in module.split("."))
    ):
        raise ImproperlyConfigured(
            f"invalid settings.{SETTING} {spec!r}: expected 'module:attribute' naming a "
            f"soloist.Scheduler, e.g. {SETTING} = {EXAMPLE}"
        )
    return spec


def get_scheduler() -> Scheduler:
    """Import and return the scheduler named by ``settings.SOLOIST_APP``, its handlers
    closing Django's stale database connections around each run
    (:func:`~soloist.contrib.django.manage_db_connections`)."""
    spec = app_spec()
    try:
        return manage_db_connections(load_app(spec))
    except ConfigError as exc:
        raise ImproperlyConfigured(f"settings.{SETTING}: {exc}") from None
