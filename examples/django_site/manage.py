#!/usr/bin/env python
"""A minimal Django project that queues soloist tasks from a view.

From this directory (``pip install django`` first):

    python manage.py soloist run           # the workers (SIGTERM or Ctrl-C stops them)
    python manage.py runserver             # the site, in another shell
    curl -X POST localhost:8000/signup -d email=ada@example.com
    python manage.py soloist history       # what ran; also: status, jobs, trigger ...

The store is ``SOLOIST_STORE_URL``, by default the project's database (``db.sqlite3``).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
