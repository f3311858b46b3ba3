"""Model errors the session reads more than a code from replay as the same errors.

A server's context-overflow answer tells the session the window (``as the server showed it``), and an
empty stream near the window is taken for an overflow: a replay that handed back a bare ``ModelError``
would learn nothing, and its events would differ from the recorded ones (seen first against llama-server).
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

import trio

from actors import Settings, open_daemon
from actors.model.openai import OpenAIConfig, OpenAIModel
from actors.replay.recorder import Recorder
from actors.replay.recording import read_recording
from transport.fake_openai import FakeOpenAI


async def _record(tmp: Path, script: list, prompts: list[str], nursery) -> Path:
    fake = FakeOpenAI(script)
    url = await nursery.start(fake.serve)
    model = OpenAIModel(OpenAIConfig(base_url=url))  # no window configured: only the server's answer says it
    settings = Settings()  # the default system prompt: the replay's must say what the recorded one said
    recorder = Recorder(tmp / "recordings")
    with trio.fail_after(30):
        async with open_daemon(settings, state_dir=tmp / "state", workspace=str(tmp),
                               **recorder.edges(settings, model)) as daemon:
            recorder.attach(daemon)
            handle, _ = await daemon.create_session()
            for text in prompts:
                events = handle.subscribe()
                prompt_id = (await handle.prompt(text)).prompt_id
                async for event in events:
                    if event.type in ("turn_complete", "turn_error") and event.data.get("promptId") == prompt_id:
                        break
    [path] = sorted((tmp / "recordings").glob("*.jsonl"))
    return path


async def _replay(path: Path) -> str:
    with trio.fail_after(120):
        done = await trio.run_process([sys.executable, "-m", "actors.replay", "--recording", str(path)],
                                      capture_stdout=True, capture_stderr=True, check=False)
    out = (done.stdout + done.stderr).decode()
    assert done.returncode == 0, out
    return out


async def test_a_server_overflow_replays_with_the_window_the_server_showed(tmp_path: Path, nursery) -> None:
    path = await _record(tmp_path, [{"overflow": "llama-server", "limit": 4096, "prompt": 11_787},
                                    [{"text": "ok"}]],
                         [secrets.token_hex(6_000), "Say ok"], nursery)
    errors = [e.data for e in read_recording(path).of_kind("model") if e.data.get("error")]
    assert errors and errors[0]["error"]["limit"] == 4096 and errors[0]["error"]["class"] == "ContextOverflow"
    ended = [e.data for e in read_recording(path).of_kind("event") if e.data.get("type") == "turn_error"]
    assert "4,096 tokens (as the server showed it)" in ended[0]["data"]["message"]
    assert "identical" in await _replay(path)


async def test_an_empty_stream_replays_as_an_empty_stream(tmp_path: Path, nursery) -> None:
    path = await _record(tmp_path, [{"empty": True}, [{"text": "ok"}]], ["hello", "Say ok"], nursery)
    errors = [e.data for e in read_recording(path).of_kind("model") if e.data.get("error")]
    assert errors and errors[0]["error"]["class"] == "EmptyResponse"
    assert "identical" in await _replay(path)
