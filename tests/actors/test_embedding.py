"""Embedding the daemon in a Trio program: a real model from the settings, and exceptions that come out as raised.

The model tests run ``open_daemon`` with the real openai provider against the loopback fake server
(:mod:`transport.fake_openai`: real HTTP on port 0). The exception tests run a real daemon; a failure of the
daemon's own tasks is a task started in its nursery, and Ctrl-C is a real SIGINT sent to a child process.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio

import actors
from transport.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "how-to" / "embedding.md"
KEY = "sk-embed-SECRET-0123456789"
LIMIT = 10  # seconds per test
OPENAI_VARS = ("OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY")


@pytest.fixture(autouse=True)
def no_openai_environment(monkeypatch):
    """The developer's own OPENAI_* must not change what these tests see."""
    for name in OPENAI_VARS:
        monkeypatch.delenv(name, raising=False)


async def answer(daemon: actors.Daemon, prompt: str) -> tuple[str, dict]:
    """The agent's text for one prompt in a new session, and its turn_complete's data."""
    session, _ = await daemon.create_session()
    admitted = await session.prompt(prompt)
    text = []
    async with session.subscribe(last_event_id=admitted.last_event_id) as events:
        async for event in events:
            if event.type == "session_update" and event.data["update"]["sessionUpdate"] == "agent_message_chunk":
                text.append(event.data["update"]["content"]["text"])
            if event.type == "turn_complete":
                return "".join(text), event.data
    raise AssertionError("the stream ended before turn_complete")


# ----------------------------------------------------------------- D4: the settings' model takes effect


