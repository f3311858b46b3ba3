"""Checked input: JSON documents (the settings file and the configs inside it) read into attrs classes.

One cattrs converter structures every such class. Keys are the camelCase of the field names unless a
field names its own (:func:`field`'s ``key``); scalars are taken strictly (``true`` is no integer, ``"8"``
no number, ``8.0`` no integer, NaN no number); a field that may be left out is not thereby nullable
(``nullable=True`` says so). Whatever does not fit is one :class:`CheckError` naming the JSON path of the
bad value: ``mcpServers.github.args[2]: must be a string, got 3``.

Keys a class does not know are not errors here (a settings file is shared with other tools): cattrs skips
them, and :func:`unknown_keys` lists them for the caller to warn about, unless the class says it ignores
them or refuses them (:func:`form`). The JSON Schema of a class (:func:`json_schema`) is generated from the
same fields, types and descriptions, so the schema and the loader cannot drift apart.
"""

from __future__ import annotations

import json
import math
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, NewType, TypeVar

import attrs
import cattrs
from cattrs.cols import homogenous_tuple_structure_factory, list_structure_factory, mapping_structure_factory
from cattrs.gen import make_dict_structure_fn, override

T = TypeVar("T")

DRAFT = "https://json-schema.org/draft/2020-12/schema"

# attrs metadata keys of a checked field
_KEY = "checked.key"  # its JSON key, when not the camelCase of its name
_DOC = "checked.doc"  # its description in the JSON Schema
_NULLABLE = "checked.nullable"  # null is a value it takes (not only leaving it out)
_SECRET = "checked.secret"  # its value is never shown in an error
_INTERNAL = "checked.internal"  # not read from JSON at all

# What a class does with a key it does not know: reported by unknown_keys, skipped silently, or an error.
WARN, IGNORE, REFUSE = "warn", "ignore", "refuse"


# ----------------------------------------------------------------- errors


class CheckError(ValueError):
    """Input that does not have the form its place wants: ``path`` is the JSON path of the bad value
    (``limits.maxSessions``, ``$.mcpServers[0].url``), ``detail`` what is wrong with it, ``source`` the
    file it came from, when there is one."""

    def __init__(self, detail: str, *, path: str = "", source: str = "") -> None:
        super().__init__(": ".join(part for part in (source, path, detail) if part))
        self.detail = detail
        self.path = path
        self.source = source


_UNSHOWN: Any = object()


class Invalid(ValueError):
    """What a structure hook or a class's own check raises: ``must`` (``"must be a positive integer"``),
    then the value given unless it is left out; ``at``: a member below the value's path it is about."""

    def __init__(self, must: str, value: Any = _UNSHOWN, *, at: str | None = None) -> None:
        super().__init__(must)
        self.must = must
        self.value = value
        self.at = at

    def detail(self, secret: bool = False) -> str:
        if self.value is _UNSHOWN:
            return self.must
        return f"{self.must}, got {json_kind_name(self.value) if secret else shown(self.value)}"


_KIND_NAMES = {"null": "null", "boolean": "true or false", "integer": "a number", "number": "a number",
               "string": "a string", "array": "an array", "object": "an object"}


