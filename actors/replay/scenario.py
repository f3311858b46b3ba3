"""Scenario files: reading, validating and the parsed :class:`Scenario`.

The format is documented in ``actors/replay/scenarios/README.md``. JSON (``.json``) or TOML
(``.toml``); top-level fields ``name``, ``description``, ``settings``,
``model``, ``timeline``, ``expect``, ``invariants`` and ``timeout``. Every
problem is a :class:`ScenarioError` naming the file, the field (a JSON path)
and what was expected.

Times may be windows (``{"between": [lo, hi]}``, :mod:`.jitter`): a scenario with
any, or with a ``together`` group of actions, is built on a race (:attr:`Scenario.races`).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import attrs

from ..model import ScriptedModel, ScriptError
from ..settings import APPROVAL_MODES, Limits, Settings
from . import fields as F
from . import jitter as J
from . import actions, cursors, discovered  # noqa: F401  (they register the timeline's actions on import)
from .expect import Expectations, parse_expectations
from .hooks import HookRun, parse_hook_scripts
from .invariants import InvariantUse, invariant_use
from .registry import ACTIONS

DEFAULT_TIMEOUT = 3600.0  # virtual seconds


@attrs.frozen
class Step:
    """One timeline action: at virtual time ``at`` (or in a window), run action ``do`` with ``args``.

    ``index`` numbers the actions in file order, a group's members one by one (traces name
    steps by it); ``where`` is its JSON path; members of one ``together`` group share ``group``.
    """

    index: int
    at: float | J.Window
    do: str
    args: dict[str, Any]
    expect: Any = attrs.NOTHING  # what the action's result must match, when given
    where: str = ""
    group: int | None = None  # the timeline position of its ``together`` group


@attrs.frozen
class ModelScript:
    responses: list[Any]  # a response's ``delay`` and ``sleep`` steps may hold windows
    then: str = "error"
    context_window: int | None = None


@attrs.frozen
class Scenario:
    name: str
    source: str  # the file it came from, as named (or "<scenario>")
    description: str
    settings: Settings
    model: ModelScript
    timeline: tuple[Step, ...]
    expect: Expectations
    invariants: tuple[InvariantUse, ...]
    timeout: float = DEFAULT_TIMEOUT
    path: Path | None = None
    hooks: dict[str, tuple[HookRun, ...]] = attrs.field(factory=dict)  # command -> scripted runs
    known_bug: str | None = None  # the scenario states the right behaviour; the runtime does not have it yet
    windows: tuple[J.Window, ...] = ()  # every time left open, in file order
    # Tool calls answered from a record instead of running (by tool call id): a recording turned scenario's.
    tool_results: dict[str, dict[str, Any]] = attrs.field(factory=dict)

    @property
    def races(self) -> bool:
        """Built on a race: some time is a window, or some actions share an instant in any order."""
        return bool(self.windows) or any(step.group is not None for step in self.timeline)

    def schedule(self, seed: int, overrides: dict[str, float] | None = None) -> J.Schedule:
        """The values ``seed`` picks for this scenario's windows (``overrides`` replace some)."""
        return J.Schedule(self.windows, seed, overrides)

    def build_model(self, schedule: J.Schedule | None = None) -> ScriptedModel:
        """A fresh scripted model (models keep a cursor, so each replay needs its own)."""
        model = ScriptedModel(demo_after=self.model.then == "demo", context_window=self.model.context_window)
        responses = schedule.resolve(self.model.responses) if schedule is not None else J.lowest(self.model.responses)
        model.extend(responses, where="model.responses")
        return model


# ----------------------------------------------------------------- settings


def _settings(value: Any, where: str, ctx: F.ParseContext) -> Settings:
    """Settings by their ``actors.Settings`` field names; ``limits`` by ``actors.Limits`` field names."""
    F.obj(value, where, ctx)
    known = {a.name: a for a in attrs.fields(Settings) if a.name != "warnings"}
    values: dict[str, Any] = {}
    for key, raw in value.items():
        here = f"{where}.{key}"
        if key not in known:
            raise ctx.fail(here, f"one of the settings {sorted(known)} (unknown setting)")
        if key == "limits":
            F.obj(raw, here, ctx)
            limit_names = [a.name for a in attrs.fields(Limits)]
            for name, n in raw.items():
                if name not in limit_names:
                    raise ctx.fail(f"{here}.{name}", f"one of the limits {limit_names} (unknown limit)")
                if type(n) is not int or n < 1:
                    raise ctx.fail(f"{here}.{name}", "a positive integer", n)
            values["limits"] = Limits(**raw)
            continue
        default = known[key].default
        kind = type(default.factory() if isinstance(default, attrs.Factory) else default)  # type: ignore[attr-defined]
        if default is None:
            kind = str  # the optional settings are texts (system_prompt, append_system_prompt)
        if type(raw) is not kind:
            raise ctx.fail(here, f"a {'JSON ' + ('object' if kind is dict else kind.__name__)}", raw)
        if key == "approval_mode" and raw not in APPROVAL_MODES:
            raise ctx.fail(here, f"one of {list(APPROVAL_MODES)}", raw)
        values[key] = raw
    settings = Settings(**values)
    try:
        settings.hook_config  # noqa: B018 (parses settings.hooks)
    except ValueError as exc:
        raise ctx.fail(f"{where}.hooks", f"hooks in the documented form ({exc})") from None
    return settings


