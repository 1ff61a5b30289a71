"""The Django app config of ``soloist.contrib.django``."""

from __future__ import annotations

from django.apps import AppConfig


class SoloistConfig(AppConfig):
    """Provides the ``soloist`` management command; reads ``settings.SOLOIST_APP``."""

    name = "soloist.contrib.django"
    label = "soloist"
    verbose_name = "soloist"
