"""The ``command`` runner: an external CLI per turn, playing a subagent through the official ``mcp`` client."""

from __future__ import annotations

import shlex
import sys
import textwrap

import trio

from actors import Settings
from actors.subagents import SubagentConfig
from tests.processes import marker, pids_with
from tests.transport.mcp.harness import await_end, mcp_daemon, mcp_session, start, status, text_of

SUBAGENT = textwrap.dedent('''
    """Plays a command-line subagent: reads its --mcp-config, signals through the mcp client."""
    import argparse, json, os, pathlib, sys

    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    parser = argparse.ArgumentParser()
    parser.add_argument("--brief")
    parser.add_argument("--mcp-config")
    parser.add_argument("--log")
    args = parser.parse_args()
    url = json.loads(pathlib.Path(args.mcp_config).read_text())["mcpServers"]["trellis"]["url"]
    with open(args.log, "a") as log:
        log.write(json.dumps({"brief": args.brief, "config": args.mcp_config,
                              "daemon_token": os.environ.get("TRELLIS_TOKEN")}) + "\\n")
    if "turn 2 of" not in args.brief:
        print("not there yet")
        sys.exit(3)
    pathlib.Path("sub-report.md").write_text("# report\\nthe needle was in the haystack\\n")

    async def main():
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool(
                    "goal_reached", {"summary": "found the needle", "report_file": "sub-report.md"})
                print("ack:", result.content[0].text)

    anyio.run(main)
''')

SLEEPER = textwrap.dedent('''
    import pathlib, subprocess, sys, time
    # Marked with a word of its own: inside the sandbox's PID namespace its pid means nothing outside.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", sys.argv[2]])
    pathlib.Path(sys.argv[1]).write_text(f"{child.pid}")
    time.sleep(120)
''')


async def test_a_command_subagent_reaches_its_goal_through_the_mcp_client(tmp_path, monkeypatch):
    monkeypatch.setenv("TRELLIS_TOKEN", "the-daemons-own-bearer")
    script = tmp_path / "subagent.py"
    script.write_text(SUBAGENT)
    log = tmp_path / "turns.log"
    template = (f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} --brief {{brief}} "
                f"--mcp-config {{config}} --log {shlex.quote(str(log))}")
    async with mcp_daemon(workspace=str(tmp_path)) as (daemon, base):
        daemon.subagents.config = SubagentConfig(command_template=template)
        async with mcp_session(f"{base}/mcp") as mcp:
            # Shell metacharacters in the brief reach the CLI as one word; no shell runs.
            await start(mcp, name="finder", brief="find the needle; touch pwned", goal="the needle is found",
                        runner="command")
            ended = await await_end(mcp, "finder", timeout=60)
            answer, text = await status(mcp, "finder")
    assert ended["outcome"] == "ended"
    assert answer["endReason"] == "goal_reached" and (answer["turn"], answer["maxTurns"]) == (2, 5)
    assert "self-reported" in text
    assert "not there yet" in answer["outputTail"] and "ack: Recorded goal_reached" in answer["outputTail"]
    assert not (tmp_path / "pwned").exists()
    turns = [__import__("json").loads(line) for line in log.read_text().splitlines()]
    assert turns[0]["brief"].startswith("find the needle; touch pwned")
    assert "turn 2 of 5" in turns[1]["brief"]  # the re-prompt is the later turn's {brief}
    assert turns[0]["config"] == turns[1]["config"]
    assert turns[0]["daemon_token"] is None  # the daemon's bearer token is withheld from subagents
    # The subagent named where it wrote: the done message was appended there, never anywhere inferred.
    report = (tmp_path / "sub-report.md").read_text()
    assert report.startswith("# report\nthe needle was in the haystack\n")
    assert "Turn 1 of 5 ended (exit code 3)" in report
    assert "goal_reached" in report and "self-reported" in report and "end reason: goal_reached" in report
    assert answer["reportFile"] == str(tmp_path / "sub-report.md")


async def test_stopping_a_command_run_ends_its_process_group(tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    pid_file = tmp_path / "grandchild.pid"
    mark = f"grandchild-{marker()}"
    template = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {shlex.quote(str(pid_file))} {mark}"
    async with mcp_daemon(workspace=str(tmp_path)) as (daemon, base):
        daemon.subagents.config = SubagentConfig(command_template=template)
        async with mcp_session(f"{base}/mcp") as mcp:
            await start(mcp, name="sleepy", brief="sleep", runner="command")
            with trio.fail_after(20):
                while not pid_file.exists() or not pid_file.read_text():
                    await trio.sleep(0.05)
            with trio.fail_after(5):
                while not pids_with(mark):
                    await trio.sleep(0.05)
            stopped = await mcp.call_tool("stop", {"name": "sleepy"})
            assert stopped.structured_content["endReason"] == "stopped"
            assert "turn 1 of 1" in text_of(stopped)
    with trio.fail_after(5):
        while pids_with(mark):
            await trio.sleep(0.05)


async def test_a_command_that_never_spawns_leaves_no_token_and_no_file(tmp_path):
    async with mcp_daemon(workspace=str(tmp_path)) as (daemon, base):
        daemon.subagents.config = SubagentConfig(command_template="/nonexistent/agent-cli -p {brief} {config}")
        async with mcp_session(f"{base}/mcp") as mcp:
            refused = await mcp.call_tool("start", {"name": "ghost", "brief": "boo", "runner": "command"})
            assert refused.is_error and "never reached a spawn" in text_of(refused)
            assert len(daemon.subagents.tokens) == 0
            assert not list(daemon.subagents._config_dir().glob("*.json"))
            missing = await mcp.call_tool("status", {"name": "ghost"})
            assert missing.is_error


async def test_a_command_runner_gets_the_variables_its_settings_name_and_no_other(tmp_path, monkeypatch):
    """A real agent CLI needs its API key (Claude Code: ANTHROPIC_API_KEY); the daemon's other secrets stay out."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-for-the-cli")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-not-for-the-cli")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-not-for-the-cli")
    dump = "import json, os, pathlib; pathlib.Path('env.json').write_text(json.dumps(dict(os.environ)))"
    template = f"{shlex.quote(sys.executable)} -c {shlex.quote(dump)} {{brief}} {{config}}"
    settings = Settings(subagents={"runners": {"command": {"template": template, "env": ["ANTHROPIC_API_KEY"]}}})
    async with mcp_daemon(workspace=str(tmp_path), settings=settings) as (daemon, base):
        async with mcp_session(f"{base}/mcp") as mcp:
            await start(mcp, name="cli", brief="look around", runner="command")
            ended = await await_end(mcp, "cli", timeout=60)
    assert ended["outcome"] == "ended"
    seen = __import__("json").loads((tmp_path / "env.json").read_text())
    assert seen["ANTHROPIC_API_KEY"] == "sk-ant-for-the-cli"
    assert "GITHUB_TOKEN" not in seen and "AWS_SECRET_ACCESS_KEY" not in seen
