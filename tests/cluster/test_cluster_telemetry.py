"""Cluster mode's telemetry: a forwarded request continues its trace on the owner (W3C traceparent), and
/metrics shows the leases each node holds."""

from __future__ import annotations

import json
import secrets
from typing import Any

import psycopg
import trio
from prometheus_client.parser import text_string_to_metric_families

from .nodes import Node, answers, cluster


def owner_of(url: str, sid: str) -> str | None:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT node_id FROM trellis_leases WHERE session_id = %s", (sid,)).fetchone()
    return row[0] if row else None


async def spans_of(node: Node, name: str, seen: list[dict[str, Any]], timeout: float = 20) -> dict[str, Any]:
    """The first span named ``name`` the node's console exporter printed on its stdout (``seen``: all so far)."""
    decoder = json.JSONDecoder()
    buffer = ""
    with trio.fail_after(timeout):
        while True:
            for span in seen:
                if span.get("name") == name:
                    return span
            chunk = await node.proc.stdout.receive_some()  # type: ignore[union-attr]
            assert chunk, "the node's stdout closed"
            buffer += chunk.decode()
            while True:
                start = buffer.find("{")
                if start < 0:
                    break
                try:
                    span, end = decoder.raw_decode(buffer, start)
                except json.JSONDecodeError:
                    break  # not all of it yet
                seen.append(span)
                buffer = buffer[end:]


async def test_a_forwarded_request_continues_the_clients_trace_on_the_owner(tmp_path, postgres_url, redis_url,
                                                                            monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")  # spans as JSON on each node's stdout
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    async with cluster(tmp_path, postgres_url, redis_url) as c:
        nodes = {"a": await c.start("a", answers("a")), "b": await c.start("b", answers("b"))}
        sid = (await nodes["b"].client.post("/session", json={})).json()["sessionId"]
        owner = owner_of(postgres_url, sid)
        a, b = nodes[owner], nodes["b" if owner == "a" else "a"]
        trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
        answer = await b.client.get(f"/session/{sid}/status", headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})
        assert answer.status_code == 200, answer.text
        on_b: list[dict[str, Any]] = []
        on_a: list[dict[str, Any]] = []
        sent = await spans_of(b, "forward GET", on_b)
        served = await spans_of(a, "forwarded GET", on_a)
        assert sent["context"]["trace_id"] == served["context"]["trace_id"] == f"0x{trace_id}"
        assert served["parent_id"] == sent["context"]["span_id"]  # the owner's span is the forward's child
        assert served["kind"] == "SpanKind.SERVER" and sent["kind"] == "SpanKind.CLIENT"
        metrics = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for n in (a, b) for f in text_string_to_metric_families((await n.client.get("/metrics")).text)
                   for s in f.samples if n is a}
        assert metrics[("trellis_cluster_leases_held", ())] == 1
