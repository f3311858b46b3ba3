"""transport/logs.py and transport/access_log.py: the formats, redaction, levels, and the access line."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from transport import logs
from transport.access_log import AccessLog, query_names, shown_path


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """Our handler on a buffer, for one test; the loggers' levels put back afterwards."""
    names = ["", *logs.OURS, "hpack", "trellis.access"]
    levels = {n: logging.getLogger(n).level for n in names}
    buffer = io.StringIO()
    handler = logs.configure("info", "json", stream=buffer)
    try:
        yield buffer
    finally:
        root = logging.getLogger()
        for installed in [h for h in root.handlers if h is handler or h.get_name() == handler.get_name()]:
            root.removeHandler(installed)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        logs._state["format"] = "text"


def lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_the_redactor_hides_given_secrets_and_signal_tokens():
    redact = logs.Redactor()
    redact.add("s3cr3t-token-value")
    redact.add("abc")  # too short to redact: it would blot out words
    redact.add(None)
    text = "Bearer s3cr3t-token-value at http://127.0.0.1:1/signal/mcp/Zm9vYmFy-_x?x=1 and //signal//MCP/tok abc"
    assert redact(text) == ("Bearer <redacted> at http://127.0.0.1:1/signal/mcp/<redacted>?x=1 and "
                            "//signal//MCP/<redacted> abc")
    assert redact("/signal/mcp") == "/signal/mcp"


def test_json_lines_carry_the_fields_and_are_redacted(captured):
    logs.add_secret("sk-unit-test-key-123")
    log = logging.getLogger("trellis.test")
    log.info("turn ended session=%s calls=%d", "s1", 4, extra={"session": "s1", "calls": 4, "level": "x",
                                                              "detail": {"key": "sk-unit-test-key-123"}})
    try:
        raise ValueError("boom with sk-unit-test-key-123")
    except ValueError:
        log.exception("failed at /signal/mcp/abcdef")
    first, second = lines(captured)
    assert first["level"] == "info" and first["logger"] == "trellis.test"
    assert first["message"] == "turn ended session=s1 calls=4"
    assert (first["session"], first["calls"]) == ("s1", 4)
    assert first["detail"] == {"key": "<redacted>"}
    assert first["ts"].endswith("Z") and "T" in first["ts"]
    assert second["level"] == "error" and second["message"] == "failed at /signal/mcp/<redacted>"
    assert "ValueError: boom with <redacted>" in second["exc"]
    assert "sk-unit-test-key-123" not in captured.getvalue()


def test_text_lines(captured):
    handler = logs.configure("info", "text", stream=captured)
    try:
        logging.getLogger("trellis.test").warning("hook failed command=%s", "./x.sh")
    finally:
        logging.getLogger().removeHandler(handler)
    [line] = captured.getvalue().splitlines()
    ts, level, rest = line.split(" ", 2)
    assert ts.endswith("Z") and level == "WARNING" and rest == "trellis.test: hook failed command=./x.sh"


def test_libraries_stay_at_warning_whatever_the_level(captured):
    handler = logs.configure("debug", "json", stream=captured)
    try:
        logging.getLogger("hpack.hpack").debug("Decoded authorization: Bearer xyz")  # what hpack logs at debug
        logging.getLogger("httpx").info("HTTP Request: POST ...")
        logging.getLogger("actors.model.openai").debug("openai: POST")
        logging.getLogger("trellis.access").debug("ours at debug")
        logging.getLogger("hypercorn.error").warning("a library's warning")
    finally:
        logging.getLogger().removeHandler(handler)
    assert [r["message"] for r in lines(captured)] == ["openai: POST", "ours at debug", "a library's warning"]


def test_say_writes_whatever_the_level(captured, capsys):
    logs.configure("error", "json", stream=captured)
    logs.say("token: .trellis/token")
    logs.say("no key", "warning")
    out = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(r["level"], r["message"]) for r in out] == [("info", "token: .trellis/token"), ("warning", "no key")]
    logs.configure("error", "text", stream=captured)
    logs.say("no key", "warning")
    logs.say("stopped")
    assert capsys.readouterr().err == "warning: no key\nstopped\n"


def test_configure_refuses_unknown_formats_and_levels():
    with pytest.raises(ValueError):
        logs.configure("info", "xml")
    with pytest.raises(ValueError):
        logs.configure("loud", "text")


# ------------------------------------------------------------------ the access line


def test_paths_as_logged():
    assert shown_path("/session/s1/prompt") == "/session/s1/prompt"
    assert shown_path("/signal/mcp/tok3n/extra") == "/signal/mcp/<redacted>"
    assert shown_path("//signal/MCP/tok3n") == "/signal/mcp/<redacted>"
    assert shown_path("/signal/mcp") == "/signal/mcp"
    assert shown_path("/a b\n\x1b") == "/a\\x20b\\x0a\\x1b"
    long = shown_path("/" + "x" * 1000)
    assert len(long) <= 300 and "…" in long


def test_query_names_only():
    assert query_names(b"lastEventId=5&epoch=abc&lastEventId=6&flag") == ["lastEventId", "epoch", "flag"]
    assert query_names(b"") == []


async def _run(app: Any, path: str = "/x", query: bytes = b"", disconnect_after: float | None = None) -> list[Any]:
    sent: list[Any] = []
    scope = {"type": "http", "method": "GET", "path": path, "query_string": query, "client": ("127.0.0.1", 5),
             "headers": [(b"authorization", b"Bearer hidden-token-value")]}

    async def receive() -> dict[str, Any]:
        if disconnect_after is None:
            await trio.sleep_forever()
        await trio.sleep(disconnect_after)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await AccessLog(app)(scope, receive, send)
    return sent


async def test_one_line_per_request_when_its_answer_ends(captured):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 202, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    sent = await _run(app, "/session/s1/prompt", b"lastEventId=secret-value")
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    [line] = lines(captured)
    assert line["message"] == "GET /session/s1/prompt?lastEventId=… 202 " + f"{line['ms']:.1f}ms"
    assert (line["path"], line["query"], line["status"], line["client"]) == ("/session/s1/prompt", ["lastEventId"],
                                                                             202, "127.0.0.1")
    assert "stream" not in line
    assert "secret-value" not in captured.getvalue() and "hidden-token-value" not in captured.getvalue()


async def test_a_stream_is_logged_when_it_ends_with_its_duration(captured):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"retry: 3000\n\n", "more_body": True})
        assert captured.getvalue() == ""  # not while it streams
        await receive()  # the client goes away (quart-trio cancels the response then)

    await _run(app, "/session/s1/events", disconnect_after=0.2)
    [line] = lines(captured)
    assert line["stream"] is True and line["status"] == 200 and line["ms"] >= 200
    assert line["message"].endswith("ms (stream)")


async def test_an_app_that_fails_before_answering_is_logged_as_500(captured):
    async def app(scope, receive, send):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await _run(app)
    [line] = lines(captured)
    assert line["status"] == 500


async def test_nothing_is_done_when_access_lines_are_off(captured):
    logging.getLogger("trellis.access").setLevel(logging.WARNING)

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    await _run(app)
    assert captured.getvalue() == ""
