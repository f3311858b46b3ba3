"""Model providers: the scripted one (embedded default) and OpenAI-compatible; :func:`provider_from_settings`
builds the one the settings name."""

from .base import (
    ChatMessage,
    ChatRequest,
    ContextWindowExceeded,
    Finish,
    ImagePart,
    ModelError,
    ModelProvider,
    StreamItem,
    TextDelta,
    ThoughtDelta,
    ToolCall,
    ToolSpec,
    Usage,
    configured_model,
)
from .from_settings import provider_from_settings
from .scripted import ScriptedModel, ScriptError, load_script

__all__ = [
    "ChatMessage", "ChatRequest", "ContextWindowExceeded", "Finish", "ImagePart", "ModelError", "ModelProvider",
    "ScriptError", "ScriptedModel", "StreamItem", "TextDelta", "ThoughtDelta", "ToolCall", "ToolSpec",
    "Usage", "configured_model", "load_script", "provider_from_settings",
]
