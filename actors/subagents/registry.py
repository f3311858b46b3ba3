"""The daemon's subagent runs by name, their tokens, and where their config files live.

``start`` mints a token, writes the run's own MCP config file and starts the
run under the daemon's nursery; a start that never reaches a spawn revokes its
token and deletes its file before it answers. A run that ends does the same
before it reports the end. Runs stay readable (``status``) after they end.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import typing
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from .. import wire
from .._actor import ActorGone
from ..process import Sandbox
from ..checked import CheckError
from ..permission_rules import RuleLists
from ..settings import SettingsError
from ..settings_file import Runner, subagents_settings
from .client import call_signal_tool
from .files import check_named_report, make_private_dir, remove_quietly, write_mcp_config
from .run import RunSpec, Signal, SpawnFailed, Stop, SubagentRun
from .runners import CommandRunner, RunnerError, SessionRunner, command_env
from ..tools.paths import PathRefused, scope_for
from .tokens import TokenRegistry

log = logging.getLogger("trellis.subagents")

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_BRIEF = 100_000  # characters
MAX_GOAL = 20_000
DEFAULT_MAX_TURNS = 5
MAX_TURNS_LIMIT = 50
MAX_LIVE_RUNS = 64
# Live runs started through one session's ``agent`` tool, its subagents' own included: a share, so that one
# session's model cannot hold every one of the daemon's runs (and the child sessions they are) for good.
MAX_LIVE_RUNS_PER_SESSION = 16
FINISHED_KEPT = 256
RUNNERS: tuple[str, ...] = typing.get_args(Runner)
SIGNAL_TIMEOUT = 10.0
STOP_WAIT = 15.0  # how long ``stop`` waits for the run to settle before answering
START_FIELDS = {"name", "brief", "goal", "max_turns", "report_file", "cwd", "runner"}

# ``(url, tool, arguments) -> (is_error, text)``: how a child session's signal tool calls its signal URL.
SignalClient = Callable[[str, str, dict[str, Any]], Awaitable[tuple[bool, str]]]


class StartError(Exception):
    """``start`` was refused; nothing was spawned and no token stays live."""


class UnknownRun(LookupError):
    """No run has that name."""


@attrs.frozen(kw_only=True)
class SubagentConfig:
    """The ``subagents`` settings, as the registry uses them (as written: :class:`actors.settings_file.SubagentsSettings`).

    ``{"subagents": {"runners": {"command": {"template": "claude -p {brief} --mcp-config {config}"},
    "session": {"model": "...", "approvalMode": "auto-edit"}}, "defaultRunner": "session",
    "signalGraceSeconds": 60}}``
    """

    command_template: str | None = None
    session_model: str | None = None
    session_approval_mode: str | None = None  # for child sessions; None keeps the daemon's
    default_runner: str = "session"
    signal_grace_seconds: float = 60.0

    @classmethod
    def from_settings(cls, settings: Any) -> SubagentConfig:
        """Read ``settings.subagents`` (a dict as written, absent until the settings know the key); a
        :class:`SettingsError` naming the JSON path of a bad value."""
        try:
            given = subagents_settings(getattr(settings, "subagents", None))
        except CheckError as exc:
            raise SettingsError(exc.detail, path=exc.path) from None
        runners = given.runners
        return cls(command_template=runners.command.template, session_model=runners.session.model,
                   session_approval_mode=runners.session.approval_mode, default_runner=given.default_runner,
                   signal_grace_seconds=given.signal_grace_seconds)


class SubagentRegistry:
    """Runs by name for one daemon. Created by ``open_daemon`` as ``daemon.subagents``."""

    def __init__(self, daemon: Any, nursery: trio.Nursery, *, config: SubagentConfig | None = None) -> None:
        self.daemon = daemon
        self.config = config or SubagentConfig.from_settings(daemon.settings)
        self.tokens: TokenRegistry[SubagentRun] = TokenRegistry()
        # Where signal URLs point: the daemon's HTTP address, set by whoever serves it.
        self.base_url: str | None = None
        # How a session runner's signal tools call that URL: over HTTP. A replay, which serves no HTTP,
        # answers the calls in process through the same token resolution (actors/replay/subagents.py).
        self.signal_client: SignalClient = call_signal_tool
        self._nursery = nursery
        self._runs: dict[str, SubagentRun] = {}
        self._starting: dict[str, str | None] = {}  # name -> the session charged for it (see owner_of)
        self._dir: Path | None = None
        self._dir_is_temporary = False
        # Called with every run that ended (after its own listeners); the MCP routes forget its sessions.
        self.on_run_end: list[Callable[[SubagentRun], None]] = []
        daemon.runtime.services["subagents"] = self  # how a session's ``agent`` tool finds it

    # ------------------------------------------------------------- start

    def check(self, arguments: dict[str, Any], cwd: str | None = None, *, caller: str | None = None) -> RunSpec:
        """What ``start`` would run, without starting it: :class:`StartError` for arguments it would refuse
        (a runner that is not configured included, or a ``caller`` session at its share of live runs). The
        ``agent`` tool checks before it asks the user."""
        spec = self._spec(arguments, cwd)
        self._check_share(self.owner_of(caller))
        self._runner(spec.runner)
        return spec

    def owner_of(self, caller: str | None) -> str | None:
        """The session whose share of live runs a run started by session ``caller`` counts in: the session whose
        ``agent`` tool started the run ``caller`` is the child session of (transitively), else ``caller``
        itself. ``None`` for a parent over MCP, which has no share (the daemon-wide bound holds)."""
        if caller is None:
            return None
        for run in self._runs.values():
            if run.child_session_id == caller and not run.ended.is_set() and run.owner is not None:
                return run.owner
        return caller

    def _check_share(self, owner: str | None) -> None:
        if owner is None:
            return
        live = sum(r.owner == owner and not r.ended.is_set() for r in self._runs.values())
        live += sum(o == owner for o in self._starting.values())
        if live >= MAX_LIVE_RUNS_PER_SESSION:
            raise StartError(f"at most {MAX_LIVE_RUNS_PER_SESSION} live subagent runs per session (the runs its "
                             f"subagents start count too), and this session has {live}; stop one with kill_task "
                             f"or wait for one to end")

    async def start(self, arguments: dict[str, Any], *, cwd: str | None = None,
                    on_end: Callable[[SubagentRun], None] | None = None,
                    approve_report: Callable[[Path], Awaitable[str | None]] | None = None,
                    parent_mode: str | None = None, sandbox: Sandbox | None = None,
                    permissions: RuleLists | None = None, caller: str | None = None) -> SubagentRun:
        """Validate ``arguments`` (the ``start`` tool's), spawn the run, return it once it is running.

        ``cwd`` is the default working directory (the calling session's); ``on_end`` is called once
        the run has ended; ``approve_report`` asks the caller's user about a report file the subagent
        names (``None`` once allowed, else why not); ``parent_mode`` is the approval mode of the session
        that starts the run (its ``agent`` tool): a child session never runs in a more permissive one.
        ``sandbox``: that session's, so a command runner sees what it protects (its hooks' files)
        read-only, as the session's own commands do. ``permissions``: the rules a child session takes as its own
        (that session's, :meth:`~actors.session.authorizer.Authorizer.for_child`), so it is never laxer than the
        session that started it. ``caller``: that session's id; its live runs are bounded by
        :data:`MAX_LIVE_RUNS_PER_SESSION` (``None``, a parent over MCP: by :data:`MAX_LIVE_RUNS` alone).
        Raises :class:`StartError` when nothing was spawned.
        """
        spec = self._spec(arguments, cwd)
        if self.base_url is None:
            raise StartError("the daemon is not serving HTTP, so a subagent could not reach its signal URL")
        if spec.name in self._starting or (spec.name in self._runs and not self._runs[spec.name].ended.is_set()):
            raise StartError(f"a run named {spec.name!r} is underway")
        if sum(not r.ended.is_set() for r in self._runs.values()) + len(self._starting) >= MAX_LIVE_RUNS:
            raise StartError(f"at most {MAX_LIVE_RUNS} live subagent runs")
        owner = self.owner_of(caller)
        self._check_share(owner)
        runner = self._runner(spec.runner, parent_mode, sandbox, permissions)
        run = SubagentRun(spec, clock_ms=self.daemon.runtime.clock_ms, grace=self.config.signal_grace_seconds)
        run.owner = owner
        run.cleanup = self._cleanup
        run.refuse_report = functools.partial(self._refuse_named_report, spec.cwd)
        run.approve_report = approve_report
        run.start_soon = self._nursery.start_soon
        if on_end is not None:
            run.listeners.append(on_end)
        run.listeners.append(self._ended)
        self._starting[spec.name] = owner
        try:
            run.token = self.tokens.mint(run)
            url = f"{self.base_url.rstrip('/')}/signal/mcp/{run.token}"
            # Synchronous, like the transcript store: a few hundred bytes, and no thread hop, so a replay's
            # virtual clock cannot jump while the file is written.
            run.config_path = write_mcp_config(self._config_dir(), spec.name, url)
            result = await self._nursery.start(run.run, runner)
        except OSError as exc:
            self._cleanup(run)
            raise StartError(f"cannot write the run's MCP config file: {exc.strerror or exc}") from None
        except BaseException:
            self._cleanup(run)
            raise
        finally:
            self._starting.pop(spec.name, None)
        if isinstance(result, SpawnFailed):
            self._cleanup(run)
            raise StartError(f"the run never reached a spawn: {result.reason}")
        self._runs[spec.name] = run
        self._forget_old()
        return run

    def _spec(self, a: dict[str, Any], default_cwd: str | None) -> RunSpec:
        if not isinstance(a, dict):
            raise StartError("arguments must be an object")
        extra = set(a) - START_FIELDS
        if extra:
            raise StartError(f"unknown argument(s) {sorted(extra)}")
        name, brief, goal = a.get("name"), a.get("brief"), a.get("goal")
        if not isinstance(name, str) or not NAME.match(name):
            raise StartError("name must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
        if not isinstance(brief, str) or not brief.strip() or len(brief) > MAX_BRIEF:
            raise StartError(f"brief must be a non-empty string of at most {MAX_BRIEF} characters")
        if goal is not None and (not isinstance(goal, str) or not goal.strip() or len(goal) > MAX_GOAL):
            raise StartError(f"goal must be a non-empty string of at most {MAX_GOAL} characters")
        max_turns = a.get("max_turns", DEFAULT_MAX_TURNS)
        if type(max_turns) is not int or not 1 <= max_turns <= MAX_TURNS_LIMIT:
            raise StartError(f"max_turns must be an integer from 1 to {MAX_TURNS_LIMIT}")
        runner = a.get("runner", self.config.default_runner)
        if runner not in RUNNERS:
            raise StartError(f"runner must be one of {list(RUNNERS)}")
        cwd = a.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise StartError("cwd must be a string")
        base = default_cwd or self.daemon.runtime.workspace
        cwd = os.path.realpath(os.path.join(base, cwd) if cwd else base)  # symlinks resolved: it confines reports
        if not os.path.isdir(cwd):
            raise StartError(f"cwd {wire.shorten(cwd)} is not a directory")
        report = a.get("report_file")
        report_path = None
        if report is not None:
            if not isinstance(report, str) or not report.strip():
                raise StartError("report_file must be a non-empty string")
            try:
                real = scope_for(cwd, self.daemon.runtime).resolve_report(report)
            except PathRefused as exc:
                raise StartError(str(exc)) from None
            report_path = Path(real)
            try:
                usable = not report_path.is_dir() and report_path.parent.is_dir()
            except OSError as exc:  # e.g. a name too long for the file system
                raise StartError(f"report_file {wire.shorten(str(report_path))}: {exc.strerror}") from None
            if not usable:
                raise StartError(f"report_file {wire.shorten(str(report_path))} must be a file in an existing directory")
        # Without a goal a run is one turn, whatever max_turns says.
        return RunSpec(name, brief, goal, max_turns if goal is not None else 1, report_path, cwd, runner)

    def _refuse_named_report(self, cwd: str, named: str) -> str | None:
        """Why a report file a subagent names cannot be used: the report rule, then it must exist as a file."""
        try:
            real = scope_for(cwd, self.daemon.runtime).resolve_report(named)
        except PathRefused as exc:
            return str(exc)
        return check_named_report(Path(real), cwd)

    def _runner(self, kind: str, parent_mode: str | None = None, sandbox: Sandbox | None = None,
                permissions: RuleLists | None = None) -> Any:
        if kind == "session":
            return SessionRunner(self.daemon, self.config.session_model, self.config.session_approval_mode,
                                 signal_client=self.signal_client, parent_mode=parent_mode, permissions=permissions)
        template = self.config.command_template
        if not template:
            raise StartError("no command runner is configured (settings key subagents.runners.command.template)")
        try:
            # A real agent CLI needs its own API key: it gets the variables its settings name, and only those.
            return CommandRunner(template, sandbox or self.daemon.runtime.sandbox,
                                 env=command_env(self.daemon.settings.subagents),
                                 state_dir=self.daemon.runtime.state_dir)
        except RunnerError as exc:
            raise StartError(str(exc)) from None

    def _config_dir(self) -> Path:
        if self._dir is None:
            state_dir = self.daemon.runtime.state_dir
            self._dir, self._dir_is_temporary = make_private_dir(
                Path(state_dir) / "subagents" if state_dir is not None else None)
        return self._dir

    def _cleanup(self, run: SubagentRun) -> None:
        """Revoke the run's token and delete its config file (idempotent)."""
        if run.token is not None:
            self.tokens.revoke(run.token)
        remove_quietly(run.config_path)

    def _ended(self, run: SubagentRun) -> None:
        for listen in self.on_run_end:
            listen(run)

    def _forget_old(self) -> None:
        ended = [name for name, run in self._runs.items() if run.ended.is_set()]
        for name in ended[: max(0, len(ended) - FINISHED_KEPT)]:
            del self._runs[name]

    # ------------------------------------------------------------- the parent's questions

    def get(self, name: str) -> SubagentRun:
        try:
            return self._runs[name]
        except KeyError:
            raise UnknownRun(name) from None

    def status(self, name: str) -> dict[str, Any]:
        """The run's state, ``turn N of M``, last-event age and end reason."""
        return self.get(name).status()

    def list(self) -> list[dict[str, Any]]:
        return [run.status() for run in self._runs.values()]

    async def stop(self, name: str) -> dict[str, Any]:
        """Stop a live run (its turn is cancelled, its process group killed); answers once it settled."""
        return await self.stop_run(self.get(name))

    async def stop_run(self, run: SubagentRun) -> dict[str, Any]:
        """:meth:`stop` of this very run (a later run of the same name is another one)."""
        if not run.ended.is_set() and run.ref is not None:
            try:
                await run.ref.ask(Stop, timeout=SIGNAL_TIMEOUT)
            except (ActorGone, trio.TooSlowError):
                pass  # it is ending on its own
            with trio.move_on_after(STOP_WAIT):
                await run.ended.wait()
        return run.status()

    async def await_resume(self, name: str, timeout: float) -> dict[str, Any]:
        """Wait up to ``timeout`` s for the run to end or need help: ``{outcome, ...status}``."""
        run = self.get(name)
        outcome = await run.await_resume(timeout)
        return {"outcome": outcome, **run.status()}

    # ------------------------------------------------------------- the subagent's signals

    def resolve(self, token: str) -> SubagentRun | None:
        """The live run ``token`` was minted for; ``None`` for unminted and revoked tokens alike."""
        return self.tokens.resolve(token)

    async def signal(self, run: SubagentRun, kind: str, arguments: dict[str, Any]) -> tuple[bool, str] | None:
        """Deliver a signal to ``run``; ``None`` when the run has gone (answer as for a revoked token)."""
        if run.ref is None:
            return None
        try:
            return await run.ref.ask(lambda reply: Signal(kind, arguments, reply), timeout=SIGNAL_TIMEOUT)
        except (ActorGone, trio.TooSlowError):
            return None

    def close(self) -> None:
        """The daemon is gone: forget it, and remove a temporary config directory."""
        self.daemon.runtime.services.pop("subagents", None)
        for run in self._runs.values():
            self._cleanup(run)
        if self._dir is not None and self._dir_is_temporary:
            shutil.rmtree(self._dir, ignore_errors=True)


def registry_for(services: Any) -> SubagentRegistry | None:
    """The registry of the daemon a session (a tool's ``context.services``) belongs to."""
    runtime = getattr(services, "runtime", None)
    return runtime.services.get("subagents") if runtime is not None else None
