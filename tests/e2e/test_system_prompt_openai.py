"""The system prompt and text tool calls over the real wire: the HTTP daemon, the openai provider, the fake server."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import trio

from actors import Settings
from actors.model.openai import OpenAIConfig, OpenAIModel
from tests.conftest import daemon_process, live_daemon
from tests.e2e.sse_client import collect
from tests.transport.mcp.harness import mcp_daemon
from transport.fake_openai import FakeOpenAI
from transport.process_image import SECRET_ENV

KEY = "sk-test-SYSTEM-PROMPT-4242"
TODOS = {"todos": [{"id": "1", "content": "look around", "status": "in_progress"},
                   {"id": "2", "content": "report", "status": "pending"}]}


def prompt(text: str) -> dict:
    return {"prompt": [{"type": "text", "text": text}]}


async def wait_turn(client, sid: str, pid: str) -> dict:
    with trio.fail_after(15):
        while True:
            r = await client.get(f"/session/{sid}/turns/{pid}")
            if r.status_code == 200 and r.json()["state"] in ("completed", "error", "cancelled"):
                return r.json()
            await trio.sleep(0.02)


def system_of(body: dict) -> str | None:
    first = body["messages"][0]
    return first["content"] if first["role"] == "system" else None


async def test_post_session_layers_reach_the_first_request_on_top_of_the_settings(nursery, tmp_path):
    fake = FakeOpenAI()  # every answer: "ok"
    url = await nursery.start(fake.serve)
    model = OpenAIModel(OpenAIConfig(base_url=url, api_key=KEY))
    settings = Settings(append_system_prompt="Operator rule: be brief.")
    with trio.fail_after(30):
        async with live_daemon(model=model, settings=settings) as (_, client):
            default = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            own = (await client.post("/session", json={"systemPrompt": "You are a test double.",
                                                       "appendSystemPrompt": "Session rule: say ok."})).json()
            bad = await client.post("/session", json={"systemPrompt": 7})
            for sid in (default, own["sessionId"]):
                pid = (await client.post(f"/session/{sid}/prompt", json=prompt("hello"))).json()["promptId"]
                assert (await wait_turn(client, sid, pid))["state"] == "completed"
            # Attaching to a live session leaves its prompt as it is.
            attached = await client.post("/session", json={"sessionId": own["sessionId"], "systemPrompt": "other"})
            pid = (await client.post(f"/session/{own['sessionId']}/prompt", json=prompt("again"))).json()["promptId"]
            await wait_turn(client, own["sessionId"], pid)
    first, second, third = (r.body for r in fake.requests)
    assert f"Working directory: {tmp_path}" in system_of(first) and "todo_write" in system_of(first)
    assert system_of(first).endswith("Operator rule: be brief.")
    assert system_of(second) == "You are a test double.\n\nOperator rule: be brief.\n\nSession rule: say ok."
    assert attached.json()["attached"] is True and system_of(third) == system_of(second)
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert bad.status_code == 400 and bad.json()["path"] == "$.systemPrompt"


async def test_a_subagent_child_gets_its_brief_on_top_of_the_daemon_prompt(nursery, tmp_path):
    fake = FakeOpenAI([
        [{"tool_call": {"name": "agent", "arguments": {"name": "kid", "brief": "Count the files in here."}}}],
    ])  # then "ok" for the parent and for the child's one turn
    url = await nursery.start(fake.serve)
    model = OpenAIModel(OpenAIConfig(base_url=url, api_key=KEY))
    with trio.fail_after(30):
        async with mcp_daemon(model=model, workspace=str(tmp_path), settings=Settings(approval_mode="yolo")) as (daemon, _):
            parent, _ = await daemon.create_session(str(tmp_path))
            async with parent.subscribe(last_event_id=0) as events:
                await parent.prompt("delegate the counting")
                async for event in events:  # the run's end arrives as the agent item finishing
                    if event.type == "background_task" and event.data["status"] == "finished":
                        break
    systems = [system_of(r.body) for r in fake.requests]
    child = [s for s in systems if "# Subagent" in s]
    assert child, systems
    assert "Count the files in here." in child[0] and "goal_reached" in child[0]
    assert child[0].index("todo_write") < child[0].index("# Subagent")  # on top of the default prompt
    assert "# Subagent" not in systems[0]  # the parent's own prompt is the plain default


async def test_the_cli_daemon_turns_a_json_text_call_into_a_tool_call_and_keeps_secrets_out(nursery, tmp_path):
    fake = FakeOpenAI([
        [{"text": "Planning.\n```json\n" + json.dumps({"name": "todo_write", "arguments": TODOS})[:30]},
         {"text": json.dumps({"name": "todo_write", "arguments": TODOS})[30:] + "\n```"}],
        [{"text": "Planned."}],
    ])
    url = await nursery.start(fake.serve)
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"model": {"textToolCalls": "json"}, "approvalMode": "yolo",
                                    "appendSystemPrompt": "House rule."}))
    env = {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": KEY, "OPENAI_MODEL": "fake"}
    async with daemon_process("--model", "openai", "--settings", str(settings), state_dir=tmp_path / "state",
                              env=env) as daemon:
        token = daemon.token()
        async with daemon.client(token) as client:
            sid = (await client.post("/session", json={})).json()["sessionId"]
            pid = (await client.post(f"/session/{sid}/prompt", json=prompt("plan it"))).json()["promptId"]
            assert (await wait_turn(client, sid, pid))["state"] == "completed"
            events = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
            transcript = (await client.get(f"/session/{sid}/transcript")).text
    updates = [f["data"]["update"] for f in events if f["type"] == "session_update"]
    said = "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk")
    assert said == "Planning.\nPlanned."  # the call's text never reached the client
    assert [u["entries"][0]["content"] for u in updates if u["sessionUpdate"] == "plan"] == ["look around"]
    first, second = (r.body for r in fake.requests)
    assert first["tool_choice"] == "auto"
    assistant = second["messages"][2]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["function"]["name"] == "todo_write"
    assert assistant["content"] == "Planning.\n" and second["messages"][3]["role"] == "tool"
    system = system_of(first)
    assert system.endswith("House rule.")
    for secret in (KEY, token):
        assert secret not in system and secret not in transcript
    assert '"system"' not in transcript


async def test_bad_prompt_and_text_call_settings_are_refused_at_start_naming_the_key(tmp_path):
    environ = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    for document, named in (({"model": {"textToolCalls": "xml"}}, "model.textToolCalls: must be one of"),
                            ({"systemPrompt": 5}, "systemPrompt: must be a string, got 5"),
                            ({"appendSystemPrompt": ["x"]}, "appendSystemPrompt: must be a string, got an array")):
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps(document))
        with trio.fail_after(20):
            done = await trio.run_process(
                [sys.executable, "-m", "transport", "--model", "openai", "--port", "0", "--settings", str(settings),
                 "--state-dir", str(tmp_path / "state")],
                env=environ, capture_stdout=True, capture_stderr=True, check=False, stdin=subprocess.DEVNULL)
        assert done.returncode == 2, done.stderr
        assert named in done.stderr.decode() and str(settings) in done.stderr.decode()
