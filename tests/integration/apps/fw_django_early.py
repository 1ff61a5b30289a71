"""A Django app whose ready() imports the project's tasks, as many projects do."""

from __future__ import annotations

import importlib

from django.apps import AppConfig


class EarlyConfig(AppConfig):
    name = "fw_django_early"

    def ready(self) -> None:
        importlib.import_module("fw_django_tasks")