# ----------------------------------------------------------------- model


def _model(value: Any, where: str, ctx: F.ParseContext) -> ModelScript:
    responses_at = f"{where}.responses"
    if isinstance(value, list):  # the short form: just the responses
        value, responses_at = {"responses": value}, where
    spec = F.parse_fields(value, {
        "responses": F.Field(F.list_of(F.anything), required=True),
        "then": F.Field(F.one_of("error", "demo"), default="error"),
        "context_window": F.Field(F.count),
    }, where, ctx)
    responses = [_response_windows(r, f"{responses_at}[{i}]", ctx) for i, r in enumerate(spec["responses"])]
    script = ModelScript(responses, spec["then"], spec["context_window"])
    try:  # the scripted model's own parser checks each response; re-point its message at this file
        ScriptedModel(demo_after=False).extend(J.lowest(script.responses), where=responses_at)
    except ScriptError as exc:
        field, _, expected = str(exc).partition(": expected ")
        raise F.ScenarioError(ctx.source, field, expected or str(exc)) from None
    return script


def _response_windows(raw: Any, where: str, ctx: F.ParseContext) -> Any:
    """A response with its ``delay`` and ``sleep`` windows parsed (the rest is checked by the model's parser)."""
    if isinstance(raw, dict) and isinstance(raw.get("delay"), dict):
        raw = {**raw, "delay": J.seconds(raw["delay"], f"{where}.delay", ctx)}
    steps = raw if isinstance(raw, list) else raw.get("steps") if isinstance(raw, dict) else None
    if not isinstance(steps, list):
        return raw
    parsed = [{"sleep": J.seconds(step["sleep"], f"{where}.steps[{j}].sleep", ctx)}
              if isinstance(step, dict) and set(step) == {"sleep"} and isinstance(step["sleep"], dict) else step
              for j, step in enumerate(steps)]
    return parsed if isinstance(raw, list) else {**raw, "steps": parsed}


# ----------------------------------------------------------------- timeline


_STEP_RESERVED = frozenset({"at", "do", "expect"})
_MEMBER_RESERVED = frozenset({"do", "expect"})


def _action(raw: Any, here: str, ctx: F.ParseContext, reserved: frozenset[str]) -> tuple[str, dict[str, Any]]:
    do = raw.get("do")
    if do not in ACTIONS:
        raise ctx.fail(f"{here}.do", f"one of the actions {sorted(ACTIONS)}", do)
    return do, F.parse_fields(raw, ACTIONS[do].fields, here, ctx, reserved=reserved)


def _timeline(value: Any, where: str, ctx: F.ParseContext) -> tuple[Step, ...]:
    """The steps, flattened: a ``together`` group contributes one :class:`Step` per member."""
    if not isinstance(value, list) or not value:
        raise ctx.fail(where, "a non-empty list of steps {at, do, ...}", value)
    steps: list[Step] = []
    last_at = 0.0
    for i, raw in enumerate(value):
        here = f"{where}[{i}]"
        if not isinstance(raw, dict):
            raise ctx.fail(here, "a step object {at, do, ...}", raw)
        if "at" not in raw:
            raise ctx.fail(f"{here}.at", "a virtual time in seconds (required field missing)")
        at = J.seconds(raw["at"], f"{here}.at", ctx)
        if J.earliest(at) < last_at:
            raise ctx.fail(f"{here}.at", f"a time not before the previous step's ({last_at:g})", raw["at"])
        last_at = J.earliest(at)
        if "together" in raw:
            steps += _group(raw, here, i, at, len(steps), ctx)
            continue
        ctx.step = (J.earliest(at), J.latest(at), None)
        do, args = _action(raw, here, ctx, _STEP_RESERVED)
        ctx.step = None
        steps.append(Step(len(steps), at, do, args, raw.get("expect", attrs.NOTHING), here))
    return tuple(steps)


