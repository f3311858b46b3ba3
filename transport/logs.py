"""The daemon's log: one line per record on stderr, as text or as JSON, never with a secret in it.

:func:`configure` installs the one handler (``--log-level``, ``--log-format``).
Records of our own loggers (``trellis.*``, and ``actors.*``/``transport.*``
module loggers) are written from the chosen level; every library's logger
(hypercorn, quart, httpx, httpcore, h2, hpack, ...) from ``warning`` at the
lowest, whatever the level: some of them write request headers at ``debug``.

A record's structured fields are the attributes its call set with ``extra=``
(``log.info("turn ended ...", extra={"session": sid, "calls": 4})``). The
``text`` format writes ``TIME LEVEL LOGGER: MESSAGE`` (the message already says
what the fields say); ``json`` writes one object per line: ``ts``, ``level``,
``logger``, ``message``, every field, ``trace_id`` and ``span_id`` when the line
was written inside a recorded span (OpenTelemetry's, :mod:`actors.telemetry`;
a ``turn ended`` line has its turn's as fields), and ``exc`` (the traceback)
when there is one.

Redaction is the last step of both formats, over the whole line (traceback
included): every value given to :func:`add_secret` (the bearer token, the API
key) becomes ``<redacted>``, and so does whatever follows ``/signal/mcp/`` (a
subagent run's token is its signal URL's last segment). The callers keep
secrets out of their messages in the first place — this catches what a
library or a traceback might still carry.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

import orjson

from actors.telemetry import current_ids

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")
OURS = ("trellis", "actors", "transport")  # loggers written from the chosen level
REDACTED = "<redacted>"
MIN_SECRET = 4  # shorter values are not redacted (they would blot out ordinary words)

_SIGNAL = re.compile(r"(/+signal/+mcp/+)[^\s\"'<>?#,;]+", re.IGNORECASE)
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}
_HANDLER = "trellis.log"
_RESERVED = frozenset({"ts", "level", "logger", "message", "exc"})


class Redactor:
    """Replaces known secrets and signal tokens in text."""

    def __init__(self) -> None:
        self._secrets: set[str] = set()

    def add(self, value: str | None) -> None:
        if value and len(value) >= MIN_SECRET:
            self._secrets.add(value)

    @property
    def secrets(self) -> Iterable[str]:
        """The secrets known so far, and those added later (a live view: a recorder redacts them too)."""
        return self._secrets

    def __call__(self, text: str) -> str:
        if "/" in text:
            text = _SIGNAL.sub(lambda m: m.group(1) + REDACTED, text)
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text


REDACT = Redactor()  # the process's one redactor: secrets are added as they become known


def add_secret(value: str | None) -> None:
    """Never write ``value`` to the log (from now on)."""
    REDACT.add(value)


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields of ``record``: what its call set with ``extra=``."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class TextFormatter(logging.Formatter):
    """``2025-01-31T12:00:00.123Z INFO trellis.access: POST /session 200 1.2ms``, redacted."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.exc_text:
            line += "\n" + record.exc_text
        return REDACT(line)


def _plain(value: Any) -> Any:
    """A JSON-ready copy of a field value, every string in it redacted."""
    if isinstance(value, str):
        return REDACT(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict):
        return {REDACT(str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    return REDACT(str(value))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, the fields, ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"ts": _timestamp(record), "level": record.levelname.lower(), "logger": record.name,
                                "message": REDACT(record.getMessage())}
        for key, value in fields_of(record).items():
            if key not in _RESERVED:
                line[key] = _plain(value)
        ids = current_ids()  # the span the line was written in (a hook's, say), when tracing is on
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        if record.exc_info:
            line["exc"] = REDACT(self.formatException(record.exc_info))
        elif record.exc_text:
            line["exc"] = REDACT(record.exc_text)
        return orjson.dumps(line).decode()


_state = {"format": "text"}  # the format configure() chose, for say()


def say(message: str, level: str = "info", *, logger: str = "trellis.daemon", **fields: Any) -> None:
    """A line on stderr that is written whatever the level (start-up, shutdown, refusals to start).

    As text, ``message`` as it is, after ``warning: ``/``error: `` for those levels (what the daemon
    always printed); as JSON (``--log-format json``), a record like the log's others, so that stderr
    stays one object per line. Redacted either way.
    """
    stream = sys.stderr
    if _state["format"] == "json":
        record = logging.LogRecord(logger, logging.getLevelName(level.upper()), __file__, 0, message, (), None)
        record.__dict__.update(fields)
        line = JsonFormatter().format(record)
    else:
        line = REDACT(f"{level}: {message}" if level in ("warning", "error") else message)
    print(line, file=stream, flush=True)


def configure(level: str = "warning", fmt: str = "text", *, stream: TextIO | None = None,
              secrets: tuple[str | None, ...] = ()) -> logging.Handler:
    """Send every log record to ``stream`` (default stderr) in ``fmt``; ours from ``level``, libraries' from warning.

    Replaces the handler an earlier call installed (others, such as a test runner's, stay); returns the new one.
    """
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, got {fmt!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"log level must be one of {LEVELS}, got {level!r}")
    for secret in secrets:
        add_secret(secret)
    _state["format"] = fmt
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.set_name(_HANDLER)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(numeric, logging.WARNING))
    for name in OURS:
        logging.getLogger(name).setLevel(numeric)
    return handler


__all__ = ["FORMATS", "JsonFormatter", "LEVELS", "REDACT", "TextFormatter", "add_secret", "configure", "fields_of",
           "say"]
