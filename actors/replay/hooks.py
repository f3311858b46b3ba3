"""Scripted hook commands: what each command of ``settings.hooks`` prints, in virtual time.

A real hook is a subprocess, and a subprocess runs in real time: under the
autojump clock, every task is blocked while it runs, so virtual time jumps to
the next deadline (the hook's own timeout, a drain deadline) before the process
answers, and which one wins depends on the machine. Replays therefore never
start hook processes. The scenario scripts each command's runs instead::

    "settings": {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "check"}]}]}},
    "hooks": {"check": [{"stdout": {"decision": "block", "reason": "tests are red"}}, {"exit": 0}]}

A run is ``{stdout?, stderr?, exit?, delay?}``: ``stdout`` a string or a JSON
value (printed as JSON), ``exit`` the exit code (default 0), ``delay`` virtual
seconds the command takes (a delay of at least the hook's timeout times out,
as a real one would). Runs are used in order; the last one repeats. Everything
after the process — exit-code and JSON semantics, matchers, the Stop-hook cap,
fail-open reporting — is the runtime's own code (``actors/session/hooks.py``);
only the start of the process is replaced, through the daemon's ``hook_runner``.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import trio

from ..settings import Settings
from . import fields as F
from . import jitter as J
from .trace import Trace

_RUN_FIELDS = {
    "stdout": F.Field(F.anything),
    "stderr": F.Field(F.string, default=""),
    "exit": F.Field(F.count, default=0),
    "delay": F.Field(J.seconds, default=0.0),
}


@attrs.frozen
class HookRun:
    stdout: str
    stderr: str
    exit: int
    delay: float | J.Window  # a window is resolved per seed (jitter.py)

    def to_trace(self) -> dict[str, Any]:
        return {"exit": self.exit, "stdout": self.stdout, **({"stderr": self.stderr} if self.stderr else {})}


def _run(value: Any, where: str, ctx: F.ParseContext) -> HookRun:
    spec = F.parse_fields(value, _RUN_FIELDS, where, ctx)
    stdout = spec["stdout"]
    if stdout is None:
        stdout = ""
    elif not isinstance(stdout, str):
        stdout = json.dumps(stdout, sort_keys=True)
    return HookRun(stdout, spec["stderr"], spec["exit"], spec["delay"])


def _runs(value: Any, where: str, ctx: F.ParseContext) -> tuple[HookRun, ...]:
    if not isinstance(value, list) or not value:
        raise ctx.fail(where, "a non-empty list of runs {stdout?, stderr?, exit?, delay?}", value)
    return tuple(_run(v, f"{where}[{i}]", ctx) for i, v in enumerate(value))


def configured_commands(settings: Settings) -> list[str]:
    """Every command ``settings.hooks`` declares, in order (each once)."""
    config = settings.hook_config
    out: list[str] = []
    for group in config.all_groups():
        for command in group.commands:
            if command.command not in out:
                out.append(command.command)
    return out


def parse_hook_scripts(value: Any, where: str, ctx: F.ParseContext,
                       settings: Settings) -> dict[str, tuple[HookRun, ...]]:
    """The ``hooks`` section: command -> runs; every configured command needs one, and only those."""
    commands = configured_commands(settings)
    if value is None:
        value = {}
    F.obj(value, where, ctx)
    for command in value:
        if command not in commands:
            raise ctx.fail(f"{where}.{command}", f"a command of settings.hooks (known: {commands})")
    missing = [c for c in commands if c not in value]
    if missing:
        raise ctx.fail(f"{where}.{missing[0]}", "the scripted runs of this settings.hooks command (replays never "
                                                "start hook processes; required field missing)")
    return {command: _runs(runs, f"{where}.{command}", ctx) for command, runs in value.items()}


class ScriptedHooks:
    """Plays the scripted runs of each command, recording every run in the trace."""

    def __init__(self, scripts: dict[str, tuple[HookRun, ...]], trace: Trace,
                 schedule: J.Schedule | None = None) -> None:
        self.scripts = scripts
        self.trace = trace
        self.schedule = schedule
        self.runs: dict[str, int] = {}

    async def run_one(self, hook: Any, stdin: bytes, cwd: str) -> tuple[int, str, str] | str:
        """The daemon's ``hook_runner`` in a replay: the arguments and answers of a real start."""
        runs = self.scripts[hook.command]
        n = self.runs.get(hook.command, 0)
        self.runs[hook.command] = n + 1
        run = runs[min(n, len(runs) - 1)]
        delay = self.schedule.resolve(run.delay) if self.schedule is not None else J.lowest(run.delay)
        try:
            event = json.loads(stdin).get("hook_event_name")
        except (ValueError, AttributeError):
            event = None
        if delay >= hook.timeout:
            await trio.sleep(hook.timeout)
            self.trace.hook(hook.command, event, n + 1, "timed out")
            return f"timed out after {hook.timeout:g} s"
        if delay:
            await trio.sleep(delay)
        else:
            await trio.lowlevel.checkpoint()
        self.trace.hook(hook.command, event, n + 1, run.to_trace())
        return run.exit, run.stdout, run.stderr
