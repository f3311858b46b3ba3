"""An in-process ACP client wired straight to an :class:`AcpConnection` over a real daemon."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from actors import CountingIds, Settings, load_script, open_daemon
from transport.acp import AcpConnection

TIMEOUT = 10


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_call": {"name": name, "arguments": arguments}}


class Client:
    """Speaks JSON-RPC to the agent; answers the agent's requests with ``handlers[method](params)``.

    A handler returns a result, an ``{"error": {...}}`` dict to answer with an error,
    or ``None`` to never answer.
    """

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []  # everything the agent sent, in order
        self.handlers: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self.agent_requests: list[dict[str, Any]] = []
        self._next_id = 0
        self._answers: dict[Any, dict[str, Any]] = {}
        self._arrived = trio.Event()
        self.conn: AcpConnection | None = None

    async def deliver(self, message: dict[str, Any], session_id: str | None, event_id: int | None) -> None:
        self.sent.append(message)
        if "method" in message and "id" in message:
            self.agent_requests.append(message)
            handler = self.handlers.get(message["method"])
            if handler is not None:
                assert self.conn is not None
                self.conn.nursery.start_soon(self._answer_agent, handler, message)
        elif "id" in message:
            self._answers[message["id"]] = message
        self._arrived.set()
        self._arrived = trio.Event()

    async def _answer_agent(self, handler: Callable[[dict[str, Any]], Any], message: dict[str, Any]) -> None:
        result = handler(message["params"])
        if result is None:
            return
        assert self.conn is not None
        reply = {"jsonrpc": "2.0", "id": message["id"]}
        reply.update(result if isinstance(result, dict) and "error" in result else {"result": result})
        await self.conn.receive(json.dumps(reply))

    async def send_raw(self, raw: str | bytes) -> None:
        assert self.conn is not None
        await self.conn.receive(raw)

    async def send(self, method: str, params: Any = None, *, notify: bool = False) -> Any:
        """Send a request (or notification); returns its id."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if notify:
            await self.send_raw(json.dumps(message))
            return None
        self._next_id += 1
        message["id"] = self._next_id
        await self.send_raw(json.dumps(message))
        return self._next_id

    async def answer(self, request_id: Any) -> dict[str, Any]:
        """The agent's answer to our request ``request_id`` (the whole message)."""
        with trio.fail_after(TIMEOUT):
            while request_id not in self._answers:
                await self._arrived.wait()
        return self._answers.pop(request_id)

    async def request(self, method: str, params: Any = None) -> dict[str, Any]:
        return await self.answer(await self.send(method, params))

    async def result(self, method: str, params: Any = None) -> Any:
        answer = await self.request(method, params)
        assert "result" in answer, answer
        return answer["result"]

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        with trio.fail_after(TIMEOUT):
            while True:
                found = next((m for m in self.sent if predicate(m)), None)
                if found is not None:
                    return found
                await self._arrived.wait()

    def updates(self, *, commands: bool = False, info: bool = False) -> list[dict[str, Any]]:
        """The ``session/update`` payloads; ``available_commands_update`` only with ``commands``, and
        ``session_info_update`` (the title a first prompt gives a session) only with ``info``."""
        skipped = {"available_commands_update"} - ({"available_commands_update"} if commands else set())
        if not info:
            skipped.add("session_info_update")
        return [m["params"]["update"] for m in self.sent if m.get("method") == "session/update"
                and m["params"]["update"].get("sessionUpdate") not in skipped]


@asynccontextmanager
async def acp_client(*responses: Any, settings: Settings | None = None, bridge: bool = False,
                     state_dir: Any = None, **connection: Any) -> AsyncIterator[tuple[Any, Client]]:
    """A daemon with a scripted model (and ``state_dir``: its state there), an initialized ACP client on it."""
    model = load_script({"responses": list(responses)})
    async with open_daemon(settings, model=model, ids=CountingIds(), state_dir=state_dir) as daemon:
        async with trio.open_nursery() as nursery:
            client = Client()
            client.conn = AcpConnection(daemon, nursery, client.deliver, **connection)
            capabilities = {"_meta": {"craft/drainMidTurnQueue": True}} if bridge else {}
            await client.result("initialize", {"protocolVersion": 1, "clientCapabilities": capabilities})
            try:
                yield daemon, client
            finally:
                await client.conn.close()
                nursery.cancel_scope.cancel()


async def new_session(client: Client, cwd: str) -> str:
    return (await client.result("session/new", {"cwd": cwd, "mcpServers": []}))["sessionId"]


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]
