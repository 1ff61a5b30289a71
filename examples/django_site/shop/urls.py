"""URLs of the example project."""

from __future__ import annotations

from django.urls import path

from shop.views import signup

urlpatterns = [path("signup", signup)]