def json_kind(value: Any) -> str:
    """The JSON type of a parsed value: ``"null"``, ``"boolean"``, ``"integer"``, ``"number"``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def json_kind_name(value: Any) -> str:
    """``"a string"``, ``"an array"``, ...: what a value is, without showing it."""
    kind = json_kind(value)
    return _KIND_NAMES.get(kind, kind)


def shown(value: Any, limit: int = 80) -> str:
    """A value as an error shows it: a scalar as JSON writes it (shortened), an array or object by its kind."""
    if isinstance(value, list | tuple | dict):
        return json_kind_name(value)
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def member(path: str, key: str) -> str:
    """``path`` extended by the object member ``key``: ``a.key``, or ``a["odd.key"]`` when the key has a
    dot, a bracket or a blank in it (or is empty); a top-level key is written as it is."""
    if not path:
        return key
    if key and not re.search(r"[.\[\]\s\"]", key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


# ----------------------------------------------------------------- declaring fields and classes


def field(default: Any = attrs.NOTHING, doc: str = "", *, key: str | None = None, nullable: bool = False,
          secret: bool = False, internal: bool = False, factory: Callable[[], Any] | None = None,
          metadata: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """An attrs field of a checked class: ``doc`` is its description in the JSON Schema, ``key`` its JSON
    key (default: its name in camelCase), ``nullable`` lets the file write null, ``secret`` keeps its
    value out of errors, ``internal`` keeps it out of the JSON form altogether."""
    meta = {**(metadata or {}), _DOC: doc, _NULLABLE: nullable, _SECRET: secret, _INTERNAL: internal}
    if key is not None:
        meta[_KEY] = key
    if factory is not None:
        return attrs.field(factory=factory, metadata=meta, **kwargs)
    return attrs.field(default=default, metadata=meta, **kwargs)


@attrs.frozen
class _Form:
    doc: str
    unknown: str
    schema: dict[str, Any]


_FORMS: dict[type, _Form] = {}


def form(doc: str = "", *, unknown: str = WARN, schema: dict[str, Any] | None = None) -> Callable[[type[T]], type[T]]:
    """Describe a checked attrs class: ``doc`` for the JSON Schema, what it does with ``unknown`` keys
    (:data:`WARN`, :data:`IGNORE`, :data:`REFUSE`), and ``schema``: what its own checks (its
    ``__attrs_post_init__``) add to its JSON Schema, written by hand next to them."""

    def declare(cls: type[T]) -> type[T]:
        _FORMS[cls] = _Form(doc, unknown, schema or {})
        return cls

    return declare


def _form(cls: type) -> _Form:
    return _FORMS.get(cls, _Form("", WARN, {}))


def key_of(f: attrs.Attribute) -> str:  # type: ignore[type-arg]
    """The JSON key of a field."""
    if _KEY in f.metadata:
        return f.metadata[_KEY]
    head, *rest = f.name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def json_fields(cls: type) -> dict[str, attrs.Attribute]:  # type: ignore[type-arg]
    """A checked class's fields read from JSON, by JSON key, their types resolved."""
    attrs.resolve_types(cls)
    return {key_of(f): f for f in attrs.fields(cls) if f.init and not f.metadata.get(_INTERNAL)}


def doc_of(f: attrs.Attribute) -> str:  # type: ignore[type-arg]
    return f.metadata.get(_DOC, "")


# ----------------------------------------------------------------- constrained scalars


@attrs.frozen
class _Scalar:
    base: type
    wanted: str
    test: Callable[[Any], bool]
    schema: dict[str, Any]
    convert: Callable[[Any], Any] | None


_SCALARS: dict[Any, _Scalar] = {}
_BASE_SCHEMA: dict[Any, dict[str, Any]] = {str: {"type": "string"}, bool: {"type": "boolean"},
                                           int: {"type": "integer"}, float: {"type": "number"}}
_BASE_WANTED = {str: "a string", bool: "true or false", int: "an integer", float: "a number"}


def constrained(name: str, base: type, wanted: str, test: Callable[[Any], bool] = lambda _: True, *,
                convert: Callable[[Any], Any] | None = None, schema: dict[str, Any] | None = None) -> Any:
    """A scalar type with a constraint: a ``NewType`` of ``base`` whose values pass ``test`` (which may
    also raise :class:`Invalid` itself, to say why). ``wanted`` completes "must be ..." in errors;
    ``schema`` is added to the base type's JSON Schema (``{"minimum": 1}``). ``convert``: what is kept
    of a good value (its base value when omitted)."""
    kind = NewType(name, base)  # type: ignore[misc]
    _SCALARS[kind] = _Scalar(base, wanted, test, schema or {}, convert)
    converter.register_structure_hook(kind, _scalar_hook(_SCALARS[kind]))
    return kind


def _strict(base: type, value: Any) -> bool:
    if base is float:
        return type(value) in (int, float) and math.isfinite(value)
    return type(value) is base


def _scalar_hook(scalar: _Scalar) -> Callable[[Any, Any], Any]:
    def hook(value: Any, _: Any) -> Any:
        if not _strict(scalar.base, value) or not scalar.test(value):
            raise Invalid(f"must be {scalar.wanted}", value)
        if scalar.convert is not None:
            return scalar.convert(value)
        return float(value) if scalar.base is float else value

    return hook


# ----------------------------------------------------------------- what a type takes


def _is_union(t: Any) -> bool:
    return typing.get_origin(t) in (typing.Union, types.UnionType)


