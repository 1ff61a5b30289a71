"""Django settings of the tests of database connections around soloist's handlers.

``FW_DB_URL`` picks the database (``sqlite:///path`` or ``postgresql://...``),
``FW_CONN_MAX_AGE`` its ``CONN_MAX_AGE`` (seconds; ``none``: persistent).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

SECRET_KEY = "test-only"
USE_TZ = True
# fw_django_early imports the tasks module in its AppConfig.ready(), before `soloist run`
# has read its options: they must still win.
INSTALLED_APPS = ["soloist.contrib.django", "fw_django_early"]
SOLOIST_APP = "fw_django_tasks:app"

_url = urlsplit(os.environ["FW_DB_URL"])
_age = os.environ.get("FW_CONN_MAX_AGE", "0")
if _url.scheme == "sqlite":
    _database: dict[str, object] = {"ENGINE": "django.db.backends.sqlite3", "NAME": _url.path}
else:
    _database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or ""),
        "USER": _url.username or "",
        "PASSWORD": _url.password or "",
    }
DATABASES = {
    "default": _database
    | {"CONN_MAX_AGE": None if _age == "none" else int(_age), "CONN_HEALTH_CHECKS": True}
}
