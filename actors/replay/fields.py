"""Validating scenario fields: each problem names the file, the field and what was expected.

A field is declared as a :class:`Field` whose ``check`` takes ``(value, where,
ctx)`` and returns the value to use (or raises :class:`ScenarioError`). Actions
and invariants declare their parameters with these, so a new action or
invariant gets the same error messages for free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs


class ScenarioError(ValueError):
    """A scenario file that does not have the documented form."""

    def __init__(self, source: str, where: str, expected: str, got: Any = attrs.NOTHING) -> None:
        shown = "" if got is attrs.NOTHING else f", got {_show(got)}"
        super().__init__(f"{source}: {where}: expected {expected}{shown}")
        self.source = source
        self.where = where
        self.expected = expected


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@attrs.define
class ParseContext:
    """What parsing has seen so far: the file name and the labels defined earlier in the timeline."""

    source: str
    sessions: list[str] = attrs.field(factory=list)
    prompts: list[str] = attrs.field(factory=list)
    # Other label namespaces an action defines (``background`` tasks, ``client`` subscriptions, ...).
    names: dict[str, list[str]] = attrs.field(factory=dict)
    windows: list[Any] = attrs.field(factory=list)  # every jitter window parsed, in file order (jitter.py)
    # The timing of the timeline step being parsed — (earliest, latest, group) — and, per label, the
    # latest time and the group of the step that defines it: a step may not use a label that a step
    # racing with it (a window, or a member of the same group) may not have defined yet.
    step: tuple[float, float, int | None] | None = None
    defined: dict[tuple[str, str], tuple[float, int | None]] = attrs.field(factory=dict)

    def fail(self, where: str, expected: str, got: Any = attrs.NOTHING) -> ScenarioError:
        return ScenarioError(self.source, where, expected, got)

    def define(self, namespace: str, label: str) -> None:
        """The step being parsed defines ``label``."""
        if self.step is not None:
            self.defined[(namespace, label)] = (self.step[1], self.step[2])

    def check_defined_before(self, namespace: str, label: str, where: str, what: str) -> None:
        """``label`` is surely defined by the time the step being parsed runs."""
        when = self.defined.get((namespace, label))
        if self.step is None or when is None:
            return
        latest, group = when
        earliest, _, here = self.step
        if group is not None and group == here:
            raise self.fail(where, f"a {what} label defined before this group (its actions run in any order)", label)
        if latest > earliest:
            raise self.fail(where, f"a {what} label defined by a step that surely runs earlier (that step may run "
                                   f"as late as {latest:g}, this one as early as {earliest:g})", label)


Check = Callable[[Any, str, ParseContext], Any]


@attrs.frozen
class Field:
    check: Check
    required: bool = False
    default: Any = None
    # Resolves a default from the context (e.g. "the last session created"); used when absent.
    default_from: Callable[[ParseContext, str], Any] | None = None


def join(where: str, name: str) -> str:
    """The JSON path of field ``name`` of the object at ``where`` (``""`` is the top level)."""
    return f"{where}.{name}" if where else name


def parse_fields(raw: Any, fields: dict[str, Field], where: str, ctx: ParseContext,
                 *, reserved: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Check an object against declared fields; returns the parsed values (defaults filled in)."""
    if not isinstance(raw, dict):
        raise ctx.fail(where or "$", "an object", raw)
    unknown = sorted(set(raw) - set(fields) - reserved)
    if unknown:
        allowed = sorted(set(fields) | reserved)
        raise ctx.fail(join(where, unknown[0]), f"one of the fields {allowed} (unknown field)")
    out: dict[str, Any] = {}
    for name, field in fields.items():  # in declaration order: later fields may use labels earlier ones defined
        here = join(where, name)
        if name in raw:
            out[name] = field.check(raw[name], here, ctx)
        elif field.required:
            raise ctx.fail(here, "a value (required field missing)")
        elif field.default_from is not None:
            out[name] = field.default_from(ctx, here)
        else:
            out[name] = field.default
    return out


# ----------------------------------------------------------------- scalar checks


def string(value: Any, where: str, ctx: ParseContext) -> str:
    if not isinstance(value, str):
        raise ctx.fail(where, "a string", value)
    return value


def label_text(value: Any, where: str, ctx: ParseContext) -> str:
    if not isinstance(value, str) or not value or len(value) > 64:
        raise ctx.fail(where, "a non-empty label of at most 64 characters", value)
    return value


def boolean(value: Any, where: str, ctx: ParseContext) -> bool:
    if type(value) is not bool:
        raise ctx.fail(where, "true or false", value)
    return value


def number(value: Any, where: str, ctx: ParseContext) -> float:
    if type(value) not in (int, float) or value < 0:
        raise ctx.fail(where, "a non-negative number", value)
    return float(value)


