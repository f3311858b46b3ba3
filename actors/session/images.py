"""Image blocks of a prompt: checked at admission, then carried to the model as :class:`ImagePart`.

A prompt's ``{type: "image", mimeType, data}`` blocks (REST and ACP alike) go
to the model only when its provider accepts images (``supports_images``: the
scripted model does, the ``openai`` provider when ``model.supportsImages`` is
true). Otherwise, or when an image is not base64 of a known image type, or
decodes to more than :data:`MAX_IMAGE_BYTES`, the prompt is refused before it
is queued with :class:`ImageRefused`, which names the block's path: the REST
surface answers 400 and ACP -32602.
"""

from __future__ import annotations

import binascii
from base64 import b64decode
from typing import Any

from .. import wire
from ..model import ImagePart

MAX_IMAGE_BYTES = 5 * 1024 * 1024  # decoded; a larger image costs more context than it is worth
MAX_IMAGES = 16  # per prompt
MIME_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})  # what vision APIs take


class ImageRefused(ValueError):
    """A prompt's image block the session cannot take; ``path`` names it (``$.prompt[i]``)."""

    def __init__(self, message: str, path: str, code: str = "invalid_image") -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.code = code


def accepts_images(provider: Any) -> bool:
    """Whether ``provider`` reads images (a provider without the flag does not)."""
    return getattr(provider, "supports_images", False) is True


def check_image(block: wire.ImageBlock, path: str) -> ImagePart:
    """One image block as an :class:`ImagePart`, or :class:`ImageRefused` saying what is wrong."""
    mime = block.mimeType.strip().lower()
    if mime not in MIME_TYPES:
        raise ImageRefused(f"mimeType {wire.excerpt(block.mimeType)} is not one of {sorted(MIME_TYPES)}",
                           f"{path}.mimeType")
    data = block.data
    # Base64 is 4 characters per 3 bytes: a longer string cannot decode within the cap (checked before decoding).
    if len(data) > (MAX_IMAGE_BYTES + 2) // 3 * 4 + 4:
        raise ImageRefused(f"the image is larger than {MAX_IMAGE_BYTES:,} bytes", f"{path}.data", "image_too_large")
    try:
        decoded = b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ImageRefused("data is not base64", f"{path}.data") from None
    if not decoded:
        raise ImageRefused("the image is empty", f"{path}.data")
    if len(decoded) > MAX_IMAGE_BYTES:
        raise ImageRefused(f"the image is larger than {MAX_IMAGE_BYTES:,} bytes ({len(decoded):,} given)",
                           f"{path}.data", "image_too_large")
    return ImagePart(mime, data)


def prompt_images(body: wire.PromptBody, accepted: bool = True) -> tuple[ImagePart, ...]:
    """The prompt's images, checked; :class:`ImageRefused` when there are any and ``accepted`` is false."""
    blocks = [(i, b) for i, b in enumerate(body.prompt) if isinstance(b, wire.ImageBlock)]
    if not blocks:
        return ()
    if not accepted:
        i = blocks[0][0]
        raise ImageRefused("this model does not accept images (for an OpenAI-compatible model that does, set "
                           "model.supportsImages to true)", f"$.prompt[{i}]", "images_not_supported")
    if len(blocks) > MAX_IMAGES:
        raise ImageRefused(f"at most {MAX_IMAGES} images per prompt ({len(blocks)} given)", "$.prompt",
                           "too_many_images")
    return tuple(check_image(b, f"$.prompt[{i}]") for i, b in blocks)
