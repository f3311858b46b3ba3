"""actors/checked.py: one converter for JSON configs, its one error naming the JSON path, and its JSON Schema."""

from __future__ import annotations

import math
from typing import Any, Literal

import attrs
import pytest
from jsonschema import Draft202012Validator

from actors import checked
from actors.checked import CheckError, Invalid, NonEmpty, PositiveInt, field


@checked.form("A server.", unknown=checked.IGNORE)
@attrs.frozen(kw_only=True)
class Server:
    command: NonEmpty = field(doc="The program.")
    args: tuple[str, ...] = field((), "Its arguments.")
    token: str | None = field(None, "A credential.", secret=True)
    cwd: str | None = field(None, "May be left out, not null.")
    model: str | None = field(None, "May be null.", nullable=True)

    def __attrs_post_init__(self) -> None:
        if self.command == "forbidden":
            raise Invalid("is not allowed here", self.command, at="command")
        if self.args == ("both",) and self.cwd is not None:
            raise Invalid("gives both args and cwd")


@checked.form("Strict.", unknown=checked.REFUSE)
@attrs.frozen(kw_only=True)
class Strict:
    mode: Literal["a", "b"] = field("a", "A mode.")


@checked.form("The document.")
@attrs.frozen(kw_only=True)
class Document:
    max_items: PositiveInt = field(8, "Items.")
    ratio: float = field(1.0, "Any number.")
    flag: bool = field(False, "A flag.")
    http_port: int = field(80, "Its key is httpPort.")
    label: str = field("x", "An explicit key.", key="Label")
    servers: dict[str, Server] = field(factory=dict, doc="Servers by name.")
    strict: Strict | Literal["off"] = field("off", "An object, or the string off.")
    internal: int = field(0, internal=True)


def error(value: Any, t: Any = Document) -> CheckError:
    with pytest.raises(CheckError) as caught:
        checked.structure(value, t)
    return caught.value


def test_keys_are_camel_case_unless_a_field_names_its_own() -> None:
    doc = checked.structure({"maxItems": 2, "httpPort": 8080, "Label": "y"}, Document)
    assert (doc.max_items, doc.http_port, doc.label) == (2, 8080, "y")
    assert checked.unknown_keys({"max_items": 2, "internal": 1}, Document) == ["max_items", "internal"]


@pytest.mark.parametrize(("value", "message"), [
    ({"maxItems": True}, "maxItems: must be a positive integer, got true"),
    ({"maxItems": "8"}, 'maxItems: must be a positive integer, got "8"'),
    ({"maxItems": 8.0}, "maxItems: must be a positive integer, got 8.0"),
    ({"maxItems": 0}, "maxItems: must be a positive integer, got 0"),
    ({"httpPort": True}, "httpPort: must be an integer, got true"),
    ({"ratio": "1"}, 'ratio: must be a number, got "1"'),
    ({"ratio": math.nan}, "ratio: must be a number, got NaN"),
    ({"ratio": -math.inf}, "ratio: must be a number, got -Infinity"),
    ({"flag": 1}, "flag: must be true or false, got 1"),
    ({"Label": None}, "Label: must be a string, got null"),
    ({"servers": []}, "servers: must be an object, got an array"),
    ({"servers": {"s": {}}}, "servers.s.command: is required"),
    ({"servers": {"s": {"command": " "}}}, 'servers.s.command: must be a non-empty string, got " "'),
    ({"servers": {"s": {"command": "x", "args": "-v"}}}, 'servers.s.args: must be an array of strings, got "-v"'),
    ({"servers": {"a.b": {"command": "x", "args": ["-v", 2]}}}, 'servers["a.b"].args[1]: must be a string, got 2'),
    ({"servers": {"s": {"command": "x", "cwd": None}}}, "servers.s.cwd: must be a string, got null"),
    ({"servers": {"s": {"command": "x", "token": 12345}}}, "servers.s.token: must be a string, got a number"),
    ({"servers": {"s": {"command": "forbidden"}}}, 'servers.s.command: is not allowed here, got "forbidden"'),
    ({"servers": {"s": {"command": "x", "args": ["both"], "cwd": "/"}}}, "servers.s: gives both args and cwd"),
    ({"strict": 5}, 'strict: must be an object or "off", got 5'),
    ({"strict": "on"}, 'strict: must be "off", got "on"'),
    ({"strict": {"mode": "c"}}, 'strict.mode: must be one of ["a", "b"], got "c"'),
    ({"strict": {"mode": "a", "mood": 1}}, "strict.mood: unknown key (it takes mode)"),
    ([], "must be an object, got an array"),
])
def test_a_bad_value_is_one_error_naming_its_json_path(value: Any, message: str) -> None:
    caught = error(value)
    assert str(caught) == message
    assert isinstance(caught, ValueError)


def test_null_is_taken_only_where_a_field_says_so() -> None:
    server = checked.structure({"command": "x", "model": None}, Server)
    assert (server.model, server.cwd) == (None, None)


def test_the_caller_picks_the_error_class_and_the_root_path() -> None:
    class ServerError(CheckError):
        pass

    with pytest.raises(ServerError) as caught:
        checked.structure({"s": {"command": 5}}, dict[str, Server], "$.servers", ServerError)
    assert (caught.value.path, caught.value.detail) == ("$.servers.s.command", "must be a non-empty string, got 5")


def test_unknown_keys_are_listed_by_path_except_where_a_class_ignores_them() -> None:
    value = {"theme": 1, "servers": {"s": {"command": "x", "oauth": {}}}, "strict": {"mode": "b"}}
    checked.structure(value, Document)
    assert checked.unknown_keys(value, Document) == ["theme"]  # Server ignores its own, Strict refuses them


# ----------------------------------------------------------------- the JSON Schema


SCHEMA = checked.json_schema(Document, title="A document")
VALIDATOR = Draft202012Validator(SCHEMA)


def test_the_schema_is_a_draft_2020_12_schema_with_the_descriptions_and_defaults() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == checked.DRAFT and SCHEMA["title"] == "A document"
    assert SCHEMA["properties"]["maxItems"] == {"type": "integer", "minimum": 1, "description": "Items.", "default": 8}
    assert "internal" not in SCHEMA["properties"] and "Label" in SCHEMA["properties"]
    assert SCHEMA["$defs"]["Server"]["required"] == ["command"]
    assert SCHEMA["$defs"]["Strict"]["additionalProperties"] is False


@pytest.mark.parametrize("value", [
    {}, {"maxItems": 1, "ratio": 0.5, "flag": True, "theme": "unknown keys are warnings"},
    {"servers": {"s": {"command": "x", "args": ["a"], "model": None, "oauth": {}}}}, {"strict": {"mode": "b"}},
])
def test_what_the_converter_takes_the_schema_takes(value: Any) -> None:
    checked.structure(value, Document)
    assert VALIDATOR.is_valid(value)


@pytest.mark.parametrize("value", [
    {"maxItems": 0}, {"flag": 1}, {"Label": None}, {"servers": {"s": {}}}, {"servers": {"s": {"command": ""}}},
    {"servers": {"s": {"command": "x", "cwd": None}}}, {"strict": "on"}, {"strict": {"mood": 1}}, [],
])
def test_what_the_converter_refuses_the_schema_refuses(value: Any) -> None:
    error(value)
    assert not VALIDATOR.is_valid(value)