def _group(raw: dict[str, Any], here: str, position: int, at: float | J.Window, first: int,
           ctx: F.ParseContext) -> list[Step]:
    """``{at, together: [{do, ...}, ...]}``: actions started at one instant, each in its own task."""
    extra = sorted(set(raw) - {"at", "together"})
    if extra:
        raise ctx.fail(f"{here}.{extra[0]}", "only at and together in a group step (each member has its own do)")
    members = raw["together"]
    if not isinstance(members, list) or len(members) < 2:
        raise ctx.fail(f"{here}.together", "a list of at least two actions {do, ...}", members)
    out = []
    for j, member in enumerate(members):
        there = f"{here}.together[{j}]"
        if not isinstance(member, dict):
            raise ctx.fail(there, "an action object {do, ...}", member)
        ctx.step = (J.earliest(at), J.latest(at), position)
        do, args = _action(member, there, ctx, _MEMBER_RESERVED)
        ctx.step = None
        out.append(Step(first + j, at, do, args, member.get("expect", attrs.NOTHING), there, position))
    return out


# ----------------------------------------------------------------- recorded tool results


def _tool_results(value: Any, where: str, ctx: F.ParseContext) -> dict[str, dict[str, Any]]:
    """``{toolCallId: {result: {content, display?, error?, locations?, acpContent?}, duration?, asks?, updates?,
    background?}}`` (:class:`~.recorded_tools.AnsweringRegistry`)."""
    F.obj(value, where, ctx)
    out: dict[str, dict[str, Any]] = {}
    for call_id, raw in value.items():
        here = f"{where}.{call_id}"
        F.obj(raw, here, ctx)
        extra = sorted(set(raw) - {"name", "result", "duration", "asks", "updates", "background"})
        if extra:
            raise ctx.fail(f"{here}.{extra[0]}", "only name, result, duration, asks, updates and background")
        result = raw.get("result")
        if not isinstance(result, dict) or not isinstance(result.get("content"), str):
            raise ctx.fail(f"{here}.result", "an object {content, display?, error?, locations?, acpContent?}", result)
        duration = raw.get("duration", 0)
        if type(duration) not in (int, float) or duration < 0:
            raise ctx.fail(f"{here}.duration", "a non-negative number of seconds", duration)
        for key in ("asks", "updates", "background"):
            if not isinstance(raw.get(key, []), list):
                raise ctx.fail(f"{here}.{key}", "a list", raw.get(key))
        out[call_id] = raw
    return out


# ----------------------------------------------------------------- the file


def parse_scenario(data: Any, source: str = "<scenario>", path: Path | None = None) -> Scenario:
    """Validate parsed scenario data; raises :class:`ScenarioError` naming ``source`` and the field."""
    ctx = F.ParseContext(source)
    top = {
        "name": F.Field(F.label_text, required=True),
        "description": F.Field(F.string, default=""),
        "settings": F.Field(_settings, default=Settings()),
        "model": F.Field(_model, required=True),
        "timeline": F.Field(_timeline, required=True),
        # after the timeline (fields are parsed in this order), so these can name its labels
        "expect": F.Field(parse_expectations, default=Expectations()),
        "invariants": F.Field(F.list_of(invariant_use), default=[]),
        "timeout": F.Field(F.number, default=DEFAULT_TIMEOUT),
        "hooks": F.Field(F.anything),  # checked below, against settings.hooks
        "known_bug": F.Field(F.string),
        "tool_results": F.Field(_tool_results, default={}),
    }
    parsed = F.parse_fields(data, top, "", ctx)
    parsed["invariants"] = tuple(parsed["invariants"])
    parsed["hooks"] = parse_hook_scripts(parsed["hooks"], "hooks", ctx, parsed["settings"])
    return Scenario(source=source, path=path, windows=tuple(ctx.windows), **parsed)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file (``.json`` or ``.toml``)."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_bytes().decode()
    except OSError as exc:
        raise F.ScenarioError(source, "$", f"a readable file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise F.ScenarioError(source, "$", f"UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except json.JSONDecodeError as exc:
        raise F.ScenarioError(source, f"line {exc.lineno} column {exc.colno}", f"valid JSON ({exc.msg})") from None
    except tomllib.TOMLDecodeError as exc:
        raise F.ScenarioError(source, "$", f"valid TOML ({exc})") from None
    return parse_scenario(data, source, path)