def _is_literal(t: Any) -> bool:
    return typing.get_origin(t) is Literal


def _origin(t: Any) -> Any:
    return typing.get_origin(t)


def _members(t: Any) -> tuple[Any, ...]:
    return typing.get_args(t)


def _not_none(t: Any) -> Any:
    """``t`` without ``None``, when it is an optional type (else ``t``)."""
    if not _is_union(t):
        return t
    rest = [m for m in _members(t) if m is not type(None)]
    return rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]  # noqa: UP007


def _kinds(t: Any) -> set[str]:
    """The JSON types a value of ``t`` may have (for telling a union's members apart)."""
    if t is Any:
        return {"null", "boolean", "integer", "number", "string", "array", "object"}
    if t is type(None):
        return {"null"}
    if t in _SCALARS:
        t = _SCALARS[t].base
    if _is_union(t):
        return set().union(*(_kinds(m) for m in _members(t)))
    if _is_literal(t):
        return {json_kind(v) for v in _members(t)}
    if t is bool:
        return {"boolean"}
    if t is int:
        return {"integer"}
    if t is float:
        return {"integer", "number"}
    if t is str:
        return {"string"}
    if _origin(t) in (list, tuple):
        return {"array"}
    if _origin(t) is dict or attrs.has(t):
        return {"object"}
    raise TypeError(f"no JSON form for {t!r}")


def wanted(t: Any) -> str:
    """What a value of ``t`` must be, for "must be ...": ``"a positive integer"``, ``"an object"``."""
    if t in _SCALARS:
        return _SCALARS[t].wanted
    if t in _BASE_WANTED:
        return _BASE_WANTED[t]
    if t is type(None):
        return "null"
    if t is Any:
        return "any value"
    if _is_union(t):
        return " or ".join(wanted(m) for m in _members(t))
    if _is_literal(t):
        values = _members(t)
        return shown(values[0]) if len(values) == 1 else f"one of {json.dumps(list(values))}"
    if _origin(t) in (list, tuple):
        return f"an array of {_plural(wanted(_members(t)[0]))}"
    if _origin(t) is dict:  # "an object of strings"; of objects, just "an object"
        value_type = _members(t)[1]
        return f"an object of {_plural(wanted(value_type))}" if value_type in _SCALARS or value_type in _BASE_WANTED \
            else "an object"
    return "an object"


def _plural(text: str) -> str:
    """``"a string"`` -> ``"strings"``, ``"a positive integer"`` -> ``"positive integers"``; anything longer
    (``"one of [...]"``, ``"a URL with a host"``) -> ``"values"``."""
    words = text.split(" ")
    if words[0] in ("a", "an") and 2 <= len(words) <= 3 and "or" not in words:
        return " ".join([*words[1:-1], words[-1] + "s"])
    return "values"


# ----------------------------------------------------------------- the converter


def _strict_scalar(base: type) -> Callable[[Any, Any], Any]:
    return _scalar_hook(_Scalar(base, _BASE_WANTED[base], lambda _: True, {}, None))


def _literal_hook(t: Any, _: cattrs.Converter) -> Callable[[Any, Any], Any]:
    values = _members(t)

    def hook(value: Any, _: Any) -> Any:
        if any(type(value) is type(v) and value == v for v in values):
            return value
        raise Invalid(f"must be {wanted(t)}", value)

    return hook


