"""The tool adapter: names the OpenAI API accepts, schemas, and results as the model reads them."""

from __future__ import annotations

import re

import mcp.types as types

from actors.mcp_client.tools import input_schema, result_text, tool_name

OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def test_names_are_sanitized_and_bounded():
    assert tool_name("fs", "read_file") == "mcp__fs__read_file"
    assert tool_name("my server", "get.weather/now") == "mcp__my_server__get_weather_now"
    assert tool_name("ünï", "tool-1") == "mcp___n___tool-1"
    long = tool_name("server" * 10, "tool" * 10)
    assert len(long) == 64 and OPENAI_NAME.match(long)
    assert long != tool_name("server" * 10, "tool" * 10 + "x")  # the hash keeps long names apart
    hashed = tool_name("fs", "read_file", hashed=True)  # the form a taken name falls back to
    assert OPENAI_NAME.match(hashed) and hashed.startswith("mcp__fs__read_file_") and len(hashed) == 27
    for server, tool in [("a b", "c"), ("a_b", "c"), ("x" * 100, "y"), ("é", "ü" * 80)]:
        assert OPENAI_NAME.match(tool_name(server, tool))


def test_the_input_schema_is_an_object_schema_without_dollar_schema():
    tool = types.Tool(name="t", input_schema={"$schema": "https://json-schema.org/draft/2020-12/schema",
                                              "type": "object", "properties": {"a": {"type": "integer"}},
                                              "required": ["a"]})
    assert input_schema(tool) == {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert input_schema(types.Tool(name="t", input_schema={"type": "object"})) == {"type": "object", "properties": {}}


def test_results_become_text_for_the_model():
    result = types.CallToolResult(content=[
        types.TextContent(type="text", text="line one"),
        types.ImageContent(type="image", data="aGVsbG8h", mime_type="image/png"),
        types.ResourceLink(type="resource_link", uri="file:///x.txt", name="x"),
        types.EmbeddedResource(type="resource", resource=types.TextResourceContents(uri="file:///y", text="inside")),
    ])
    assert result_text(result) == ("line one\n[image content: image/png, 6 bytes]\n[resource: file:///x.txt]\n"
                                   "inside")
    structured = types.CallToolResult(content=[], structured_content={"sum": 3})
    assert result_text(structured) == '{"sum": 3}'
    huge = types.CallToolResult(content=[types.TextContent(type="text", text="x" * 300_000)])
    assert result_text(huge).endswith("\n[100000 characters cut]")
