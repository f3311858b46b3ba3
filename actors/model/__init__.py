"""Model providers: the scripted one (embedded default) and OpenAI-compatible."""

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
)
from .scripted import ScriptedModel, ScriptError, load_script

__all__ = [
    "ChatMessage", "ChatRequest", "ContextWindowExceeded", "Finish", "ImagePart", "ModelError", "ModelProvider",
    "ScriptError", "ScriptedModel", "StreamItem", "TextDelta", "ThoughtDelta", "ToolCall", "ToolSpec",
    "Usage", "load_script",
]
