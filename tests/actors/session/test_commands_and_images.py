"""The slash-command parser and the image block checks (unit tests)."""

from __future__ import annotations

import base64

import pytest

from actors import wire
from actors.model import ChatMessage, ImagePart
from actors.model.openai import OpenAIConfig, OpenAIModel, message_to_wire
from actors.session import commands, images
from actors.session.commands import SlashCommand


@pytest.mark.parametrize(("text", "parsed"), [
    ("/clear", SlashCommand("clear", "")),
    ("  /compact \n", SlashCommand("compact", "")),
    ("/model gpt-4o-mini", SlashCommand("model", "gpt-4o-mini")),
    ("/model   qwen3  ", SlashCommand("model", "qwen3")),
    ("/model", SlashCommand("model", "")),
    ("/clear now", SlashCommand("clear", "now")),  # a known command with a stray argument says so
])
def test_commands_are_parsed(text: str, parsed: SlashCommand) -> None:
    assert commands.parse(text) == parsed


@pytest.mark.parametrize("text", [
    "/unknown", "/etc/hosts", "please /clear", "/Clear", "clear", "", "/", "/ clear", "hi\n/clear",
])
def test_anything_else_is_text_for_the_model(text: str) -> None:
    assert commands.parse(text) is None


def test_the_announced_commands() -> None:
    update = commands.available_commands_update()
    assert update["sessionUpdate"] == "available_commands_update"
    assert [c["name"] for c in update["availableCommands"]] == ["compact", "clear", "model"]


def image(data: str, mime: str = "image/png") -> wire.ImageBlock:
    return wire.ImageBlock(type="image", data=data, mimeType=mime)


def body(*blocks) -> wire.PromptBody:
    return wire.PromptBody(prompt=[wire.TextBlock(type="text", text="look"), *blocks])


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()


def test_a_valid_image_becomes_a_part() -> None:
    assert images.prompt_images(body(image(PNG))) == (ImagePart("image/png", PNG),)
    assert images.prompt_images(body()) == ()
    assert images.prompt_images(body(), accepted=False) == ()  # no image: nothing to refuse


@pytest.mark.parametrize(("block", "code", "path"), [
    (image("not base64!"), "invalid_image", "$.prompt[1].data"),
    (image(""), "invalid_image", "$.prompt[1].data"),
    (image(PNG, "image/tiff"), "invalid_image", "$.prompt[1].mimeType"),
    (image(PNG, "text/plain"), "invalid_image", "$.prompt[1].mimeType"),
    (image(base64.b64encode(b"\0" * (images.MAX_IMAGE_BYTES + 1)).decode()), "image_too_large", "$.prompt[1].data"),
])
def test_bad_images_are_refused_naming_the_field(block, code: str, path: str) -> None:
    with pytest.raises(images.ImageRefused) as refused:
        images.prompt_images(body(block))
    assert (refused.value.code, refused.value.path) == (code, path)


def test_images_are_refused_when_the_model_does_not_accept_them() -> None:
    with pytest.raises(images.ImageRefused) as refused:
        images.prompt_images(body(image(PNG)), accepted=False)
    assert refused.value.code == "images_not_supported" and "model.supportsImages" in refused.value.message


def test_an_image_at_the_cap_is_taken() -> None:
    data = base64.b64encode(b"\0" * images.MAX_IMAGE_BYTES).decode()
    assert images.check_image(image(data), "$") == ImagePart("image/png", data)


def test_the_openai_provider_sends_image_url_parts_only_when_enabled() -> None:
    message = ChatMessage("user", "look\n[image]", images=(ImagePart("image/png", PNG),))
    assert message_to_wire(message)["content"] == [
        {"type": "text", "text": "look\n[image]"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]
    assert message_to_wire(ChatMessage("user", "plain"))["content"] == "plain"
    assert OpenAIModel(OpenAIConfig()).supports_images is False
    assert OpenAIConfig.from_sources({}, {"supportsImages": True}).supports_images is True
    with pytest.raises(ValueError, match="model.supportsImages"):
        OpenAIConfig.from_sources({}, {"supportsImages": "yes"})
