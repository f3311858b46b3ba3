"""``GET /metrics``: the daemon's metrics in Prometheus's text format, behind the bearer token like every route.

The registry is the daemon's own (:class:`actors.telemetry.Telemetry`, ``daemon.runtime.telemetry``); nothing
here counts. docs/how-to/operations.md lists the metrics.
"""

from __future__ import annotations

import trio
from quart import Response
from quart_trio import QuartTrio

from actors import Daemon
from actors.telemetry import CONTENT_TYPE


def register(app: QuartTrio, daemon: Daemon) -> None:
    telemetry = daemon.runtime.telemetry

    @app.get("/metrics")
    async def metrics() -> Response:
        await trio.lowlevel.checkpoint()
        return Response(telemetry.exposition(), status=200, content_type=CONTENT_TYPE)


__all__ = ["register"]
