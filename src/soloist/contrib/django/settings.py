"""The ``SOLOIST_APP`` setting: which :class:`~soloist.Scheduler` the project uses."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from soloist.cli import load_app
from soloist.errors import ConfigError
from soloist.scheduler import Scheduler

SETTING = "SOLOIST_APP"
EXAMPLE = '"myproject.tasks:app"'


def app_spec() -> str:
    """The value of ``settings.SOLOIST_APP``, checked to look like ``module:attribute``."""
    spec = getattr(settings, SETTING, None)
    if spec is None:
        raise ImproperlyConfigured(
            f"settings.{SETTING} is not set: name your soloist.Scheduler as "
            f"'module:attribute', e.g. {SETTING} = {EXAMPLE}"
        )
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise ImproperlyConfigured(
            f"invalid settings.{SETTING} {spec!r}: expected 'module:attribute' naming a "
            f"soloist.Scheduler, e.g. {SETTING} = {EXAMPLE}"
        )
    return spec


def get_scheduler() -> Scheduler:
    """Import and return the scheduler named by ``settings.SOLOIST_APP``."""
    spec = app_spec()
    try:
        return load_app(spec)
    except ConfigError as exc:
        raise ImproperlyConfigured(f"settings.{SETTING}: {exc}") from None
