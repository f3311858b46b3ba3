"""JSON Schema (2020-12, as OpenAPI 3.1 takes it) generated from the wire module's attrs classes.

One walk over a class's attrs fields and type hints gives the schema of its wire form, so a
schema cannot drift from the converter that decodes (or the class that builds) the JSON:

    str, int, float, bool, None   -> string, integer, number, boolean, null
    Literal["a", "b"]             -> enum (const for one value)
    list[X]                       -> array of X
    dict[str, Any], Any           -> any object, anything
    X | Y | None                  -> anyOf (a union of attrs classes: oneOf of their $refs)
    an attrs class                -> {"$ref": "#/components/schemas/<Name>"}, defined once in ``defs``

A field named ``meta`` is ``_meta`` on the wire (as the converter renames it); a field without a
default is required; a :func:`actors.wire.bounded` field has its ``maxLength``; a path field
refuses NUL. Request bodies are closed (``additionalProperties: false``, as the strict converter
refuses unknown fields); an answer class is closed too unless it says ``wire_open = True`` (its
object may carry members beyond those listed). A class's ``wire_schema`` (a ClassVar) adds what its
route checks beyond the fields' types (``minItems``, a ``pattern``, a ``oneOf``): merged into a
property's schema under ``properties``, set at the top otherwise. Pure: nothing here imports a web
framework.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any, Literal

import attrs

from ..checked import json_kind
from . import bodies

REF_PREFIX = "#/components/schemas/"
DESCRIPTION = "trellis.wire.description"  # attrs metadata key: a field's description in the schema


def described(text: str, **kwargs: Any) -> Any:
    """An attrs field whose schema has ``description: text``."""
    metadata = {**kwargs.pop("metadata", {}), DESCRIPTION: text}
    return attrs.field(metadata=metadata, **kwargs)


def wire_name(field: attrs.Attribute) -> str:  # type: ignore[type-arg]
    """A field's name on the wire: ``meta`` travels as ``_meta``."""
    return "_meta" if field.name == "meta" else field.name


def _scalar(tp: Any) -> dict[str, Any] | None:
    return {str: {"type": "string"}, int: {"type": "integer"}, float: {"type": "number"},
            bool: {"type": "boolean"}, type(None): {"type": "null"}}.get(tp)


def type_schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The schema of a type hint; attrs classes it reaches are added to ``defs`` (by class name)."""
    if tp is Any or tp is object:
        return {}
    scalar = _scalar(tp)
    if scalar is not None:
        return dict(scalar)
    if attrs.has(tp):
        return {"$ref": REF_PREFIX + class_schema(tp, defs)}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        values = list(args)
        out: dict[str, Any] = {"const": values[0]} if len(values) == 1 else {"enum": values}
        kinds = sorted({json_kind(v) for v in values})
        out["type"] = kinds[0] if len(kinds) == 1 else kinds
        return out
    if origin in (list, tuple) or tp in (list, tuple):
        item = args[0] if args else Any
        return {"type": "array", "items": type_schema(item, defs)}
    if origin is dict or tp is dict:
        value = args[1] if len(args) == 2 else Any
        inner = type_schema(value, defs)
        return {"type": "object", "additionalProperties": inner} if inner else {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        nullable = len(options) < len(args)
        if len(options) == 1:
            inner = type_schema(options[0], defs)
            return _or_null(inner) if nullable else inner
        keyword = "oneOf" if all(attrs.has(o) for o in options) else "anyOf"
        schemas = [type_schema(o, defs) for o in options] + ([{"type": "null"}] if nullable else [])
        return {keyword: schemas}
    raise TypeError(f"no JSON Schema for the type {tp!r}: give the field a wire type (see actors/wire/schema.py)")


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, str) and set(schema) <= {"type", "maxLength", "pattern", "items", "additionalProperties"}:
        return {**schema, "type": [kind, "null"]}
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None], "type": sorted({*_types(schema), "null"})}
    if "const" in schema:
        return {"enum": [schema["const"], None], "type": sorted({*_types(schema), "null"})}
    return {"anyOf": [schema, {"type": "null"}]}


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type", [])
    return [kind] if isinstance(kind, str) else list(kind)


def _field_schema(field: attrs.Attribute, tp: Any, defs: dict[str, Any]) -> dict[str, Any]:  # type: ignore[type-arg]
    schema = type_schema(tp, defs)
    extra = bodies.string_limits(field)
    if extra:
        schema = _with_string_limits(schema, extra)
    if DESCRIPTION in field.metadata:
        schema = {**schema, "description": field.metadata[DESCRIPTION]}
    return schema


def _with_string_limits(schema: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    if "string" in _types(schema):
        return {**schema, **extra}
    return schema


def class_schema(cls: type, defs: dict[str, Any]) -> str:
    """Put the schema of the attrs class ``cls`` (and of the classes it reaches) into ``defs``; its name there."""
    name = cls.__name__
    known = defs.get(name)
    if known is not None:
        if known.get("x-python-class") != f"{cls.__module__}.{cls.__qualname__}":
            raise ValueError(f"two wire classes are named {name!r}: {known.get('x-python-class')} and "
                             f"{cls.__module__}.{cls.__qualname__}")
        return name
    defs[name] = {"x-python-class": f"{cls.__module__}.{cls.__qualname__}"}  # a placeholder while recursing
    hints = typing.get_type_hints(cls)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in attrs.fields(cls):
        properties[wire_name(field)] = _field_schema(field, hints[field.name], defs)
        if field.default is attrs.NOTHING:
            required.append(wire_name(field))
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if not getattr(cls, "wire_open", False):
        schema["additionalProperties"] = False
    for key, value in getattr(cls, "wire_schema", {}).items():  # what the route checks beyond the fields' types
        if key == "properties":
            for field_name, more in value.items():
                properties[field_name] = {**properties[field_name], **more}
        else:
            schema[key] = value
    doc = inspect.cleandoc(cls.__doc__ or "")
    if doc and not doc.startswith(f"{name}("):  # attrs' generated signature is no description
        schema["description"] = doc
    defs[name] = {**schema, "x-python-class": f"{cls.__module__}.{cls.__qualname__}"}
    return name


def schemas_of(*classes: type) -> dict[str, Any]:
    """The schemas of ``classes`` and every class they reach, by class name (``components.schemas``)."""
    defs: dict[str, Any] = {}
    for cls in classes:
        class_schema(cls, defs)
    return defs
