"""``python manage.py soloist SUBCOMMAND [ARGS...]``: the ``soloist`` command, for the
scheduler named by ``settings.SOLOIST_APP``, with Django set up.

* ``run [--http HOST:PORT] [--log-format json] ...`` runs its workers in this process.
* every other subcommand (``status``, ``jobs``, ``history``, ``show``, ``trigger``,
  ``pause``, ``resume``, ``enqueue``, ``migrate``) runs against its store.

Arguments after the subcommand go to ``soloist`` unchanged (``--store URL`` overrides the
scheduler's store); put Django's own options (``--settings``) before the subcommand.
"""

from __future__ import annotations

import argparse
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from soloist.cli import main
from soloist.contrib.django.settings import app_spec, get_scheduler

#: Subcommands that take no store (``--store`` would be refused).
WITHOUT_STORE = {"demo", "bench"}


class Command(BaseCommand):
    help = "Run soloist's workers or commands for settings.SOLOIST_APP (e.g. 'soloist run')."
    # A worker does not serve the URLconf that the system checks would import (as Celery's
    # worker, it skips them); ``soloist status`` and the like need them even less.
    requires_system_checks: ClassVar[list[str]] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("subcommand", help="A soloist subcommand: run, status, history...")
        parser.add_argument(
            "cli_args", nargs=argparse.REMAINDER, help="Arguments passed on to soloist."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        subcommand: str = options["subcommand"]
        argv = [subcommand, *self.app_args(subcommand, list(options["cli_args"]))]
        try:
            main.main(args=argv, prog_name="manage.py soloist", standalone_mode=True)
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise

    def app_args(self, subcommand: str, cli_args: list[str]) -> list[str]:
        """The arguments that point ``soloist SUBCOMMAND`` at SOLOIST_APP and its store."""
        if subcommand in WITHOUT_STORE or "--help" in cli_args:
            return cli_args
        try:
            spec = app_spec()
            if subcommand == "run":
                # Imported here to close Django's stale connections around its handlers;
                # ``soloist run`` then finds the same module and applies its explicit
                # options (--store, --instance-id, --mode) to the app.
                get_scheduler()
                return [spec, *cli_args]
            extra: list[str] = []
            if subcommand == "enqueue" and "--app" not in cli_args:
                extra += ["--app", spec]
            if not any(a == "--store" or a.startswith("--store=") for a in cli_args):
                # The store of the scheduler as the project configures it: the CLI's own
                # default (./soloist.db) could be another file than the site uses.
                extra += ["--store", get_scheduler().config.store_url]
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc), returncode=2) from None
        return cli_args + extra
