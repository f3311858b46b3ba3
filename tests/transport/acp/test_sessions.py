"""ACP session/list, session/resume, session/fork and the slash commands, over a real daemon."""

from __future__ import annotations

import trio

from actors import CountingIds, load_script, open_daemon
from transport.acp import AcpConnection

from tests.transport.acp.harness import Client, acp_client, new_session, text


def say(words: str) -> list[dict]:
    return [{"text": words}]


def user_texts(request) -> list[str]:
    return [m.content for m in request.messages if m.role == "user"]


def command_updates(client: Client) -> list[dict]:
    return [u for u in client.updates(commands=True) if u["sessionUpdate"] == "available_commands_update"]


async def second_client(daemon, nursery) -> Client:
    other = Client()
    other.conn = AcpConnection(daemon, nursery, other.deliver)
    await other.result("initialize", {"protocolVersion": 1})
    return other


async def test_capabilities_declare_list_resume_and_fork() -> None:
    async with acp_client() as (daemon, client):
        answer = next(m for m in client.sent if "result" in m and "agentCapabilities" in m["result"])
        assert answer["result"]["agentCapabilities"]["sessionCapabilities"] == {"list": {}, "resume": {}, "fork": {}}


async def test_list_shows_live_sessions_with_a_cwd_filter_and_pages(tmp_path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with acp_client() as (daemon, client):
        first = await new_session(client, str(tmp_path / "a"))
        second = await new_session(client, str(tmp_path / "b"))
        listed = await client.result("session/list", {})
        assert {s["sessionId"] for s in listed["sessions"]} == {first, second}
        assert all(s["_meta"]["trellis.dev/live"] for s in listed["sessions"])
        assert "nextCursor" not in listed
        only_a = await client.result("session/list", {"cwd": str(tmp_path / "a")})
        assert [(s["sessionId"], s["cwd"]) for s in only_a["sessions"]] == [(first, str(tmp_path / "a"))]
        assert (await client.request("session/list", {"cursor": "nope"}))["error"]["code"] == -32602


async def test_resume_attaches_without_replaying_history(tmp_path) -> None:
    async with acp_client(say("first answer"), say("second answer")) as (daemon, client):
        sid = await new_session(client, str(tmp_path))
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("one")})
        async with trio.open_nursery() as nursery:
            other = await second_client(daemon, nursery)
            resumed = await other.result("session/resume", {"sessionId": sid, "cwd": str(tmp_path)})
            assert resumed["modes"]["currentModeId"] == "default"
            assert other.updates() == []  # no history replayed
            assert command_updates(other)  # but the commands are announced
            done = await other.result("session/prompt", {"sessionId": sid, "prompt": text("two")})
            assert done["stopReason"] == "end_turn"
            assert user_texts(daemon.runtime.provider.calls[-1]) == ["one", "two"]  # the conversation went on
            await other.conn.close()
            nursery.cancel_scope.cancel()
        unknown = await client.request("session/resume", {"sessionId": "no-such", "cwd": str(tmp_path)})
        assert unknown["error"]["code"] == -32602


async def test_fork_gives_a_new_session_with_the_history(tmp_path) -> None:
    async with acp_client(say("first answer"), say("forked answer")) as (daemon, client):
        sid = await new_session(client, str(tmp_path))
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("one")})
        forked = await client.result("session/fork", {"sessionId": sid, "cwd": str(tmp_path)})
        assert forked["sessionId"] != sid and forked["modes"]["currentModeId"] == "default"
        assert len(command_updates(client)) == 2  # session/new, then session/fork
        await client.result("session/prompt", {"sessionId": forked["sessionId"], "prompt": text("two")})
        request = daemon.runtime.provider.calls[-1]
        assert user_texts(request) == ["one", "two"]
        assert "first answer" in [m.content for m in request.messages if m.role == "assistant"]
        assert daemon.get(forked["sessionId"]).session_id == forked["sessionId"]  # a live session of its own
        missing = await client.request("session/fork", {"sessionId": "no-such", "cwd": str(tmp_path)})
        assert missing["error"]["code"] == -32602


