"""The registry in process (no HTTP): validation, spawn and revocation, child sessions, settings, argv."""

from __future__ import annotations

import os
import types

import pytest
import trio

from actors import CountingIds, load_script, open_daemon
from actors.settings import SettingsError
from actors.subagents import StartError, SubagentConfig
from actors.subagents.runners import RunnerError, build_argv

BASE = "http://127.0.0.1:9"  # nothing listens: these children never signal


def child(*responses):
    return load_script({"responses": list(responses), "then": "error"})


async def test_start_needs_an_http_address_and_leaves_nothing_behind(tmp_path):
    async with open_daemon(ids=CountingIds(), workspace=str(tmp_path)) as daemon:
        with pytest.raises(StartError, match="not serving HTTP"):
            await daemon.subagents.start({"name": "a", "brief": "b"})
        assert len(daemon.subagents.tokens) == 0 and daemon.session_count == 0


@pytest.mark.parametrize("arguments, message", [
    ({"name": "../x", "brief": "b"}, "name must be"),
    ({"name": "a", "brief": "  "}, "brief must be"),
    ({"name": "a", "brief": "b", "max_turns": True}, "max_turns"),
    ({"name": "a", "brief": "b", "max_turns": 0}, "max_turns"),
    ({"name": "a", "brief": "b", "goal": ""}, "goal must be"),
    ({"name": "a", "brief": "b", "cwd": "no/such/dir"}, "not a directory"),
    ({"name": "a", "brief": "b", "report_file": "no/such/dir/r.md"}, "existing directory"),
    ({"name": "a", "brief": "b", "runner": "shell"}, "runner must be"),
    ({"name": "a", "brief": "b", "runner": "command"}, "no command runner"),
    ({"name": "a", "brief": "b", "session": "x"}, "unknown argument"),
])
async def test_a_refused_start_mints_nothing(tmp_path, arguments, message):
    async with open_daemon(ids=CountingIds(), workspace=str(tmp_path)) as daemon:
        daemon.subagents.base_url = BASE
        with pytest.raises(StartError, match=message):
            await daemon.subagents.start(arguments)
        assert len(daemon.subagents.tokens) == 0
        assert daemon.subagents._dir is None or not list(daemon.subagents._dir.iterdir())


