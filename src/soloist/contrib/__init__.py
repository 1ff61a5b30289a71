"""Integrations with web frameworks, each importing its framework only when used.

* :mod:`soloist.contrib.asgi`: a ``lifespan`` for FastAPI, Starlette or any ASGI app that
  starts the scheduler with the app and stops it gracefully when the server shuts down.
* :mod:`soloist.contrib.django`: a reusable Django app with the ``soloist`` management
  command (``python manage.py soloist run``) and the ``SOLOIST_APP`` setting.

The core never imports a web framework (a test keeps it so).
"""
