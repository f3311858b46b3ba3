"""A tool call's arguments, checked against the tool's declared JSON Schema before it runs.

Rules:

* A built-in tool's ``parameters`` (what the model is shown) is the whole contract for the
  shape of its arguments: types, required and unknown members, bounds, enums. The registry
  checks each call against it (JSON Schema Draft 2020-12, by ``jsonschema``); a call that
  misses it never reaches ``execute``, and its result is a failure for the model to read and
  correct. What a schema cannot say (a path outside the cwd, a file that does not exist, two
  members that exclude each other) stays the tool's to check.
* Every problem names where it is, as a path from ``arguments``, and what was wrong, quoting
  (a short form of) what was given: ``arguments.offset: expected integer, got "3"``,
  ``arguments.edits[1].old_string: required``.
* JSON has no NaN or infinities, but Python's ``json`` reads them: a number that is not
  finite is refused wherever it is (NaN would pass every bound, failing every comparison).
* ``integer`` is JSON Schema's: ``3.0`` is one (some models write it); a tool takes
  ``int(value)``.
* A non-blank string is ``{"type": "string", "pattern": NOT_BLANK}`` (the problem says
  "not blank" rather than quoting the pattern).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

from jsonschema import Draft202012Validator, ValidationError

NOT_BLANK = r"\S"  # a string pattern: some character that is not whitespace (``str.strip()`` leaves some)
MAX_SHOWN = 60  # characters of a given value quoted back in a problem
MAX_PROBLEMS = 10  # named in one failure; the rest are counted

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_SHARED = 256  # schemas whose checks are kept for sharing (the built-ins' are a few dozen)
_SHARED: dict[int, ArgumentCheck] = {}


class ArgumentCheck:
    """One tool's declared ``parameters``, ready to check calls against (built once, at registration).

    The schema itself is not checked here (that is a test's job for the built-ins: checking a
    schema against the metaschema costs milliseconds, and every session builds its registry).
    """

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self._validator = Draft202012Validator(schema)

    @classmethod
    def of(cls, schema: dict[str, Any]) -> ArgumentCheck:
        """The check of ``schema``, shared by every registry holding that schema object: a built-in's
        ``parameters`` is one dict for all sessions, and a validator costs kilobytes in each of them.
        (The check holds the schema, so its id is not reused while it is cached.)"""
        key = id(schema)
        check = _SHARED.get(key)
        if check is None or check.schema is not schema:
            check = _SHARED[key] = cls(schema)
            while len(_SHARED) > MAX_SHARED:
                _SHARED.pop(next(iter(_SHARED)))
        return check

    def problems(self, arguments: Any, root: str = "arguments") -> list[str]:
        """Every way ``arguments`` miss the schema, each naming its path from ``root``; empty when they match."""
        found: dict[str, None] = {}  # in order, once each
        for path, value in _non_finite(arguments, ()):
            found[f"{where(path, root)}: expected a finite number, got {shown(value)}"] = None
        for error in self._validator.iter_errors(arguments):
            for problem in _explain(error, root):
                found[problem] = None
        return list(found)

    def failure_message(self, tool_name: str, arguments: Any) -> str | None:
        """``<tool>: <problem>; <problem>...`` for arguments that miss the schema, else None."""
        problems = self.problems(arguments)
        if not problems:
            return None
        named = problems[:MAX_PROBLEMS]
        more = len(problems) - len(named)
        return f"{tool_name}: " + "; ".join(named) + (f"; and {more} more" if more else "")


def where(path: Iterable[str | int], root: str = "arguments") -> str:
    """``arguments.todos[1].id``: a path into the arguments, as the model would write it."""
    out = root
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _NAME.fullmatch(part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out


def shown(value: Any) -> str:
    """``value`` as JSON, cut to :data:`MAX_SHOWN` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):  # a circular structure, say: not from JSON anyway
        text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 1] + "…"


def _json(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a bound of 600.0 reads as 600
    return json.dumps(value, ensure_ascii=False, default=repr)


def _non_finite(value: Any, path: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], float]]:
    if isinstance(value, float):
        if not math.isfinite(value):
            yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _non_finite(item, (*path, index))


def _explain(error: ValidationError, root: str) -> list[str]:
    path = list(error.absolute_path)
    keyword, wanted, value = error.validator, error.validator_value, error.instance
    if keyword == "required" and isinstance(value, dict):
        return [f"{where([*path, name], root)}: required" for name in wanted if name not in value]
    if keyword == "additionalProperties" and isinstance(value, dict) and isinstance(error.schema, dict):
        known = list(error.schema.get("properties", {}))
        patterns = list(error.schema.get("patternProperties", {}))
        extra = [k for k in value if k not in known and not any(re.search(p, k) for p in patterns)]
        names = ", ".join(_json(k) for k in extra)
        expected = f"expected only {', '.join(known)}" if known else "it takes none"
        return [f"{where(path, root)}: unexpected propert{'y' if len(extra) == 1 else 'ies'} {names} ({expected})"]
    return [f"{where(path, root)}: {_what(keyword, wanted, value, error)}"]


def _what(keyword: Any, wanted: Any, value: Any, error: ValidationError) -> str:
    got = f"got {shown(value)}"
    if keyword == "type":
        return f"expected {' or '.join(wanted) if isinstance(wanted, list) else wanted}, {got}"
    if keyword == "enum":
        return f"expected one of {', '.join(_json(v) for v in wanted)}, {got}"
    if keyword == "const":
        return f"expected {_json(wanted)}, {got}"
    if keyword == "minimum":
        return f"expected at least {_json(wanted)}, {got}"
    if keyword == "maximum":
        return f"expected at most {_json(wanted)}, {got}"
    if keyword == "exclusiveMinimum":
        return f"expected more than {_json(wanted)}, {got}"
    if keyword == "exclusiveMaximum":
        return f"expected less than {_json(wanted)}, {got}"
    if keyword == "minLength":
        return f"expected a non-empty string, {got}" if wanted == 1 else \
            f"expected at least {wanted:,} characters, got {len(value):,}"
    if keyword == "maxLength":
        return f"expected at most {wanted:,} characters, got {len(value):,}"
    if keyword == "pattern":
        return f"expected a string that is not blank, {got}" if wanted == NOT_BLANK else \
            f"expected a string matching the regular expression {wanted}, {got}"
    if keyword == "minItems":
        return f"expected at least {wanted:,} items, got {len(value):,}"
    if keyword == "maxItems":
        return f"expected at most {wanted:,} items, got {len(value):,}"
    message = error.message  # a keyword no built-in uses yet: jsonschema's own words, bounded
    return message if len(message) <= 200 else message[:199] + "…"


__all__ = ["MAX_PROBLEMS", "MAX_SHOWN", "NOT_BLANK", "ArgumentCheck", "shown", "where"]
