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
# The store every process of the project uses (the site and `manage.py soloist run`).
SOLOIST_STORE_URL = os.environ.get("SOLOIST_STORE_URL", f"sqlite:///{BASE_DIR / 'soloist.db'}")