def _union_hook(t: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    """A union is told apart by the JSON type of the value (its members take different ones)."""
    options = [(m, _kinds(m)) for m in _members(t)]

    def hook(value: Any, _: Any) -> Any:
        kind = json_kind(value)
        for option, kinds in options:
            if kind in kinds:
                return None if option is type(None) else conv.structure(value, option)
        raise Invalid(f"must be {wanted(t)}", value)

    return hook


def _array_hook(t: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    factory = list_structure_factory if _origin(t) is list else homogenous_tuple_structure_factory
    inner = factory(t, conv)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, list):  # a string is iterable too: not an array of its letters
            raise Invalid(f"must be {wanted(t)}", value)
        return inner(value, t)

    return hook


def _object_hook(t: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    inner = mapping_structure_factory(t, conv)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise Invalid(f"must be {wanted(t)}", value)
        return inner(value, t)

    return hook


def _class_hook(cls: type, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    """A checked class: keys renamed, a field that may be left out nullable only when it says so."""
    attrs.resolve_types(cls)
    overrides = {}
    for f in attrs.fields(cls):
        if f.metadata.get(_INTERNAL):
            overrides[f.name] = override(omit=True)
            continue
        hook = None
        if _is_union(f.type) and type(None) in _members(f.type) and not f.metadata.get(_NULLABLE):
            hook = _refuse_null(_not_none(f.type), conv)
        overrides[f.name] = override(rename=key_of(f), struct_hook=hook)
    inner = make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=_form(cls).unknown == REFUSE, **overrides)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise Invalid("must be an object", value)
        return inner(value, cls)

    return hook


def _refuse_null(t: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    def hook(value: Any, _: Any) -> Any:
        if value is None:
            raise Invalid(f"must be {wanted(t)}", value)
        return conv.structure(value, t)

    return hook


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(detailed_validation=True)
    for base in (str, bool, int, float):
        conv.register_structure_hook(base, _strict_scalar(base))
    conv.register_structure_hook_factory(lambda t: _origin(t) in (list, tuple), _array_hook)
    conv.register_structure_hook_factory(lambda t: _origin(t) is dict, _object_hook)
    conv.register_structure_hook_factory(_is_literal, _literal_hook)
    conv.register_structure_hook_factory(_is_union, _union_hook)
    conv.register_structure_hook_factory(attrs.has, _class_hook)
    return conv


converter = _make_converter()


# ----------------------------------------------------------------- structuring, and its one error


def structure(value: Any, t: Any, path: str = "", error: type[CheckError] = CheckError) -> Any:
    """``value`` (parsed JSON) as a ``t``; ``error`` (a :class:`CheckError`) naming the JSON path of the first
    bad value, ``path`` being where ``value`` itself is (``"mcpServers"``)."""
    try:
        return converter.structure(value, t)
    except (cattrs.BaseValidationError, Invalid) as exc:
        where, detail = _first_problem(exc, path, secret=False)
        raise error(detail, path=where) from None


def _first_problem(exc: BaseException, path: str, secret: bool) -> tuple[str, str]:
    """The path and detail of the first bad value below ``exc``, walking cattrs' validation errors by their
    notes (a class's attribute, a list's index, a mapping's key)."""
    if isinstance(exc, cattrs.ClassValidationError):
        fields = attrs.fields_dict(exc.cl)
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            f = fields[note.name]
            return _first_problem(sub, member(path, key_of(f)), secret or f.metadata.get(_SECRET, False))
        for sub in without:  # the class's own check (__attrs_post_init__), or keys it refuses
            return _first_problem(sub, path, secret)
    if isinstance(exc, cattrs.IterableValidationError):
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            index = note.index
            return _first_problem(sub, f"{path}[{index}]" if isinstance(index, int) else member(path, index), secret)
        for sub in without:
            return _first_problem(sub, path, secret)
    if isinstance(exc, Invalid):
        return (member(path, exc.at) if exc.at else path), exc.detail(secret)
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        known = ", ".join(json_fields(exc.cl)) if exc.cl is not None else ""
        return member(path, min(exc.extra_fields)), f"unknown key (it takes {known})"
    if isinstance(exc, KeyError):  # cattrs' way of saying a required key is missing
        return path, "is required"
    raise exc  # not bad input: a hook or a class's own check that failed


# ----------------------------------------------------------------- keys nobody reads


def unknown_keys(value: Any, t: Any, path: str = "") -> list[str]:
    """The JSON paths of the keys in ``value`` (already structured as a ``t`` without error) that no
    class of ``t`` knows, except in classes that ignore them."""
    if _is_union(t):
        kind = json_kind(value)
        return next((unknown_keys(value, m, path) for m in _members(t) if kind in _kinds(m)), [])
    if attrs.has(t) and isinstance(value, dict):
        fields = json_fields(t)
        found: list[str] = []
        for key, item in value.items():
            if key in fields:
                found += unknown_keys(item, fields[key].type, member(path, key))
            elif _form(t).unknown == WARN:
                found.append(member(path, key))
        return found
    if _origin(t) is dict and isinstance(value, dict):
        return [p for key, item in value.items() for p in unknown_keys(item, _members(t)[1], member(path, key))]
    if _origin(t) in (list, tuple) and isinstance(value, list):
        return [p for i, item in enumerate(value) for p in unknown_keys(item, _members(t)[0], f"{path}[{i}]")]
    return []


# ----------------------------------------------------------------- the JSON Schema of a class


def json_schema(root: type, **annotations: Any) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of what :func:`structure` takes as a ``root``: ``root`` itself
    inline, every other checked class in ``$defs`` by its name. ``annotations`` (``title``, ...) go first."""
    defs: dict[str, Any] = {}
    body = _class_schema(root, defs)
    return {"$schema": DRAFT, **annotations, **body, "$defs": dict(sorted(defs.items()))}


def _class_schema(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    described = _form(cls)
    out: dict[str, Any] = {"type": "object"}
    if described.doc:
        out["description"] = described.doc
    properties: dict[str, Any] = {}
    required: list[str] = []
    for key, f in json_fields(cls).items():
        schema = _type_schema(f.type if f.metadata.get(_NULLABLE) else _not_none(f.type), defs)
        if doc_of(f):
            schema = {**schema, "description": doc_of(f)}
        default = _json_default(f)
        if default is not None:
            schema["default"] = default
        properties[key] = schema
        if f.default is attrs.NOTHING:
            required.append(key)
    out["properties"] = properties
    if required:
        out["required"] = required
    if described.unknown == REFUSE:
        out["additionalProperties"] = False
    return {**out, **described.schema}


def _json_default(f: attrs.Attribute) -> Any:  # type: ignore[type-arg]
    default = f.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        default = default.factory()  # type: ignore[union-attr]
    if default is attrs.NOTHING or default is None or attrs.has(type(default)):
        return None
    if isinstance(default, tuple):
        default = list(default)
    return default


def _type_schema(t: Any, defs: dict[str, Any]) -> dict[str, Any]:
    if t in _SCALARS:
        scalar = _SCALARS[t]
        return {**_BASE_SCHEMA[scalar.base], **scalar.schema}
    if t in _BASE_SCHEMA:
        return dict(_BASE_SCHEMA[t])
    if t is type(None):
        return {"type": "null"}
    if t is Any:
        return {}
    if _is_literal(t):
        values = list(_members(t))
        return {"const": values[0]} if len(values) == 1 else {"enum": values}
    if _is_union(t):
        return {"anyOf": [_type_schema(m, defs) for m in _members(t)]}
    if _origin(t) in (list, tuple):
        return {"type": "array", "items": _type_schema(_members(t)[0], defs)}
    if _origin(t) is dict:
        key_type, value_type = _members(t)
        out: dict[str, Any] = {"type": "object"}
        if key_type is not str:
            out["propertyNames"] = _type_schema(key_type, defs)
        out["additionalProperties"] = _type_schema(value_type, defs)
        return out
    if attrs.has(t):
        if t.__name__ not in defs:
            defs[t.__name__] = {}  # a class that holds itself refers to its own entry
            defs[t.__name__] = _class_schema(t, defs)
        return {"$ref": f"#/$defs/{t.__name__}"}
    raise TypeError(f"no JSON Schema for {t!r}")


# ----------------------------------------------------------------- scalars every config uses

PositiveInt = constrained("PositiveInt", int, "a positive integer", lambda v: v > 0, schema={"minimum": 1})
Count = constrained("Count", int, "a non-negative integer", lambda v: v >= 0, schema={"minimum": 0})
PositiveNumber = constrained("PositiveNumber", float, "a positive number", lambda v: v > 0,
                             schema={"exclusiveMinimum": 0})
NonEmpty = constrained("NonEmpty", str, "a non-empty string", lambda v: bool(v.strip()), schema={"pattern": r"\S"})


def _is_http_url(text: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
    except ValueError:  # an unclosed "[" in the host
        return False


HttpUrl = constrained("HttpUrl", str, "an http:// or https:// URL with a host", _is_http_url,
                      schema={"pattern": "^[Hh][Tt][Tt][Pp][Ss]?://([^/?#@]*@)?[^/?#@:]"})


__all__ = ["DRAFT", "IGNORE", "REFUSE", "WARN", "CheckError", "Count", "HttpUrl", "Invalid", "NonEmpty",
           "PositiveInt", "PositiveNumber", "constrained", "converter", "doc_of", "field", "form", "json_fields",
           "json_kind", "json_kind_name", "json_schema", "key_of", "member", "shown", "structure", "unknown_keys",
           "wanted"]
