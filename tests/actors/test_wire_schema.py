"""actors/wire/schema.py: JSON Schema from attrs fields and type hints, as the converter reads them."""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

import attrs
import jsonschema
import pytest

from actors import wire
from actors.wire.schema import REF_PREFIX, described, schemas_of, type_schema


@attrs.frozen(kw_only=True)
class Inner:
    n: int


@attrs.frozen(kw_only=True)
class Other:
    kind: Literal["other"]


@attrs.frozen(kw_only=True)
class Sample:
    """A sample.

    Its second paragraph."""

    text: str = wire.bounded(10)
    where: str | None = wire.path_field("invalid_cwd", default=None)
    flag: bool
    ratio: float | None
    mode: Literal["a", "b"] | None = None
    items: list[Inner]
    either: Inner | Other
    anything: Any = None
    free: dict[str, Any] | None = None
    note: str = described("what it says", default="")
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class Open:
    wire_open: ClassVar[bool] = True
    wire_schema: ClassVar[dict[str, Any]] = {"properties": {"a": {"minItems": 1}}, "minProperties": 1}
    a: list[str]


def test_fields_become_properties_as_the_wire_has_them():
    defs = schemas_of(Sample)
    schema = defs["Sample"]
    props = schema["properties"]
    assert props["text"] == {"type": "string", "maxLength": 10}
    assert props["where"] == {"type": ["string", "null"], "maxLength": 4096, "pattern": "^[^\\x00]*$"}
    assert props["flag"] == {"type": "boolean"}
    assert props["ratio"] == {"type": ["number", "null"]}
    assert props["mode"] == {"enum": ["a", "b", None], "type": ["null", "string"]}
    assert props["items"] == {"type": "array", "items": {"$ref": REF_PREFIX + "Inner"}}
    assert props["either"] == {"oneOf": [{"$ref": REF_PREFIX + "Inner"}, {"$ref": REF_PREFIX + "Other"}]}
    assert props["anything"] == {}
    assert props["note"]["description"] == "what it says"
    assert "_meta" in props and "meta" not in props  # the converter's rename
    assert schema["required"] == ["text", "flag", "ratio", "items", "either"]
    assert schema["additionalProperties"] is False
    assert schema["description"].startswith("A sample.\n\nIts second paragraph.")
    assert defs["Other"]["properties"]["kind"] == {"const": "other", "type": "string"}


def test_an_open_class_allows_more_members_and_its_wire_schema_is_merged():
    schema = schemas_of(Open)["Open"]
    assert "additionalProperties" not in schema
    assert schema["properties"]["a"] == {"type": "array", "items": {"type": "string"}, "minItems": 1}
    assert schema["minProperties"] == 1


def test_a_type_without_a_wire_form_is_a_clear_error():
    with pytest.raises(TypeError, match="no JSON Schema for the type"):
        type_schema(set[int], {})


def test_two_classes_of_one_name_are_refused():
    first = attrs.make_class("Twin", {"a": attrs.field(type=int)})
    second = attrs.make_class("Twin", {"b": attrs.field(type=str)})
    second.__module__ = "elsewhere"  # as two modules' classes would be
    with pytest.raises(ValueError, match="two wire classes are named 'Twin'"):
        schemas_of(first, second)


@pytest.mark.parametrize("body, cls, valid", [
    ({"prompt": [{"type": "text", "text": "hi"}]}, wire.PromptBody, True),
    ({"prompt": []}, wire.PromptBody, False),  # the route's empty_prompt
    ({"prompt": [{"type": "text", "text": "hi", "bogus": 1}]}, wire.PromptBody, False),
    ({"prompt": [{"type": "text", "text": "hi"}], "_meta": {"retry": True}}, wire.PromptBody, True),
    ({"model": "m"}, wire.ModelBody, True),
    ({"modelId": "m", "model": None}, wire.ModelBody, True),
    ({"model": "m", "modelId": "n"}, wire.ModelBody, False),
    ({}, wire.ModelBody, False),
    ({"model": "  "}, wire.ModelBody, False),  # the route's invalid_model
    ({"outcome": {"outcome": "cancelled"}}, wire.PermissionVoteBody, True),
    ({"outcome": {"outcome": "selected"}}, wire.PermissionVoteBody, False),
    ({"turn": "1"}, wire.RewindBody, False),
    ({"title": None}, wire.TitleBody, True),
    ({"message": " \n"}, wire.MidTurnMessageBody, False),  # the route's empty_message
])
def test_a_body_the_schema_takes_is_one_the_converter_and_route_take(body: dict[str, Any], cls: type, valid: bool):
    schema = _rebased({"$ref": REF_PREFIX + cls.__name__, "$defs": schemas_of(cls)})
    assert jsonschema.Draft202012Validator(schema).is_valid(body) is valid
    if valid:
        wire.structure(body, cls)  # the converter takes it too


def _rebased(schema: dict[str, Any]) -> dict[str, Any]:
    """``#/components/schemas/X`` references as ``#/$defs/X``: the schema on its own, outside the document."""
    return json.loads(json.dumps(schema).replace('"' + REF_PREFIX, '"#/$defs/'))
