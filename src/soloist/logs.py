"""Logging set-up for the CLI: stdlib logging with soloist's structured fields, as text
(``key=value`` after the message) or one JSON object per line."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any

#: The structured fields soloist attaches to its records (``extra=``).
FIELDS = (
    "action",
    "instance_id",
    "job",
    "scope",
    "plan_time",
    "attempt",
    "execution_id",
    "error_code",
    "duration_s",
    "epoch",
    "service",
)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in FIELDS if hasattr(record, name)}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class TextFormatter(logging.Formatter):
    """Human lines: ``time level message key=value ...``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = " ".join(
            f"{k}={v}" for k, v in _fields(record).items() if k != "service" and v != ""
        )
        return f"{line}  [{extras}]" if extras else line


def configure(level: str = "INFO", fmt: str = "text") -> None:
    """Send soloist's logs (and the app's, through the root logger) to stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
