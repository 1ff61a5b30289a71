"""The handler and formatter that ``soloist.logs.configure`` installs (app.run()'s default
logging): lines of a loop turn written together, nothing reordered or lost."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

from soloist.context import _FieldsAdapter
from soloist.logs import (
    BATCH_CHARS,
    JsonFormatter,
    LoopBatchedHandler,
    TextFormatter,
    log_event,
)


class Writes:
    """A stream that keeps each ``write`` call apart."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def write(self, text: str) -> None:
        self.calls.append(text)

    def flush(self) -> None:
        return None

    @property
    def lines(self) -> list[str]:
        return "".join(self.calls).splitlines()


def _logger(stream: Writes) -> tuple[logging.Logger, LoopBatchedHandler]:
    handler = LoopBatchedHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger(f"soloist.test_logs.{id(stream)}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, handler


def test_lines_of_one_loop_turn_are_one_write_at_its_end() -> None:
    stream = Writes()
    logger, _ = _logger(stream)

    async def main() -> list[str]:
        for i in range(5):
            logger.info("line %d", i)
        held = list(stream.calls)
        await asyncio.sleep(0)  # the end of the turn
        return held

    held = asyncio.run(main())
    assert held == []
    assert stream.calls == ["".join(f"INFO line {i}\n" for i in range(5))]


def test_a_warning_is_written_at_once_after_the_lines_held_before_it() -> None:
    stream = Writes()
    logger, _ = _logger(stream)

    async def main() -> list[str]:
        logger.info("first")
        logger.warning("second")
        logger.info("third")
        written = list(stream.lines)
        await asyncio.sleep(0)
        return written

    assert asyncio.run(main()) == ["INFO first", "WARNING second"]
    assert stream.lines == ["INFO first", "WARNING second", "INFO third"]


def test_lines_of_other_threads_are_written_at_once_and_keep_the_order() -> None:
    stream = Writes()
    logger, _ = _logger(stream)

    async def main() -> list[str]:
        logger.info("loop")
        thread = threading.Thread(target=logger.info, args=("thread",))
        thread.start()
        thread.join()
        return list(stream.lines)

    assert asyncio.run(main()) == ["INFO loop", "INFO thread"]


def test_flush_writes_what_is_held_and_a_closed_loop_loses_nothing() -> None:
    stream = Writes()
    logger, handler = _logger(stream)

    async def main() -> None:
        logger.info("held")

    loop = asyncio.new_event_loop()
    loop.run_until_complete(main())
    loop.close()  # the turn's callback may never run
    handler.flush()  # what logging.shutdown() does at exit
    assert stream.lines.count("INFO held") == 1


def test_more_than_the_batch_is_written_at_once() -> None:
    stream = Writes()
    logger, _ = _logger(stream)
    big = "x" * (BATCH_CHARS // 3)

    async def main() -> int:
        for _ in range(4):
            logger.info(big)
        return len(stream.calls)

    assert asyncio.run(main()) >= 1
    assert len(stream.lines) == 4


def test_a_second_loop_does_not_wait_for_the_first() -> None:
    stream = Writes()
    logger, _ = _logger(stream)
    other = asyncio.new_event_loop()

    async def log_on_other() -> None:
        logger.info("other loop")

    async def main() -> list[str]:
        logger.info("main loop")
        # Another loop in another thread logs while this turn's write is pending.
        thread = threading.Thread(target=other.run_until_complete, args=(log_on_other(),))
        thread.start()
        thread.join()
        return list(stream.lines)

    try:
        assert asyncio.run(main()) == ["INFO main loop", "INFO other loop"]
    finally:
        other.close()


def test_the_cached_time_stamp_matches_the_standard_one() -> None:
    ours, standard = TextFormatter(), logging.Formatter()
    for created in (time.time(), 1_700_000_000.999, 1_700_000_001.0005, 1_700_000_001.5):
        record = logging.makeLogRecord({"msg": "m", "created": created})
        record.msecs = (created - int(created)) * 1000
        assert ours.formatTime(record) == standard.formatTime(record)
    record = logging.makeLogRecord({"msg": "m"})
    assert ours.formatTime(record, "%H") == standard.formatTime(record, "%H")


def test_text_lines_read_as_the_format_string_says() -> None:
    ours = TextFormatter()
    plain = logging.Formatter("%(asctime)s %(levelname)-7s %(message)s")
    records = [
        logging.makeLogRecord(
            {
                "msg": "claimed %s (attempt %d)",
                "args": ("tick", 2),
                "levelno": 20,
                "levelname": "INFO",
                "job": "tick",
                "scope": "",
                "attempt": 2,
                "action": "claimed",
            }
        ),
        logging.makeLogRecord({"msg": "no fields", "levelname": "WARNING", "levelno": 30}),
    ]
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        records.append(
            logging.makeLogRecord(
                {"msg": "failed", "levelname": "ERROR", "exc_info": sys.exc_info(), "job": "j"}
            )
        )
    expected = [
        plain.format(records[0]) + "  [action=claimed job=tick attempt=2]",
        plain.format(records[1]),
        plain.format(records[2]) + "  [job=j]",
    ]
    got = [ours.format(record) for record in records]
    assert got[:2] == expected[:2]
    assert got[2].startswith(expected[2].split("\n")[0]) and "ValueError: boom" in got[2]
    assert got[2].endswith("  [job=j]")


def test_json_lines_keep_the_users_extra_fields() -> None:
    """A JSON line carries every ``extra=`` field of the record, soloist's and the user's
    (also through ctx.logger); a value JSON cannot hold is written as its str, and a field
    named like a key of the line is kept as ``extra_<name>``."""
    stream = Writes()
    logger, handler = _logger(stream)
    handler.setFormatter(JsonFormatter())
    logger.info("paid", extra={"order_id": 7, "items": ["a"], "who": {1}, "level": "vip"})
    adapter = _FieldsAdapter(logger, {"job": "bill", "attempt": 1})
    adapter.warning("late", extra={"order_id": 8})
    adapter.warning("plain", extra=None)  # the stdlib's default, passed on by wrappers
    first, second, third = (json.loads(line) for line in stream.lines)
    assert first["message"] == "paid" and first["level"] == "INFO"
    assert (first["order_id"], first["items"], first["who"]) == (7, ["a"], "{1}")
    assert first["extra_level"] == "vip"
    assert "args" not in first and "msg" not in first and "created" not in first
    assert (second["job"], second["attempt"], second["order_id"]) == ("bill", 1, 8)
    assert (third["message"], third["job"]) == ("plain", "bill")


def test_json_lines_hold_any_extra_value_and_only_the_users_fields() -> None:
    """A value json cannot write even with str() for its parts (a dict with tuple keys, a
    nan, a cycle) is written as its str, and the line is still one valid JSON object; a
    record another handler formatted first (which sets record.message) gets no
    ``extra_message`` copy of its message."""
    stream = Writes()
    logger, handler = _logger(stream)
    handler.setFormatter(JsonFormatter())
    cycle: list[object] = []
    cycle.append(cycle)
    logger.info("odd", extra={"ids": {(1, 2): "a"}, "ratio": float("nan"), "cycle": cycle})
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 1, "seen", (), None)
    logging.Formatter("%(asctime)s %(message)s").format(record)  # another handler's
    logger.handle(record)
    odd, seen = (json.loads(line, parse_constant=_refuse) for line in stream.lines)
    assert (odd["message"], odd["ids"], odd["ratio"]) == ("odd", "{(1, 2): 'a'}", "nan")
    assert odd["cycle"] == "[[...]]"
    assert seen["message"] == "seen" and "extra_message" not in seen
    assert "asctime" not in seen


def _refuse(constant: str) -> object:
    raise AssertionError(f"{constant} is not JSON")


# -- the runtime's per-run lines (log_event) ----------------------------------------------
def _run_fields(**more: object) -> dict[str, object]:
    return {
        "job": "tick",
        "scope": "",
        "plan_time": "2026-11-25T06:00:00+00:00",
        "attempt": 2,
        "execution_id": "occ-1",
        "instance_id": "inst-a",
        **more,
    }


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _as_configured(stream: Writes) -> tuple[logging.Logger, LoopBatchedHandler]:
    """A logger set up as ``configure()`` sets up the root (one LoopBatchedHandler with a
    TextFormatter at the top of the hierarchy), under a parent of its own."""
    parent = logging.getLogger(f"soloist-test-events-{id(stream)}")
    handler = LoopBatchedHandler(stream)
    handler.setFormatter(TextFormatter())
    parent.handlers[:] = [handler]
    parent.propagate = False
    parent.setLevel(logging.INFO)
    return logging.getLogger(f"{parent.name}.runtime"), handler


def test_a_per_run_line_reads_as_the_record_of_the_same_event_would(monkeypatch) -> None:
    """Where configure()'s handler alone gets the line, log_event writes it without a
    LogRecord: the text is the one that logging's own path makes of the same event, to
    the character (same clock reading)."""
    monkeypatch.setattr(time, "time", lambda: 1_764_050_400.123456)
    monkeypatch.setattr(time, "time_ns", lambda: 1_764_050_400_123_456_000)
    stream = Writes()
    logger, _ = _as_configured(stream)
    events = [
        ("claimed %s (plan %s, attempt %d, token %d)", ("tick", "p", 2, 7), {"action": "claimed"}),
        ("succeeded %s in %.3fs", ("tick", 0.0042), {"action": "succeeded", "duration_s": 0.0042}),
        ("x", (), {"action": "y", "scope": "eu", "error_code": "timeout"}),
    ]

    def no_record(*args: object, **kwargs: object) -> logging.LogRecord:
        raise AssertionError("log_event made a LogRecord where none was needed")

    async def main() -> None:
        for msg, args, extra in events:
            logger.makeRecord = no_record  # type: ignore[method-assign]
            log_event(logger, logging.INFO, msg, args, _run_fields(**extra))
            del logger.makeRecord  # the class's own again
            record = logger.makeRecord(
                logger.name, logging.INFO, __file__, 0, msg, args, None, None, _run_fields(**extra)
            )
            logger.handle(record)
        await asyncio.sleep(0)

    asyncio.run(main())
    lines = stream.lines
    assert len(lines) == 6
    for fast, standard in zip(lines[::2], lines[1::2], strict=True):
        assert fast == standard
    assert lines[0].split()[1].endswith(",123"), lines[0]
    assert (
        "claimed tick (plan p, attempt 2, token 7)  [action=claimed instance_id=inst-a"
        in (lines[0])
    )
    assert lines[4].endswith("execution_id=occ-1 error_code=timeout]"), lines[4]


def test_a_per_run_line_is_a_record_wherever_anything_else_would_see_it() -> None:
    """Another handler, a filter on the handler or on the logger, or a JSON formatter:
    log_event makes a real record with the fields, so that each of them gets it."""
    stream = Writes()
    logger, handler = _as_configured(stream)
    assert logger.parent is not None
    extra = _Collect()
    logger.parent.addHandler(extra)
    log_event(logger, logging.INFO, "claimed %s", ("tick",), _run_fields(action="claimed"))
    (record,) = extra.records
    assert record.getMessage() == "claimed tick" and record.__dict__["job"] == "tick"
    logger.parent.removeHandler(extra)

    seen: list[str] = []

    def keep(record: logging.LogRecord) -> bool:
        seen.append(record.getMessage())
        return record.getMessage() != "dropped"

    handler.addFilter(keep)
    log_event(logger, logging.INFO, "dropped", (), _run_fields(action="claimed"))
    log_event(logger, logging.INFO, "kept", (), _run_fields(action="claimed"))
    handler.removeFilter(keep)
    logger.addFilter(keep)
    log_event(logger, logging.INFO, "dropped", (), _run_fields(action="claimed"))
    logger.removeFilter(keep)
    assert seen == ["dropped", "kept", "dropped"]

    handler.setFormatter(JsonFormatter())
    log_event(logger, logging.INFO, "as json", (), _run_fields(action="claimed"))
    handler.flush()
    assert [line for line in stream.lines if "dropped" in line] == []
    assert any("kept" in line for line in stream.lines)
    data = json.loads(stream.lines[-1])
    assert data["message"] == "as json" and data["execution_id"] == "occ-1", data
