"""Logging set-up for the CLI: stdlib logging with soloist's structured fields, as text
(``key=value`` after the message) or one JSON object per line.

The handler :func:`configure` installs writes the lines logged on an event loop's thread
once per turn of that loop (:class:`LoopBatchedHandler`): an instance running many short
jobs logs two INFO lines per run (claimed, succeeded), and one ``write`` per line cost it
a large share of its throughput (with ``def`` handlers most of all: each ``write``
releases the GIL to a worker thread, and getting it back waits on that thread).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
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
    found = record.__dict__  # where ``extra=`` puts them
    return {name: found[name] for name in FIELDS if name in found}


#: What every LogRecord carries by itself: anything else on a record came from ``extra=``
#: (or a filter that adds fields).
_RECORD_ATTRIBUTES = frozenset(
    {
        *logging.LogRecord("", 0, "", 0, "", None, None).__dict__,
        "message",
        "asctime",
        "taskName",
    }
)
_JSON_KEYS = ("time", "level", "logger", "message", "exception")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, soloist's structured fields,
    then any other ``extra=`` field of the record (``log.info("x", extra={"order_id":
    7})`` gives ``"order_id": 7``; a value JSON cannot hold is written as its ``str``). A
    field named like one of the first keys (``time``, ``level``...) keeps it and is
    written as ``extra_<name>``."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        for name, value in record.__dict__.items():
            if name in _RECORD_ATTRIBUTES:  # (message: set by any formatter, never extra)
                continue
            if name in _JSON_KEYS:
                data[f"extra_{name}"] = value
            elif name not in data:
                data[name] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        try:
            return json.dumps(data, default=str, allow_nan=False)
        except (TypeError, ValueError):  # a dict with tuple keys, a nan, a cycle
            return json.dumps({k: _json_or_str(v) for k, v in data.items()}, default=str)


def _json_or_str(value: Any) -> Any:
    """``value`` if JSON can write it (its unknown parts as their str), else its str."""
    try:
        json.dumps(value, default=str, allow_nan=False)
    except (TypeError, ValueError):
        return str(value)
    return value


class TextFormatter(logging.Formatter):
    """Human lines: ``time level message key=value ...``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(message)s")
        #: The second last formatted and its text: ``strftime`` once per second, not per line.
        self._stamp: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        stamp = self._stamp  # one tuple: threads formatting at once never mix two seconds
        if stamp[0] != second:
            stamp = (second, time.strftime(self.default_time_format, self.converter(second)))
            self._stamp = stamp
        return f"{stamp[1]},{int(record.msecs):03d}"  # the default_msec_format

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info or record.exc_text or record.stack_info:
            line = super().format(record)
        else:  # what the format string gives, without its general machinery
            record.message = record.getMessage()
            record.asctime = self.formatTime(record)
            line = f"{record.asctime} {record.levelname:<7} {record.message}"
        return _with_fields(line, record.__dict__)

    def event_line(
        self, created: float, levelname: str, message: str, fields: dict[str, Any]
    ) -> str | None:
        """The line :meth:`format` makes of a record of ``fields`` logged at ``created``
        (no exception, the default time format), without the record; None where
        :meth:`format` is overridden or the time format changed (then only a record
        gives the same line)."""
        if type(self) is not TextFormatter or self.datefmt is not None:
            return None
        second = int(created)
        stamp = self._stamp
        if stamp[0] != second:
            stamp = (second, time.strftime(self.default_time_format, self.converter(second)))
            self._stamp = stamp
        msecs = int((created - second) * 1000)
        return _with_fields(f"{stamp[1]},{msecs:03d} {levelname:<7} {message}", fields)


def _with_fields(line: str, found: dict[str, Any]) -> str:
    """``line`` followed by soloist's structured fields in ``found`` (text format)."""
    extras = " ".join(
        f"{name}={found[name]}"
        for name in FIELDS
        if name in found and name != "service" and found[name] != ""
    )
    return f"{line}  [{extras}]" if extras else line


#: Lines held for one loop turn at most; past this many characters they are written at once.
BATCH_CHARS = 64 * 1024


class LoopBatchedHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A :class:`logging.StreamHandler` that writes the records emitted on the thread of a
    running event loop at the end of that loop's turn, all in one ``write`` and one flush.

    Nothing waits longer than the current turn: the first line held schedules the write as
    the loop's next callback. Records of WARNING and above, records from other threads (a
    ``def`` handler's own logging), a second loop, or more than :data:`BATCH_CHARS` held
    are written at once, after the lines held before them (order is kept). ``flush()``
    (called by ``logging.shutdown`` at exit) writes what is held. A process killed with
    SIGKILL loses at most the lines of the loop turn it was in."""

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._held: list[str] = []
        self._size = 0
        #: The loop on which a write of the held lines is scheduled.
        self._loop: asyncio.AbstractEventLoop | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        self._hold(line, record.levelno)

    def _hold(self, line: str, levelno: int) -> None:
        """Hold ``line`` for the end of the loop's turn, or write it now (see the class
        docstring); with the handler's lock held."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if (
            loop is None
            or levelno >= logging.WARNING
            or (self._loop is not None and self._loop is not loop)
            or self._size + len(line) > BATCH_CHARS
        ):
            self._held.append(line)
            self._write_held()
            return
        self._held.append(line)
        self._size += len(line)
        if self._loop is None:
            self._loop = loop
            loop.call_soon(self._end_of_turn)

    def _end_of_turn(self) -> None:
        self.acquire()
        try:
            self._loop = None
            self._write_held()
        finally:
            self.release()

    def _write_held(self) -> None:
        """Write the held lines (with the handler's lock held)."""
        if not self._held:
            return
        text = "".join(self._held)
        self._held.clear()
        self._size = 0
        try:
            self.stream.write(text)
            self.stream.flush()
        except Exception:
            # As logging does for a failed write: report it on stderr, never raise.
            sys.stderr.write(f"--- soloist logging: could not write {len(text)} characters\n")

    def flush(self) -> None:
        self.acquire()
        try:
            self._write_held()
        finally:
            self.release()
        super().flush()


def log_event(
    logger: logging.Logger, level: int, msg: str, args: tuple[Any, ...], fields: dict[str, Any]
) -> None:
    """Log one of the runtime's per-run lines (claimed, succeeded: two per run) with
    ``fields`` as ``extra``, as ``logger.log(level, msg, *args, extra=fields)`` would;
    the caller has checked that ``level`` is enabled.

    Where logging is as :func:`configure` set it up (the default of ``app.run()``: the
    root's one handler a :class:`LoopBatchedHandler` writing text, and nothing else that
    would see the record: no other handler, no filter, the standard record factory), the
    line is made and held without a :class:`logging.LogRecord`, the same line the record
    would give (:meth:`TextFormatter.event_line`): making the record and passing it
    through logging cost an instance about a quarter of its time per run. Anywhere else,
    a record is made and handled as usual (the caller's frame is not looked up: the
    record names this module, line 0)."""
    handler = _sole_handler(logger, level)
    if handler is not None:
        formatter = handler.formatter
        assert isinstance(formatter, TextFormatter)
        try:
            message = msg % args
        except Exception:  # the record's way: logging reports it and carries on
            message = None
        line = (
            None
            if message is None
            else formatter.event_line(time.time(), logging.getLevelName(level), message, fields)
        )
        if line is not None:
            handler.acquire()
            try:
                handler._hold(line + handler.terminator, level)
            finally:
                handler.release()
            return
    record = logger.makeRecord(logger.name, level, __file__, 0, msg, args, None, None, fields)
    logger.handle(record)


def _sole_handler(logger: logging.Logger, level: int) -> LoopBatchedHandler | None:
    """The handler that alone would get ``logger``'s record of ``level``, if it is a
    :class:`LoopBatchedHandler` with a :class:`TextFormatter` and no filter, no filter
    on ``logger`` would look at the record and records are made by the standard factory;
    else None (see :func:`log_event`)."""
    if logger.filters or logging.getLogRecordFactory() is not logging.LogRecord:
        return None
    found: LoopBatchedHandler | None = None
    current: logging.Logger | None = logger
    while current is not None:  # as Logger.callHandlers walks
        for handler in current.handlers:
            if level < handler.level:
                continue
            if (
                found is not None
                or type(handler) is not LoopBatchedHandler
                or handler.filters
                or type(handler.formatter) is not TextFormatter
            ):
                return None
            found = handler
        current = current.parent if current.propagate else None
    return found


def configure(level: str = "INFO", fmt: str = "text") -> None:
    """Send soloist's logs (and the app's, through the root logger) to stderr, the lines of
    an event loop's thread written once per loop turn (:class:`LoopBatchedHandler`)."""
    handler = LoopBatchedHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
