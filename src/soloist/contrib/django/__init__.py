"""soloist in a Django project: add ``"soloist.contrib.django"`` to ``INSTALLED_APPS`` and
name your scheduler in the settings::

    SOLOIST_APP = "myproject.tasks:app"      # module:attribute of a soloist.Scheduler

Then ``python manage.py soloist run`` runs the workers with Django set up (models, settings,
logging), and ``python manage.py soloist status`` (``jobs``, ``history``, ``trigger``,
``enqueue``...) runs the ``soloist`` command against that scheduler's store. Views enqueue
with the sync API: ``app.enqueue(send_welcome, {"to": user.email})``.

Around each run of a handler, ``manage.py soloist run`` closes Django's stale database
connections (``close_old_connections()``, as around a request): see
:func:`manage_db_connections`, to call yourself if you run the scheduler another way.
"""

from __future__ import annotations

from soloist.contrib.django.db import closing_old_connections, manage_db_connections
from soloist.contrib.django.settings import SETTING, app_spec, get_scheduler
from soloist.contrib.django.stores import database_store_url, store_url

__all__ = [
    "SETTING",
    "app_spec",
    "closing_old_connections",
    "database_store_url",
    "get_scheduler",
    "manage_db_connections",
    "store_url",
]
