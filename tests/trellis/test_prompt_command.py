"""``trellis prompt``: the real command against a real daemon subprocess with a scripted model."""

from __future__ import annotations

import json
import signal
import socket

import trio

from tests.trellis.helpers import (
    Result,
    client_env,
    daemon_args,
    running_trellis,
    scripted_daemon,
    trellis,
)
from trellis.prompt import STOP_EXIT

TODOS = {"todos": [{"id": "t1", "content": "migrate the billing tables", "status": "in_progress"}]}
SLOW = [{"text": "working "}, {"sleep": 30}, {"text": "never shown"}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session_of(stderr: str) -> tuple[str, str]:
    """The ids ``--verbose`` says: ``trellis: session S, prompt P``."""
    line = next(line for line in stderr.splitlines() if line.startswith("trellis: session "))
    session, prompt = line.removeprefix("trellis: session ").split(", prompt ")
    return session, prompt


async def test_the_answer_streams_to_stdout_and_end_turn_exits_0(tmp_path):
    async with scripted_daemon(tmp_path, [{"text": "Hello, "}, {"thought": "hmm"}, {"text": "world."}]) as daemon:
        result = await trellis("prompt", *daemon_args(daemon), "say", "hello", cwd=tmp_path)
        async with daemon.client(daemon.token()) as client:
            sessions = (await client.get("/session")).json()["sessions"]
    assert result.code == 0, result.stderr
    assert result.stdout == "Hello, world.\n"  # the answer only: no echo of the prompt, no thoughts, no ids
    assert result.stderr == ""
    # The session it created was closed again, and stays restorable; it worked in the caller's directory.
    assert [(s["live"], s["restorable"], s["cwd"]) for s in sessions] == [(False, True, str(tmp_path))]


async def test_thoughts_go_to_stderr_with_thoughts(tmp_path):
    steps = [{"thought": "first "}, {"thought": "think"}, {"text": "answer"}, {"thought": "after"}]
    async with scripted_daemon(tmp_path, steps) as daemon:
        result = await trellis("prompt", *daemon_args(daemon), "--thoughts", "think aloud", cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert result.stdout == "answer\n"
    assert result.stderr == "first think\nafter\n"  # not a terminal: not dimmed


async def test_json_prints_every_frame_of_the_turn_and_ends_with_turn_complete(tmp_path):
    async with scripted_daemon(tmp_path, [{"text": "one "}, {"text": "two"}]) as daemon:
        result = await trellis("prompt", *daemon_args(daemon), "--json", "count", cwd=tmp_path)
    assert result.code == 0, result.stderr
    frames = result.json_lines()
    assert frames[-1]["type"] == "turn_complete" and frames[-1]["data"]["stopReason"] == "end_turn"
    assert len({f["promptId"] for f in frames}) == 1
    ids = [f["id"] for f in frames]
    assert ids == sorted(set(ids))
    updates = [f["data"]["update"] for f in frames if f["type"] == "session_update"]
    assert updates[0] == {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "count"}}
    assert [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"] == ["one ", "two"]
    assert result.stderr == ""


async def test_the_prompt_is_read_from_stdin_with_a_dash(tmp_path):
    async with scripted_daemon(tmp_path, [{"text": "read it"}]) as daemon:
        result = await trellis("prompt", *daemon_args(daemon), "--json", "-", cwd=tmp_path,
                               stdin=b"a prompt\nfrom stdin\n")
        empty = await trellis("prompt", *daemon_args(daemon), "-", cwd=tmp_path, stdin=b"  \n")
    assert result.code == 0, result.stderr
    first = result.json_lines()[0]["data"]["update"]
    assert first["sessionUpdate"] == "user_message_chunk" and first["content"]["text"] == "a prompt\nfrom stdin\n"
    assert empty.code == 2 and "the prompt is empty" in empty.stderr


async def test_session_reuse_restores_a_closed_session_and_attaches_to_a_live_one(tmp_path):
    async with scripted_daemon(tmp_path, [{"text": "first"}], [{"text": "second"}], [{"text": "third"}]) as daemon:
        args = daemon_args(daemon)
        one = await trellis("prompt", *args, "-v", "remember 1", cwd=tmp_path)
        sid, _ = session_of(one.stderr)
        # Closed after its turn: --session restores it; --keep leaves it live, in the mode asked for.
        two = await trellis("prompt", *args, "-v", "--session", sid, "--keep", "--approval-mode", "yolo",
                            "remember 2", cwd=tmp_path)
        three = await trellis("prompt", *args, "-v", "--session", sid, "remember 3", cwd=tmp_path)
        missing = await trellis("prompt", *args, "--session", "no-such-session", "hi", cwd=tmp_path)
        async with daemon.client(daemon.token()) as client:
            status = (await client.get(f"/session/{sid}/status")).json()
            entries = (await client.get(f"/session/{sid}/transcript")).json()["entries"]
    assert (one.code, two.code, three.code) == (0, 0, 0), (one.stderr, two.stderr, three.stderr)
    assert (one.stdout, two.stdout, three.stdout) == ("first\n", "second\n", "third\n")
    assert f"restored session {sid}" in two.stderr and session_of(two.stderr)[0] == sid
    assert "restored" not in three.stderr and session_of(three.stderr)[0] == sid
    assert status["approvalMode"] == "yolo"  # live still: the third run did not start it, so left it open
    said = [e["message"]["content"] for e in entries if e.get("type") == "message" and e["message"]["role"] == "user"]
    assert said == ["remember 1", "remember 2", "remember 3"]
    assert missing.code == 2 and "no session 'no-such-session'" in missing.stderr


async def test_exit_codes_by_stop_reason(tmp_path):
    nope = [{"tool_call": {"name": "nope", "arguments": {}}}]
    responses = [{"refuse": {"code": "rate_limited", "message": "slow down"}},
                 [{"text": "cut sh"}, {"finish": "length"}],
                 nope, nope, nope]
    async with scripted_daemon(tmp_path, *responses) as daemon:
        failed = await trellis("prompt", *daemon_args(daemon), "a", cwd=tmp_path)
        cut = await trellis("prompt", *daemon_args(daemon), "b", cwd=tmp_path)
        looped = await trellis("prompt", *daemon_args(daemon), "--json", "c", cwd=tmp_path)
    assert failed.code == 1 and failed.stdout == ""
    assert "[turn failed: slow down (rate_limited)]" in failed.stderr
    assert cut.code == STOP_EXIT["max_tokens"] == 3 and cut.stdout == "cut sh\n"
    assert "[daemon: The answer was cut off" in cut.stderr and "[turn ended: max_tokens]" in cut.stderr
    assert looped.code == STOP_EXIT["max_turn_requests"] == 5
    assert looped.json_lines()[-1]["data"]["stopReason"] == "max_turn_requests"


async def test_a_turn_error_in_json_mode_ends_with_turn_error(tmp_path):
    failing = [{"text": "partial "}, {"fail": {"code": "stream_cut", "message": "cut mid-answer"}}]
    async with scripted_daemon(tmp_path, failing) as daemon:
        result = await trellis("prompt", *daemon_args(daemon), "--json", "hi", cwd=tmp_path)
        exhausted = await trellis("prompt", *daemon_args(daemon), "hi", cwd=tmp_path)
    assert result.code == 1 and result.stderr == ""
    last = result.json_lines()[-1]
    assert last["type"] == "turn_error" and last["data"]["code"] == "stream_cut"
    assert exhausted.code == 1 and "(script_exhausted)]" in exhausted.stderr


async def test_tool_calls_and_guard_continuations_go_to_stderr(tmp_path):
    responses = [
        [{"text": "Planning."}, {"tool_call": {"name": "todo_write", "arguments": TODOS}},
         {"tool_call": {"name": "nope", "arguments": {}}}],
        [{"text": "I stop."}],
        [{"text": "Still stopping."}],
        [{"text": "Stopping again."}],
    ]
    async with scripted_daemon(tmp_path, *responses, guard=True) as daemon:
        result = await trellis("prompt", *daemon_args(daemon), "migrate", cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert result.stdout == "Planning.\n\nI stop.\n\nStill stopping.\n\nStopping again.\n"  # a message a paragraph
    assert result.stderr.splitlines() == [
        "▸ nope … failed: unknown tool 'nope'",
        "[todo stop guard, attempt 1 of 2]",
        "[todo stop guard, attempt 2 of 2]",
        "[todo stop guard, stopped after attempt 2 of 2; 1 todo(s) unfinished]",
    ]
    assert "billing" not in result.stderr


async def test_separate_messages_are_parted_by_a_blank_line_on_stdout(tmp_path):
    """Text split by a tool call is two messages: glued, "## Result" would be no heading (``> answer.md``)."""
    (tmp_path / "README.md").write_text("# Title\n")
    responses = [
        [{"text": "Let me check the file."}, {"tool_call": {"name": "read_file", "arguments": {"path": "README.md"}}}],
        [{"text": "## Result\n\nThe README starts "}, {"text": "with a title."}],
    ]
    async with scripted_daemon(tmp_path, *responses) as daemon:
        result = await trellis("prompt", *daemon_args(daemon), "read it", cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert result.stdout == "Let me check the file.\n\n## Result\n\nThe README starts with a title.\n"


async def test_ctrl_c_cancels_the_turn_and_exits_4(tmp_path):
    async with scripted_daemon(tmp_path, SLOW) as daemon:
        async with running_trellis("prompt", *daemon_args(daemon), "work slowly", cwd=tmp_path) as run:
            await run.read_until("working")  # streamed as it arrives, long before the turn ends
            run.process.send_signal(signal.SIGINT)
            result = await run.finish()
        async with daemon.client(daemon.token()) as client:
            sessions = (await client.get("/session")).json()["sessions"]
    assert result.code == 4, result.stderr
    assert result.stdout == "working \n"
    assert "cancelling the turn" in result.stderr and "[turn ended: cancelled]" in result.stderr
    assert [s["live"] for s in sessions] == [False]  # closed after the cancelled turn


async def test_a_second_ctrl_c_stops_waiting_and_exits_130(tmp_path):
    async with scripted_daemon(tmp_path, SLOW) as daemon:
        async with running_trellis("prompt", *daemon_args(daemon), "work slowly", cwd=tmp_path) as run:
            await run.read_until("working")
            daemon.process.send_signal(signal.SIGSTOP)  # the cancel cannot be answered: it waits
            try:
                run.process.send_signal(signal.SIGINT)
                await run.read_until("cancelling", stream="stderr")
                run.process.send_signal(signal.SIGINT)
                result = await run.finish()
            finally:
                daemon.process.send_signal(signal.SIGCONT)
    assert result.code == 130, result.stderr
    assert "stopped waiting" in result.stderr


async def test_trellis_cancel_ends_a_running_prompt_with_4(tmp_path):
    async with scripted_daemon(tmp_path, SLOW) as daemon:
        args = daemon_args(daemon)
        async with running_trellis("prompt", *args, "-v", "--keep", "work slowly", cwd=tmp_path) as run:
            await run.read_until("working")
            await run.read_until(", prompt ", stream="stderr")
            sid, prompt_id = session_of(run.stderr.decode())
            cancel = await trellis("cancel", *args, sid, cwd=tmp_path)
            result = await run.finish()
        again = await trellis("cancel", *args, sid, "--json", cwd=tmp_path)
    assert cancel.code == 0 and cancel.stdout == f"cancelled turn {prompt_id} of session {sid}\n"
    assert result.code == 4
    assert again.code == 0 and json.loads(again.stdout) == {"sessionId": sid, "cancelled": False, "promptId": None}


async def test_a_full_queue_is_refused_with_2(tmp_path):
    async with scripted_daemon(tmp_path, SLOW, args=("--max-pending-prompts", "1")) as daemon:
        args = daemon_args(daemon)
        async with running_trellis("prompt", *args, "-v", "--keep", "work slowly", cwd=tmp_path) as run:
            await run.read_until("working")
            await run.read_until(", prompt ", stream="stderr")
            sid, _ = session_of(run.stderr.decode())
            refused = await trellis("prompt", *args, "--session", sid, "one more", cwd=tmp_path)
    assert refused.code == 2 and refused.stdout == ""
    assert "HTTP 503 prompt_queue_full" in refused.stderr


async def test_no_daemon_exits_2_naming_the_url_and_how_to_start_one(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    for command in (["prompt", "hi"], ["sessions"], ["status", "s1"], ["cancel", "s1"]):
        result = await trellis(*command, "--url", url, cwd=tmp_path)
        assert result.code == 2, command
        assert result.stdout == ""
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"trellis: no daemon answers at {url}") and "trellis serve" in line
    by_env = await trellis("sessions", cwd=tmp_path, env=client_env(TRELLIS_URL=url))
    assert by_env.code == 2 and url in by_env.stderr


async def test_the_token_comes_from_the_environment_or_the_state_directory(tmp_path):
    token = {"TRELLIS_TOKEN": "t0ken-given"}
    async with scripted_daemon(tmp_path, [{"text": "a"}], [{"text": "b"}], env=token) as daemon:
        by_env = await trellis("prompt", "--url", daemon.url, "hi", cwd=tmp_path,
                               env=client_env(TRELLIS_TOKEN="t0ken-given"))
        none = await trellis("prompt", "--url", daemon.url, "hi", cwd=tmp_path)
        wrong = await trellis("sessions", "--url", daemon.url, "--token", "wrong", cwd=tmp_path,
                              env=client_env(TRELLIS_TOKEN="t0ken-given"))
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "token").write_text("t0ken-given\n")
        by_file = await trellis("prompt", "--url", daemon.url, "--state-dir", str(tmp_path / "elsewhere"), "hi",
                                cwd=tmp_path)
    assert by_env.code == 0 and by_env.stdout == "a\n", by_env.stderr
    assert by_file.code == 0 and by_file.stdout == "b\n", by_file.stderr
    assert none.code == 2 and "HTTP 401 unauthorized" in none.stderr
    assert f"not found at {tmp_path / '.trellis' / 'token'}" in none.stderr
    assert wrong.code == 2 and "HTTP 401 unauthorized" in wrong.stderr and "came from --token" in wrong.stderr


async def test_the_minted_token_is_found_through_trellis_state_dir(tmp_path):
    async with scripted_daemon(tmp_path, [{"text": "found"}]) as daemon:
        result = await trellis("prompt", "hi", cwd=tmp_path,
                               env=client_env(TRELLIS_URL=daemon.url, TRELLIS_STATE_DIR=str(daemon.state_dir)))
    assert result.code == 0 and result.stdout == "found\n", result.stderr


async def test_other_clients_turns_on_the_session_are_not_shown(tmp_path):
    async with scripted_daemon(tmp_path, [{"text": "theirs "}, {"sleep": 0.5}, {"text": "still theirs"}],
                               [{"text": "mine"}]) as daemon:
        async with daemon.client(daemon.token()) as client:
            sid = (await client.post("/session", json={})).json()["sessionId"]
            await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "first"}]})
            # Queued behind the other turn: only this prompt's text, and its end.
            result = await trellis("prompt", *daemon_args(daemon), "--session", sid, "second", cwd=tmp_path)
            live = [s["live"] for s in (await client.get("/session")).json()["sessions"]]
    assert result.code == 0 and result.stdout == "mine\n", result.stderr
    assert live == [True]  # not started by the command: left as it was