async def test_a_wedged_child_session_ages_and_stop_closes_it(tmp_path, autojump_clock):
    model = child({"delay": 10_000, "steps": [{"text": "late"}]})
    async with open_daemon(model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
        registry = daemon.subagents
        registry.base_url = BASE
        run = await registry.start({"name": "w", "brief": "think", "goal": "an answer"})
        assert daemon.session_count == 1  # the child session
        with pytest.raises(StartError, match="underway"):
            await registry.start({"name": "w", "brief": "again"})
        await trio.sleep(1)
        first = registry.status("w")
        await trio.sleep(120)
        second = registry.status("w")
        assert (second["state"], second["turn"], second["maxTurns"], second["endReason"]) == ("running", 1, 5, None)
        assert second["lastEventAgeS"] >= first["lastEventAgeS"] + 120
        config = run.config_path
        assert config is not None and config.exists()
        stopped = await registry.stop("w")
        assert stopped["endReason"] == "stopped" and stopped["state"] == "idle"
        assert daemon.session_count == 0  # the child session went with the run
        assert len(registry.tokens) == 0 and not config.exists()
        # An ended name may be started again, with a fresh token and file.
        assert run.token is not None and registry.resolve(run.token) is None


async def test_a_run_that_ends_revokes_its_token_before_it_reports_the_end(tmp_path):
    model = child([{"text": "done"}])
    async with open_daemon(model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
        daemon.subagents.base_url = BASE
        seen: list = []
        run = await daemon.subagents.start(
            {"name": "quick", "brief": "go"},
            on_end=lambda r: seen.append((r.end_reason, daemon.subagents.resolve(r.token), r.config_path.exists())))
        with trio.fail_after(10):
            await run.ended.wait()
        assert seen == [("no_goal", None, False)]
        assert [s["name"] for s in daemon.subagents.list()] == ["quick"]
    assert daemon.subagents._dir is not None and not daemon.subagents._dir.exists()  # temporary dir removed


def test_settings_are_read_from_the_subagents_key():
    settings = types.SimpleNamespace(subagents={
        "runners": {"command": {"template": "claude -p {brief} --mcp-config {config}"},
                    "session": {"model": "small", "approvalMode": "yolo"}},
        "defaultRunner": "command", "signalGraceSeconds": 5})
    config = SubagentConfig.from_settings(settings)
    assert config == SubagentConfig(command_template="claude -p {brief} --mcp-config {config}",
                                    session_model="small", session_approval_mode="yolo",
                                    default_runner="command", signal_grace_seconds=5.0)
    assert SubagentConfig.from_settings(types.SimpleNamespace()) == SubagentConfig()
    with pytest.raises(SettingsError, match="template"):
        SubagentConfig.from_settings(types.SimpleNamespace(subagents={"runners": {"command": {"template": 3}}}))


def test_argv_is_split_like_a_shell_and_placeholders_fill_single_words():
    argv = build_argv("claude -p {brief} --mcp-config {config} --name 'x {brief}'",
                      brief="a; rm -rf / {config} $(id)", config="/tmp/c.json")
    assert argv == ["claude", "-p", "a; rm -rf / {config} $(id)", "--mcp-config", "/tmp/c.json",
                    "--name", "x a; rm -rf / {config} $(id)"]
    with pytest.raises(RunnerError):
        build_argv("claude 'unclosed", brief="", config="")
    with pytest.raises(RunnerError):
        build_argv("   ", brief="", config="")


async def test_config_files_are_private_and_never_shared(tmp_path):
    from actors.subagents.files import make_private_dir, read_signal_url, write_mcp_config

    directory, temporary = make_private_dir(tmp_path / "cfg")
    assert not temporary and oct(os.stat(directory).st_mode & 0o777) == "0o700"
    a = write_mcp_config(directory, "same", "http://h:1/signal/mcp/AAA")
    b = write_mcp_config(directory, "same", "http://h:1/signal/mcp/BBB")
    assert a != b
    assert oct(os.stat(a).st_mode & 0o777) == "0o600"
    assert read_signal_url(a).endswith("AAA") and read_signal_url(b).endswith("BBB")
    assert sorted(p.name for p in directory.iterdir()) == sorted([a.name, b.name])  # no temporary left


def test_the_config_file_carries_what_claude_code_and_qwen_code_read(tmp_path):
    """One server entry for both CLIs: ``type``/``url`` (Claude Code), ``httpUrl`` (qwen-code, gemini-cli).

    Given a bare ``url``, qwen-code 0.24 takes the old SSE transport and the server fails to start;
    tests/e2e/test_real_agent_clis.py runs both CLIs on this file.
    """
    import json

    from actors.subagents.files import read_signal_url, write_mcp_config

    url = "http://127.0.0.1:4170/signal/mcp/TOKEN"
    path = write_mcp_config(tmp_path, "run", url)
    assert json.loads(path.read_text()) == {
        "mcpServers": {"trellis": {"type": "http", "url": url, "httpUrl": url}}}
    assert read_signal_url(path) == url
    # A file of the older form (no httpUrl), as a daemon of before wrote it, still reads.
    old = tmp_path / "old.mcp.json"
    old.write_text(json.dumps({"mcpServers": {"trellis": {"type": "http", "url": url}}}))
    assert read_signal_url(old) == url


@pytest.mark.parametrize("configured, daemon_mode, parent, expected", [
    ("yolo", "default", "default", "default"),  # the parent's stricter mode wins over the configured one
    ("auto-edit", "default", "yolo", "auto-edit"),  # a laxer parent never loosens the child
    (None, "auto-edit", "plan", "plan"),  # the daemon's mode is the child's own when none is configured
    (None, "auto-edit", None, "auto-edit"),  # no parent session (the MCP start): the child's own mode
])
async def test_a_child_session_is_never_laxer_than_the_session_that_started_it(tmp_path, configured, daemon_mode,
                                                                             parent, expected):
    from actors import Settings

    model = child({"delay": 10_000, "steps": []})
    async with open_daemon(Settings(approval_mode=daemon_mode), model=model, ids=CountingIds(),
                           workspace=str(tmp_path)) as daemon:
        daemon.subagents.base_url = BASE
        daemon.subagents.config = SubagentConfig(session_approval_mode=configured)
        await daemon.subagents.start({"name": "c", "brief": "b"}, parent_mode=parent)
        (kid,) = daemon.sessions()
        assert (await kid.status())["approvalMode"] == expected
        await daemon.subagents.stop("c")


def test_stricter_orders_plan_default_auto_edit_yolo():
    from actors.subagents.runners import stricter

    assert stricter("yolo", "auto-edit") == "auto-edit" and stricter("default", "auto-edit") == "default"
    assert stricter("plan", "yolo") == "plan" and stricter(None, "yolo") == "yolo" and stricter() is None
    assert stricter("yolo", "a-mode-added-later") == "plan"  # unknown: taken as the strictest


async def test_child_sessions_take_the_configured_model_and_approval_mode(tmp_path):
    model = child({"delay": 10_000, "steps": []})
    async with open_daemon(model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
        daemon.subagents.base_url = BASE
        daemon.subagents.config = SubagentConfig(session_model="small", session_approval_mode="yolo")
        await daemon.subagents.start({"name": "c", "brief": "b"})
        (kid,) = daemon.sessions()
        status = await kid.status()
        assert (status["model"], status["approvalMode"]) == ("small", "yolo")
        assert {"goal_reached", "need_help"} <= {t.name for t in kid._session.tools}
        await daemon.subagents.stop("c")
