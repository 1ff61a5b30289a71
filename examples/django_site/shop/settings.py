"""Settings of the example project: just enough Django to serve one view."""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]

INSTALLED_APPS = ["soloist.contrib.django"]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
ROOT_URLCONF = "shop.urls"
USE_TZ = True

# The scheduler of this project ("module:attribute"), for `manage.py soloist ...`.
SOLOIST_APP = "shop.tasks:app"
# The project's database. soloist keeps its tables there too (soloist.contrib.django's
# store_url(), in shop/tasks.py), unless SOLOIST_STORE_URL names another store.
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "db.sqlite3"}}