async def test_every_client_subcommand_has_version_and_help(tmp_path):
    results: dict[tuple[str, ...], Result] = {}

    async def one(*args: str) -> None:
        results[args] = await trellis(*args, cwd=tmp_path)

    commands = ("prompt", "sessions", "status", "cancel", "open")
    async with trio.open_nursery() as nursery:
        for command in commands:
            nursery.start_soon(one, command, "--version")
            nursery.start_soon(one, command, "--help")
        nursery.start_soon(one, "prompt")
    for command in commands:
        version, help_ = results[command, "--version"], results[command, "--help"]
        assert version.code == 0 and version.stdout.startswith("trellis "), command
        assert "--url" in help_.stdout and "--state-dir" in help_.stdout, command
    assert "exit codes:" in results["prompt", "--help"].stdout
    assert "max_turn_requests" in results["prompt", "--help"].stdout
    usage = results["prompt",]
    assert usage.code == 2 and "TEXT" in usage.stderr


def test_stop_reasons_of_the_daemon_all_have_an_exit_code():
    from actors.session import outcomes

    reasons = {cls.reason for cls in vars(outcomes).values()
               if isinstance(cls, type) and issubclass(cls, outcomes.HardStop)}
    assert reasons <= set(STOP_EXIT), reasons - set(STOP_EXIT)
    assert len(set(STOP_EXIT.values()) - {6}) == len(STOP_EXIT) - 1  # distinct, but for the catch-all
