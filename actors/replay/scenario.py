"""Scenario files: reading, validating and the parsed :class:`Scenario`.

The format is documented in ``scenarios/README.md``. JSON (``.json``) or TOML
(``.toml``); top-level fields ``name``, ``description``, ``settings``,
``model``, ``timeline``, ``expect``, ``invariants`` and ``timeout``. Every
problem is a :class:`ScenarioError` naming the file, the field (a JSON path)
and what was expected.
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
from .actions import ACTIONS
from .expect import Expectations, parse_expectations
from .hooks import HookRun, parse_hook_scripts
from .invariants import InvariantUse, invariant_use

DEFAULT_TIMEOUT = 3600.0  # virtual seconds


@attrs.frozen
class Step:
    """One timeline entry: at virtual time ``at``, run action ``do`` with ``args``."""

    index: int
    at: float
    do: str
    args: dict[str, Any]
    expect: Any = attrs.NOTHING  # what the action's result must match, when given


@attrs.frozen
class ModelScript:
    responses: list[Any]
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

    def build_model(self) -> ScriptedModel:
        """A fresh scripted model (models keep a cursor, so each replay needs its own)."""
        model = ScriptedModel(demo_after=self.model.then == "demo", context_window=self.model.context_window)
        model.extend(self.model.responses, where="model.responses")
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
    script = ModelScript(spec["responses"], spec["then"], spec["context_window"])
    try:  # the scripted model's own parser checks each response; re-point its message at this file
        ScriptedModel(demo_after=False).extend(script.responses, where=responses_at)
    except ScriptError as exc:
        field, _, expected = str(exc).partition(": expected ")
        raise F.ScenarioError(ctx.source, field, expected or str(exc)) from None
    return script


# ----------------------------------------------------------------- timeline


_STEP_RESERVED = frozenset({"at", "do", "expect"})


def _timeline(value: Any, where: str, ctx: F.ParseContext) -> tuple[Step, ...]:
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
        at = F.number(raw["at"], f"{here}.at", ctx)
        if at < last_at:
            raise ctx.fail(f"{here}.at", f"a time not before the previous step's ({last_at:g})", raw["at"])
        last_at = at
        do = raw.get("do")
        if do not in ACTIONS:
            raise ctx.fail(f"{here}.do", f"one of the actions {sorted(ACTIONS)}", do)
        args = F.parse_fields(raw, ACTIONS[do].fields, here, ctx, reserved=_STEP_RESERVED)
        steps.append(Step(i, at, do, args, raw.get("expect", attrs.NOTHING)))
    return tuple(steps)


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
    }
    parsed = F.parse_fields(data, top, "", ctx)
    parsed["invariants"] = tuple(parsed["invariants"])
    parsed["hooks"] = parse_hook_scripts(parsed["hooks"], "hooks", ctx, parsed["settings"])
    return Scenario(source=source, path=path, **parsed)


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
