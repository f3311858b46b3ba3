"""Runners: how a subagent's turn is run.

``session`` — a child session of this daemon on the configured model, its
system prompt the daemon's with the run's brief on top. It gets
two MCP-client tools, ``goal_reached`` and ``need_help``, which read the
signal URL from the run's own MCP config file and call it over HTTP; a turn is
one prompt, and it ends with the child's ``turn_complete`` / ``turn_error``.

``command`` — an external CLI from ``subagents.runners.command.template``,
split into words as a shell would (no shell runs), with ``{brief}`` and
``{config}`` substituted inside each word. One process per turn, in its own
process group; the turn ends when it exits; output is captured, bounded.
Its environment is a model-run command's (the allowlist and ``sandbox.env``)
plus ``subagents.runners.command.env`` — the variables a real agent CLI needs
(``ANTHROPIC_API_KEY`` for Claude Code), and only those.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..background.shell import OutputBuffer, ShellProcess
from ..permission_rules import RuleLists
from ..process import NO_SANDBOX, Sandbox
from ..process.sandbox import EnvAdditions, env_additions, make_home, remove_home
from ..session.fifo import Admitted
from ..settings_file import subagents_settings
from . import texts
from .signal_tools import signal_client_tools

if TYPE_CHECKING:
    from .run import SubagentRun

OUTPUT_LIMIT = 256 * 1024  # bytes (UTF-8) of a command's output kept per run
OUTPUT_TAIL = 4000  # characters of it shown in status
MAX_WAITING_VOTES_SHOWN = 8  # a child's pending permission requests its run's status names
TITLE_SHOWN = 200  # characters of each one's title (it may be a whole shell command)
_PLACEHOLDER = re.compile(r"\{(brief|config)\}")


class RunnerError(Exception):
    """A runner that cannot run as configured."""


# ----------------------------------------------------------------- session


# Approval modes from the strictest: ``plan`` refuses, ``default`` asks, ``auto-edit`` asks but for file edits
# and web fetches, ``yolo`` does not.
STRICTNESS = ("plan", "default", "auto-edit", "yolo")


def stricter(*modes: str | None) -> str | None:
    """The strictest of ``modes``, ``None`` ignored (``None`` when none is given); a mode this order does not
    know counts as ``plan``, so a mode added later is never taken for a permissive one."""
    given = [m if m in STRICTNESS else "plan" for m in modes if m is not None]
    return min(given, key=STRICTNESS.index) if given else None


class SessionRunner:
    """A child session of the daemon per run."""

    name = "session"

    def __init__(self, daemon: Any, model: str | None = None, approval_mode: str | None = None, *,
                 signal_client: Any = None, parent_mode: str | None = None,
                 permissions: RuleLists | None = None) -> None:
        self._daemon = daemon
        self._signal_client = signal_client  # None: over HTTP (``call_signal_tool``)
        self._model = model
        # Nobody answers a child's permission requests but the parent polling status, so a
        # deployment usually sets a mode here (the daemon's own is kept when it does not).
        self._approval_mode = approval_mode
        # The mode of the session whose ``agent`` tool started the run, when it started it: the child
        # takes the stricter of it and its own, so a session in ``plan`` or ``default`` cannot get
        # through a child what it may not do itself (None: no parent session, e.g. the MCP ``start``).
        self._parent_mode = parent_mode
        # That session's rules, which the child takes as its own (its deny and ask rules bind the child, and
        # what the user allowed there is allowed here): a mode alone would let the child run what the parent
        # was refused by a rule or an "always reject".
        self._permissions = permissions or None

    @asynccontextmanager
    async def open(self, run: SubagentRun) -> AsyncIterator[SessionTurns]:
        # The child's system prompt is the daemon's, with the run's brief on top of it: every request of
        # the run carries the brief, also after compaction has summarised the first turn away.
        handle, _ = await self._daemon.create_session(
            run.spec.cwd, append_system_prompt=texts.subagent_system_prompt(run.spec.brief, run.spec.goal),
            permissions=self._permissions)
        run.child_session_id = handle.session_id  # the runs its own agent tool starts count in run.owner's share
        try:
            assert run.config_path is not None
            await handle.add_tools(*signal_client_tools(run.config_path, call=self._signal_client))
            # No Todo Stop Guard in a child (as qwen's subagents have none): the run's goal loop is its
            # continuation, and a guard would add up to two streams to every turn. Its todo lists are its
            # own: they never reach the parent's guard, which only observes the parent's own tool results.
            await handle.turn_off_todo_stop_guard()
            if self._model:
                await handle.set_model(self._model)
            if self._approval_mode or self._parent_mode:
                own = self._approval_mode or self._daemon.settings.approval_mode
                await handle.set_approval_mode(stricter(own, self._parent_mode) or own)
            yield SessionTurns(handle, run)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                try:
                    await self._daemon.close_session(handle.session_id)
                except LookupError:
                    pass  # already gone


class SessionTurns:
    def __init__(self, handle: Any, run: SubagentRun) -> None:
        self.handle = handle
        self.run = run

    async def turn(self, text: str, spawned: Callable[[], None]) -> str:
        admitted = await self.handle.prompt(text)
        if not isinstance(admitted, Admitted):
            raise RunnerError("the child session refused the prompt (its queue is full)")
        spawned()
        try:
            return await self._until_turn_ends(admitted)
        except trio.Cancelled:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                try:
                    await self.handle.abort_prompt(admitted.prompt_id)
                except Exception:
                    pass  # the session is closing anyway
            raise
        finally:
            self.run.waiting_votes.clear()  # a turn's requests end with it

    async def _until_turn_ends(self, admitted: Admitted) -> str:
        cursor = admitted.last_event_id
        while True:
            async with self.handle.subscribe(last_event_id=cursor) as events:
                async for event in events:
                    if event.id is not None:
                        cursor = event.id
                    self.run.touch()
                    data = event.data
                    if event.type in ("permission_request", "permission_resolved"):
                        self._note_vote(event.type, data)
                    if event.type == "turn_complete" and data.get("promptId") == admitted.prompt_id:
                        return f"stop reason {data.get('stopReason')}"
                    if event.type == "turn_error" and data.get("promptId") == admitted.prompt_id:
                        return f"turn error {data.get('code')}: {data.get('message')}"
                    if event.type == "session_closed":
                        raise RunnerError(f"the child session closed ({data.get('reason')})")
            # The stream ended without either (a slow reader evicted): pick up where it stopped.

    def _note_vote(self, kind: str, data: dict[str, Any]) -> None:
        waiting = self.run.waiting_votes
        request_id = data.get("requestId")
        if not isinstance(request_id, str):
            return
        if kind == "permission_resolved":
            waiting.pop(request_id, None)
        elif len(waiting) < MAX_WAITING_VOTES_SHOWN:
            title = (data.get("toolCall") or {}).get("title")
            waiting[request_id] = title[:TITLE_SHOWN] if isinstance(title, str) else "a tool call"


# ----------------------------------------------------------------- command


def build_argv(template: str, *, brief: str, config: str) -> list[str]:
    """Split ``template`` as a shell would, then substitute placeholders inside each word, in one pass.

    One pass, so a brief that itself contains ``{config}`` is passed on as written.
    """
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise RunnerError(f"subagents.runners.command.template: {exc}") from None
    if not words:
        raise RunnerError("subagents.runners.command.template is empty")
    values = {"brief": brief, "config": config}
    return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], word) for word in words]


class ArgvProcess(ShellProcess):
    """A :class:`ShellProcess` started from an argument vector: no shell between us and the CLI.

    It runs in the daemon's sandbox with its own MCP config file exposed, and
    nothing else of the state directory: a subagent holds its signal URL and
    no other credential (no daemon token, no sibling's URL).
    """

    def __init__(self, argv: list[str], cwd: str, output: OutputBuffer,
                 on_output: Callable[[str], None] = lambda _: None, *,
                 sandbox: Sandbox = NO_SANDBOX, expose: tuple[str, ...] = ()) -> None:
        super().__init__(shlex.join(argv), cwd, output, on_output, sandbox=sandbox, expose=expose)
        self._argv = argv

    def argv(self) -> list[str]:
        return list(self._argv)


def command_env(subagents: Any) -> EnvAdditions:
    """``subagents.runners.command.env`` of the ``subagents`` settings (``()`` when absent).

    The same form as ``sandbox.env``: a list of names passed through from the
    daemon's environment, or an object of name -> value. A ``ValueError`` naming
    the JSON path (a name the daemon withholds included).
    """
    env = subagents_settings(subagents).runners.command.env
    return () if env is None else env_additions(env)


class CommandRunner:
    """An external CLI per turn; ``env``: what it gets on top of a model-run command's environment."""

    name = "command"

    def __init__(self, template: str, sandbox: Sandbox = NO_SANDBOX, env: EnvAdditions = (), *,
                 state_dir: Any = None) -> None:
        build_argv(template, brief="", config="")  # refuse a broken template at start, not at the first turn
        self.template = template
        # Its own variables ride on the sandbox, which hands a command its environment (Sandbox.environment).
        # It keeps the network whatever sandbox.network says: an agent CLI must reach its model's API and
        # its run's signal URL, or it can do nothing at all.
        self.sandbox = attrs.evolve(sandbox, env=(*sandbox.env, *env), network=True)
        self.state_dir = state_dir  # where the run's own home is made (None: the temporary directory)

    @asynccontextmanager
    async def open(self, run: SubagentRun) -> AsyncIterator[CommandTurns]:
        if not self.sandbox.active:
            yield CommandTurns(self.template, run, self.sandbox)
            return
        # A home of the run's own, for its turns (claude's ~/.claude, qwen's ~/.qwen, npm's cache), never
        # the user's nor a sibling run's; deleted when the run ends. Dotted: never a session's (homes/<session-id>:
        # a session id has no dot).
        home = make_home(self.state_dir, f"subagent.{run.name}.{run.scope_key}")
        try:
            yield CommandTurns(self.template, run, self.sandbox.with_home(home))
        finally:
            remove_home(home)


class CommandTurns:
    def __init__(self, template: str, run: SubagentRun, sandbox: Sandbox = NO_SANDBOX) -> None:
        self.template = template
        self.run = run
        self.sandbox = sandbox
        self.output = OutputBuffer(OUTPUT_LIMIT)

    def _on_output(self, text: str) -> None:
        self.run.touch()
        self.run.output_tail = self.output.tail(OUTPUT_TAIL)

    async def turn(self, text: str, spawned: Callable[[], None]) -> str:
        assert self.run.config_path is not None
        argv = build_argv(self.template, brief=text, config=str(self.run.config_path))
        process = ArgvProcess(argv, self.run.spec.cwd, self.output, self._on_output, sandbox=self.sandbox,
                              expose=(str(self.run.config_path),))
        await process.start()  # OSError here, on turn 1, means the start never reached a spawn
        spawned()
        try:
            code = await process.run()
        finally:
            await process.kill_and_reap()  # the whole group, also when the run is stopped mid-turn
        return f"exit code {code}"