async def test_a_settings_file_naming_openai_runs_that_server(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # the key as the daemon takes it: from the environment
    fake = FakeOpenAI([[{"text": "hello from the model server"}]])
    caplog.set_level(logging.DEBUG)
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(fake.serve)
            path = tmp_path / "settings.json"
            path.write_text(json.dumps({"model": {"provider": "openai", "baseUrl": url, "name": "served-model"}}))
            async with actors.open_daemon(actors.load_settings(path), state_dir=tmp_path / "state") as daemon:
                text, done = await answer(daemon, "hello there")
            nursery.cancel_scope.cancel()
    assert text == "hello from the model server"
    assert done["stopReason"] == "end_turn"
    [request] = fake.requests
    assert request.body["model"] == "served-model"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in caplog.text


async def test_the_settings_win_over_the_environment_as_for_the_daemon(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens there
    monkeypatch.setenv("OPENAI_MODEL", "from-the-environment")
    fake = FakeOpenAI([[{"text": "settings won"}]])
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(fake.serve)
            settings = actors.Settings(model={"provider": "openai", "baseUrl": url})
            async with actors.open_daemon(settings) as daemon:
                text, _ = await answer(daemon, "hi")
            nursery.cancel_scope.cancel()
    assert text == "settings won"
    [request] = fake.requests
    assert request.body["model"] == "from-the-environment"  # the settings name none: the environment's
    assert "authorization" not in request.headers


async def test_the_factory_an_embedder_calls_builds_the_same_provider(monkeypatch):
    fake = FakeOpenAI([[{"text": "built by hand"}]])
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(fake.serve)
            settings = actors.Settings(model={"provider": "openai", "name": "m"})
            model = actors.provider_from_settings(settings, environ={"OPENAI_BASE_URL": url})
            async with actors.open_daemon(model=model) as daemon:
                text, _ = await answer(daemon, "hi")
            nursery.cancel_scope.cancel()
    assert text == "built by hand"


async def test_without_a_model_setting_the_demo_model_runs(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_MODEL", "unused")
    with trio.fail_after(LIMIT):
        async with actors.open_daemon() as daemon:
            text, done = await answer(daemon, "Plan a picnic")
    assert done["stopReason"] == "end_turn"
    assert text  # the scripted demo answers; nothing was sent to 127.0.0.1:9


@pytest.mark.parametrize(("model", "message"), [
    ({"provider": "openai"}, 'settings model.provider "openai" needs a base URL: $OPENAI_BASE_URL or settings '
                             "model.baseUrl (e.g. http://127.0.0.1:8080/v1); and a model name: $OPENAI_MODEL or "
                             "settings model.name"),
    ({"provider": "openai", "baseUrl": "user:hunter2@127.0.0.1:8080/v1", "name": "m"},
     "settings: model.baseUrl: must be an http:// or https:// URL with a host"),
    ({"provider": "anthropic"}, "model.provider must be 'scripted' or 'openai'"),
])
async def test_a_model_setting_that_cannot_run_is_refused_before_anything_starts(tmp_path, model, message):
    with pytest.raises(actors.SettingsError) as info:
        async with actors.open_daemon(actors.Settings(model=model), state_dir=tmp_path / "state"):
            raise AssertionError("the body ran")
    assert message in str(info.value)
    assert "hunter2" not in str(info.value)
    assert not (tmp_path / "state").exists()


def test_the_guides_real_model_example_runs_as_written(tmp_path):
    text = GUIDE.read_text()
    section = text[text.index("\n## A real model\n"):]
    section = section[:section.index("\n## ", 1)]
    [example] = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    (tmp_path / "example.py").write_text(example)
    env = {k: v for k, v in os.environ.items() if k not in OPENAI_VARS and not k.lower().endswith("_proxy")}
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-2:] == ["Hello from the model server.", "end_turn"], done.stdout


# ----------------------------------------------------------------- D15: the body's exception comes out as itself


async def test_the_bodys_exception_comes_out_as_itself_after_the_graceful_shutdown(tmp_path):
    error = ValueError("my own error")
    with trio.fail_after(LIMIT):
        with pytest.raises(ValueError) as info:
            async with actors.open_daemon(state_dir=tmp_path) as daemon:
                session, _ = await daemon.create_session()
                raise error
    assert info.value is error
    assert daemon.shutting_down and daemon.closed.is_set()
    assert (tmp_path / "sessions" / f"{session.session_id}.session.json").exists()


async def test_a_keyboard_interrupt_in_the_body_comes_out_as_itself():
    with trio.fail_after(LIMIT):
        with pytest.raises(KeyboardInterrupt):
            async with actors.open_daemon():
                raise KeyboardInterrupt


async def test_an_exception_group_of_the_body_comes_out_as_raised():
    group = ExceptionGroup("the body's own", [KeyError("a"), KeyError("b")])
    with trio.fail_after(LIMIT):
        with pytest.raises(ExceptionGroup) as info:
            async with actors.open_daemon():
                raise group
    assert info.value is group


async def test_a_cancellation_from_outside_still_ends_the_daemon_in_order():
    with trio.fail_after(LIMIT):
        with trio.move_on_after(0.2) as outer:
            async with actors.open_daemon() as daemon:
                await trio.sleep_forever()
    assert outer.cancelled_caught
    assert daemon.closed.is_set()


async def crash(exc: BaseException) -> None:
    await trio.sleep(0)
    raise exc


async def test_a_failure_of_the_daemons_own_tasks_still_surfaces():
    with trio.fail_after(LIMIT):
        with pytest.RaisesGroup(pytest.RaisesGroup(RuntimeError)):
            async with actors.open_daemon() as daemon:
                daemon._nursery.start_soon(crash, RuntimeError("an actor crashed"))
                await trio.sleep_forever()


async def test_the_bodys_exception_and_a_failure_of_the_daemons_tasks_surface_together():
    with trio.fail_after(LIMIT):
        with pytest.RaisesGroup(ValueError, pytest.RaisesGroup(RuntimeError)):
            async with actors.open_daemon() as daemon:
                daemon._nursery.start_soon(crash, RuntimeError("an actor crashed"))
                try:
                    await trio.sleep_forever()
                except trio.Cancelled:
                    raise ValueError("the body failed as it was cancelled") from None


async def test_ctrl_c_hitting_one_of_the_daemons_tasks_is_a_keyboard_interrupt():
    with trio.fail_after(LIMIT):
        with pytest.raises(KeyboardInterrupt):
            async with actors.open_daemon() as daemon:
                daemon._nursery.start_soon(crash, KeyboardInterrupt())
                await trio.sleep_forever()


CTRL_C_PROGRAM = textwrap.dedent("""
    import trio, actors

    async def main():
        model = actors.load_script([{"steps": [{"text": "starting "}, {"sleep": 60}, {"text": "never"}]}])
        async with actors.open_daemon(model=model, state_dir="state") as daemon:
            session, _ = await daemon.create_session()
            admitted = await session.prompt("work slowly")
            async with session.subscribe(last_event_id=admitted.last_event_id) as events:
                async for event in events:
                    if event.data.get("update", {}).get("sessionUpdate") == "agent_message_chunk":
                        print("working", flush=True)
                        await trio.sleep_forever()

    try:
        trio.run(main)
    except KeyboardInterrupt:
        print("caught KeyboardInterrupt", flush=True)
""")


def test_ctrl_c_reaches_the_programs_own_handler_after_the_turn_ended(tmp_path):
    (tmp_path / "program.py").write_text(CTRL_C_PROGRAM)
    with subprocess.Popen([sys.executable, "program.py"], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL) as child:
        try:
            assert child.stdout.readline() == "working\n"
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=30)
        finally:
            child.kill()
    assert child.returncode == 0, err
    assert out == "caught KeyboardInterrupt\n", err
    assert "Traceback" not in err
    [journal] = (tmp_path / "state" / "sessions").glob("*.journal.jsonl")
    *_, last = (json.loads(line) for line in journal.read_text().splitlines())
    assert (last["op"], last["state"]) == ("ended", "cancelled")  # the graceful shutdown ended the turn