async def test_the_commands_are_announced_and_clear_drops_the_history(tmp_path) -> None:
    async with acp_client(say("a"), say("b")) as (daemon, client):
        sid = await new_session(client, str(tmp_path))
        [update] = command_updates(client)
        names = [c["name"] for c in update["availableCommands"]]
        assert names == ["compact", "clear", "model"]
        assert update["availableCommands"][2]["input"] == {"hint": "model name"}
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("one")})
        cleared = await client.result("session/prompt", {"sessionId": sid, "prompt": text("/clear")})
        assert cleared["stopReason"] == "end_turn"
        assert len(daemon.runtime.provider.calls) == 1  # the command called no model
        said = [u["content"]["text"] for u in client.updates() if u["sessionUpdate"] == "agent_message_chunk"]
        assert said[-1] == "Cleared the conversation (2 messages)."
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("two")})
        assert user_texts(daemon.runtime.provider.calls[-1]) == ["two"]  # no earlier messages


async def test_model_command_changes_the_model_and_an_unknown_word_goes_to_the_model(tmp_path) -> None:
    async with acp_client(say("a"), say("b")) as (daemon, client):
        sid = await new_session(client, str(tmp_path))
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("/model other-model")})
        assert (await daemon.get(sid).status())["model"] == "other-model"
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("/etc/hosts says what?")})
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("/unknown")})
        calls = daemon.runtime.provider.calls
        assert [c.model for c in calls] == ["other-model", "other-model"]
        assert user_texts(calls[-1]) == ["/etc/hosts says what?", "/unknown"]
        usage = await client.result("session/prompt", {"sessionId": sid, "prompt": text("/model")})
        assert usage["stopReason"] == "end_turn" and (await daemon.get(sid).status())["model"] == "other-model"


async def test_compact_summarises_the_conversation_with_one_model_call(tmp_path) -> None:
    script = [say(f"answer {i}") for i in range(4)] + [say("the summary"), say("after")]
    async with acp_client(*script) as (daemon, client):
        sid = await new_session(client, str(tmp_path))
        short = await client.result("session/prompt", {"sessionId": sid, "prompt": text("/compact")})
        assert short["stopReason"] == "end_turn" and not daemon.runtime.provider.calls  # nothing to summarise
        for i in range(4):
            await client.result("session/prompt", {"sessionId": sid, "prompt": text(f"q{i}")})
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("/compact")})
        calls = daemon.runtime.provider.calls
        assert calls[-1].purpose == "compaction"
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("next")})
        first_user = user_texts(daemon.runtime.provider.calls[-1])[0]
        assert first_user.startswith("[Summary of the earlier conversation]") and "the summary" in first_user


async def test_a_rest_prompt_runs_the_command_too(tmp_path) -> None:
    # POST /prompt admits through the same handle: the session, not the transport, runs commands.
    model = load_script({"responses": [say("a"), say("b")]})
    async with open_daemon(model=model, ids=CountingIds()) as daemon:
        handle, _ = await daemon.create_session(str(tmp_path))
        sub = handle.subscribe()
        for prompt in ("one", "/clear", "two"):
            await handle.prompt(prompt)
            async for event in sub:
                if event.type == "turn_complete":
                    break
        assert [user_texts(c) for c in model.calls] == [["one"], ["two"]]


async def test_list_carries_the_title_the_first_prompt_gave_and_the_update_went_out(tmp_path) -> None:
    async with acp_client(say("done")) as (daemon, client):
        sid = await new_session(client, str(tmp_path))
        untitled = (await client.result("session/list", {}))["sessions"]
        assert "title" not in untitled[0]  # none yet: ACP's field is optional
        await client.result("session/prompt", {"sessionId": sid, "prompt": text("Tidy the  docs\nplease")})
        listed = (await client.result("session/list", {}))["sessions"]
        assert listed[0]["title"] == "Tidy the docs"
        info = [u for u in client.updates(info=True) if u["sessionUpdate"] == "session_info_update"]
        assert [u["title"] for u in info] == ["Tidy the docs"] and info[0]["updatedAt"].endswith("Z")
