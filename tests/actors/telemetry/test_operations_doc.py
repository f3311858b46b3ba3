"""docs/how-to/operations.md lists every metric the daemon serves, and the Grafana dashboard queries only those."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from actors.telemetry import Telemetry

DOCS = Path(__file__).resolve().parents[3] / "docs"


def served() -> set[str]:
    t = Telemetry()
    t.watch(leases=lambda: 0)  # the cluster's gauges too
    t.model_call("primary").end("ok")
    t.tool_called("read_file", True, "completed")
    t.hook_ran("Stop", "ok")
    t.sse_evicted("queue_overflow")
    t.prompt_admitted()
    names = set()
    for family in text_string_to_metric_families(t.exposition().decode()):
        if family.name.endswith("_created"):
            continue  # a counter's or histogram's creation time, a series of its own in the text format
        names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def test_the_operations_page_lists_every_metric_served_and_no_other():
    text = (DOCS / "how-to" / "operations.md").read_text()
    listed = set(re.findall(r"^\| `(trellis_[a-z_]+)` \|", text, re.MULTILINE))
    assert listed == served()


def test_the_dashboard_queries_only_metrics_the_daemon_serves_and_all_of_them():
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for m in re.findall(r"\btrellis_[a-z_]+", exprs)}
    assert used == served()
    assert "(../grafana-dashboard.json)" in (DOCS / "how-to" / "operations.md").read_text()