def count(value: Any, where: str, ctx: ParseContext) -> int:
    if type(value) is not int or value < 0:
        raise ctx.fail(where, "a non-negative integer", value)
    return value


def obj(value: Any, where: str, ctx: ParseContext) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ctx.fail(where, "an object", value)
    return value


def anything(value: Any, where: str, ctx: ParseContext) -> Any:
    return value


def one_of(*choices: str) -> Check:
    def check(value: Any, where: str, ctx: ParseContext) -> str:
        if value not in choices:
            raise ctx.fail(where, f"one of {list(choices)}", value)
        return value
    return check


def list_of(item: Check) -> Check:
    def check(value: Any, where: str, ctx: ParseContext) -> list[Any]:
        if not isinstance(value, list):
            raise ctx.fail(where, "a list", value)
        return [item(v, f"{where}[{i}]", ctx) for i, v in enumerate(value)]
    return check


# ----------------------------------------------------------------- labels (checked against the timeline so far)


SUBAGENT = "subagent"  # the namespace of subagent run labels (a run's child session is traced under its label)


def new_session_label(value: Any, where: str, ctx: ParseContext) -> str:
    label = label_text(value, where, ctx)
    if label in ctx.sessions:
        raise ctx.fail(where, f"a session label not used before (known: {ctx.sessions})", value)
    if label in ctx.names.get(SUBAGENT, []):
        raise ctx.fail(where, "a session label that is not a subagent run's label", value)
    ctx.sessions.append(label)
    ctx.define("session", label)
    return label


def session_label(value: Any, where: str, ctx: ParseContext) -> str:
    label = label_text(value, where, ctx)
    if label not in ctx.sessions:
        raise ctx.fail(where, f"the label of a session created earlier in the timeline (known: {ctx.sessions})", value)
    ctx.check_defined_before("session", label, where, "session")
    return label


def event_session_label(value: Any, where: str, ctx: ParseContext) -> str:
    """Whose events: a session label, or a subagent run's label (its child session's events)."""
    label = label_text(value, where, ctx)
    known = ctx.sessions + ctx.names.get(SUBAGENT, [])
    if label not in known:
        raise ctx.fail(where, f"the label of a session or subagent run defined earlier in the timeline "
                              f"(known: {known})", value)
    return label


def last_session(ctx: ParseContext, where: str) -> str:
    if not ctx.sessions:
        raise ctx.fail(where, "a create_session action earlier in the timeline")
    ctx.check_defined_before("session", ctx.sessions[-1], where, "session")
    return ctx.sessions[-1]


def new_prompt_label(value: Any, where: str, ctx: ParseContext) -> str:
    label = label_text(value, where, ctx)
    if label in ctx.prompts:
        raise ctx.fail(where, f"a prompt label not used before (known: {ctx.prompts})", value)
    ctx.prompts.append(label)
    ctx.define("prompt", label)
    return label


def auto_prompt_label(ctx: ParseContext, where: str) -> str:
    label = f"prompt{len(ctx.prompts) + 1}"
    while label in ctx.prompts:
        label += "'"
    ctx.prompts.append(label)
    ctx.define("prompt", label)
    return label


def prompt_label(value: Any, where: str, ctx: ParseContext) -> str:
    label = label_text(value, where, ctx)
    if label not in ctx.prompts:
        raise ctx.fail(where, f"the label of a prompt given earlier in the timeline (known: {ctx.prompts})", value)
    ctx.check_defined_before("prompt", label, where, "prompt")
    return label


def new_label(namespace: str, what: str) -> Check:
    """A label of ``namespace`` defined here (not used before); ``what`` names it in errors."""
    def check(value: Any, where: str, ctx: ParseContext) -> str:
        label = label_text(value, where, ctx)
        known = ctx.names.setdefault(namespace, [])
        if label in known:
            raise ctx.fail(where, f"a {what} label not used before (known: {known})", value)
        known.append(label)
        ctx.define(namespace, label)
        return label
    return check


def label_of(namespace: str, what: str) -> Check:
    """A label of ``namespace`` defined earlier in the timeline."""
    def check(value: Any, where: str, ctx: ParseContext) -> str:
        label = label_text(value, where, ctx)
        known = ctx.names.get(namespace, [])
        if label not in known:
            raise ctx.fail(where, f"the label of a {what} defined earlier in the timeline (known: {known})", value)
        ctx.check_defined_before(namespace, label, where, what)
        return label
    return check


def string_list(value: Any, where: str, ctx: ParseContext) -> list[str]:
    return list_of(string)(value, where, ctx)


# Field shorthands used by the built-in actions.
SESSION = Field(session_label, default_from=last_session)
NEW_PROMPT = Field(new_prompt_label, default_from=auto_prompt_label)
