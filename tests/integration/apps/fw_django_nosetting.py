"""Django settings with soloist installed but no SOLOIST_APP (a user's first mistake)."""

SECRET_KEY = "test-only"
INSTALLED_APPS = ["soloist.contrib.django"]
