"""Request bodies and content blocks, and the strict cattrs converter that decodes them."""

from __future__ import annotations

import types
import typing
from typing import Any, ClassVar, Literal, TypeVar

import attrs
import cattrs
import orjson
from cattrs.cols import list_structure_factory
from cattrs.gen import make_dict_structure_fn, override
from cattrs.preconf.orjson import make_converter

from .errors import EXCERPT_CHARS, WireError, excerpt, shorten

T = TypeVar("T")


# --------------------------------------------------------------------------- content blocks

# The longest accepted value of each free-text request field, in characters. A body may be up to
# 10 MB (transport.app.MAX_BODY), but no model name, path or id needs to be anywhere near that, and
# each is kept for the session's life (memory, journal, session record, events). A longer value is
# refused with 400 ``value_too_long`` naming the field (docs/reference/limits.md). Session ids are
# checked where they are used (at most 128, ``invalid_session_id``); ``data``/``blob`` (base64) and
# ``_meta`` are bounded only by the body.
MAX_TEXT_CHARS = 1_000_000  # a prompt's text block or embedded resource text, a mid-turn message
MAX_PATH_CHARS = 4096  # cwd (PATH_MAX on Linux)
MAX_SYSTEM_PROMPT_CHARS = 200_000  # a session's systemPrompt / appendSystemPrompt (the default is ~2,400)
MAX_URI_CHARS = 8192
MAX_LABEL_CHARS = 4096  # a resource link's name, title, description
MAX_MODEL_CHARS = 256
MAX_ID_CHARS = 128  # messageId, optionId
MAX_MIME_CHARS = 256
MAX_TITLE_CHARS = 200  # a session's title, counted after stripping (a listing's one line)
MAX_JSON_DEPTH = 32  # free-form objects (_meta, annotations): their own nesting, far under orjson's 254
_MAX_CHARS = "trellis.wire.max_chars"  # attrs metadata key: the field's limit, enforced when structuring
_PATH = "trellis.wire.path"  # attrs metadata key: the field is a path, refused with this code if it holds a NUL
_TITLE = "trellis.wire.title"  # attrs metadata key: a title, stripped, then bounded; empty is None
_DISPLAY_NAME = "trellis.wire.display_name"  # attrs metadata key: qwen's displayName, a title that is never empty


NOT_BLANK = "\\S"  # a JSON Schema pattern: at least one character that is not whitespace


def bounded(limit: int, **kwargs: Any) -> Any:
    """An attrs field holding a string of at most ``limit`` characters on the wire."""
    return attrs.field(metadata={_MAX_CHARS: limit}, **kwargs)


def path_field(code: str, **kwargs: Any) -> Any:
    """A :func:`bounded` path (at most :data:`MAX_PATH_CHARS`); one holding a NUL character, which no
    path can, is refused with ``code`` naming the field, whatever the route would do with it."""
    return attrs.field(metadata={_MAX_CHARS: MAX_PATH_CHARS, _PATH: code}, **kwargs)


def title_field(**kwargs: Any) -> Any:
    """A session title: stripped, at most :data:`MAX_TITLE_CHARS` after that, and an empty one is ``None``
    (no title) — so ``{"title": ""}`` clears it."""
    return attrs.field(metadata={_TITLE: True}, **kwargs)


def string_limits(field: attrs.Attribute) -> dict[str, Any]:  # type: ignore[type-arg]
    """The JSON Schema keywords of what the converter checks of a field's string (actors/wire/schema.py):
    ``maxLength`` for a :func:`bounded` or :func:`path_field` field, and a ``pattern`` refusing NUL for a path."""
    out: dict[str, Any] = {}
    if _MAX_CHARS in field.metadata:
        out["maxLength"] = field.metadata[_MAX_CHARS]
    if field.metadata.get(_PATH) is not None:
        out["pattern"] = "^[^\\x00]*$"
    return out


def nul_in_path(name: str) -> str:
    """The sentence that refuses a path holding a NUL character (here and where paths are resolved)."""
    return f"{name} contains a NUL character (\\u0000), which no path can hold"


class Refused(ValueError):
    """A value the wire form refuses with its own ``code`` (a :class:`WireError` naming the field)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class TooLong(Refused):
    """A value over its limit: a :class:`WireError` with code ``value_too_long`` (a string) or
    ``value_too_deep`` (a free-form object nested too deeply)."""

    def __init__(self, message: str, code: str = "value_too_long") -> None:
        super().__init__(message, code)


@attrs.frozen(kw_only=True)
class TextBlock:
    type: Literal["text"]
    text: str = bounded(MAX_TEXT_CHARS)
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class ImageBlock:
    type: Literal["image"]
    data: str
    mimeType: str = bounded(MAX_MIME_CHARS)
    uri: str | None = bounded(MAX_URI_CHARS, default=None)
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class AudioBlock:
    type: Literal["audio"]
    data: str
    mimeType: str = bounded(MAX_MIME_CHARS)
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class ResourceLinkBlock:
    type: Literal["resource_link"]
    uri: str = bounded(MAX_URI_CHARS)
    name: str = bounded(MAX_LABEL_CHARS)
    mimeType: str | None = bounded(MAX_MIME_CHARS, default=None)
    title: str | None = bounded(MAX_LABEL_CHARS, default=None)
    description: str | None = bounded(MAX_LABEL_CHARS, default=None)
    size: int | None = None
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class EmbeddedResource:
    uri: str = bounded(MAX_URI_CHARS)
    text: str | None = bounded(MAX_TEXT_CHARS, default=None)
    blob: str | None = None
    mimeType: str | None = bounded(MAX_MIME_CHARS, default=None)
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class ResourceBlock:
    type: Literal["resource"]
    resource: EmbeddedResource
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


ContentBlock = TextBlock | ImageBlock | AudioBlock | ResourceLinkBlock | ResourceBlock
_BLOCKS: dict[str, type] = {
    "text": TextBlock,
    "image": ImageBlock,
    "audio": AudioBlock,
    "resource_link": ResourceLinkBlock,
    "resource": ResourceBlock,
}


def block_text(block: ContentBlock) -> str:
    """The plain text a person would read for a content block."""
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ResourceLinkBlock):
        return f"[{block.name}]({block.uri})"
    if isinstance(block, ResourceBlock):
        return block.resource.text if block.resource.text is not None else f"[resource {block.resource.uri}]"
    return f"[{block.type}]"


# --------------------------------------------------------------------------- request bodies


@attrs.frozen(kw_only=True)
class CreateSessionBody:
    cwd: str | None = path_field("invalid_cwd", default=None)
    sessionId: str | None = None
    # This session's system prompt: replace the base, and/or add to it (actors.session.system_prompt).
    systemPrompt: str | None = bounded(MAX_SYSTEM_PROMPT_CHARS, default=None)
    appendSystemPrompt: str | None = bounded(MAX_SYSTEM_PROMPT_CHARS, default=None)
    # What qwen clients (its Web Shell) send. Every session here is a new "thread" of the "default" source;
    # other values name qwen features Trellis does not have, and are refused.
    approvalMode: Literal["default", "auto-edit", "yolo", "plan"] | None = None
    title: str | None = title_field(default=None)  # shown in listings; else the first prompt's first line
    permissions: PermissionRulesBody | None = None  # the session's own rules, beside the settings'
    # Record this session (true) or not (false) when the daemon records (--record DIR); default: the daemon's choice.
    record: bool | None = None
    sessionScope: Literal["thread"] | None = None
    sourceType: Literal["default"] | None = None
    meta: dict[str, Any] | None = None


MAX_DELETED_SESSIONS = 500  # session ids one POST /sessions/delete names


@attrs.frozen(kw_only=True)
class DeleteSessionsBody:
    """``POST /sessions/delete`` (qwen's Web Shell's): the sessions to delete for good, at most
    :data:`MAX_DELETED_SESSIONS`."""

    sessionIds: list[str]


MAX_RULE_CHARS = 4096  # one permission rule (actors.permission_rules checks it when the rule is read)


def _rules() -> Any:
    return attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class PermissionRulesBody:
    """A session's own permission rules, in Claude Code's form (docs/how-to/permission-rules.md); each rule
    is read when the session starts (400 ``invalid_rule`` naming it)."""

    allow: list[str] = _rules()
    ask: list[str] = _rules()
    deny: list[str] = _rules()


@attrs.frozen(kw_only=True)
class PermissionRuleBody:
    """``POST /session/:id/permissions``: add one rule of the session's own; ``persist: "settings"`` also
    writes it into the settings file, for later sessions."""

    effect: Literal["allow", "ask", "deny"]
    rule: str = bounded(MAX_RULE_CHARS)
    persist: Literal["session", "settings"] = "session"


@attrs.frozen(kw_only=True)
class PromptBody:
    wire_schema: ClassVar[dict[str, Any]] = {"properties": {"prompt": {"minItems": 1}}}  # else 400 empty_prompt
    prompt: list[ContentBlock]
    # qwen's Web Shell: how much of a subagent's inner events to stream. Trellis streams none of them into
    # the session (a run has its own transcript), so both values give the same stream.
    eventDetailMode: Literal["summary", "full"] | None = None
    # qwen's Web Shell's "Retry" after a failed turn (qwen serve's top-level ``retry``): the same trusted retry
    # as ``_meta.retry: true``, so it is folded into ``meta`` here, the one place the queue and the session
    # read it from. ``false`` is no retry; anything but a boolean is refused.
    retry: bool = False
    meta: dict[str, Any] | None = None

    def __attrs_post_init__(self) -> None:
        if self.retry and (self.meta or {}).get("retry") is not True:
            object.__setattr__(self, "meta", {**(self.meta or {}), "retry": True})

    @property
    def text(self) -> str:
        return "\n".join(block_text(b) for b in self.prompt)


@attrs.frozen(kw_only=True)
class MidTurnMessageBody:
    wire_schema: ClassVar[dict[str, Any]] = {"properties": {"message": {"pattern": NOT_BLANK}}}  # else empty_message
    message: str = bounded(MAX_TEXT_CHARS)
    messageId: str | None = bounded(MAX_ID_CHARS, default=None)
    eventDetailMode: Literal["summary", "full"] | None = None  # as in PromptBody


@attrs.frozen(kw_only=True)
class LoadBody:
    cwd: str | None = path_field("invalid_cwd", default=None)
    # What qwen's Web Shell sends (see CreateSessionBody). Its replay modes shape the replay qwen serve puts in
    # the answer; Trellis sends none there (the event stream replays the session), so both values are the same.
    sourceType: Literal["default"] | None = None
    compactedReplayMode: Literal["summary", "full"] | None = None
    liveReplayMode: Literal["summary", "full"] | None = None
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class SelectedOutcome:
    outcome: Literal["selected"]
    optionId: str = bounded(MAX_ID_CHARS)


@attrs.frozen(kw_only=True)
class CancelledOutcome:
    outcome: Literal["cancelled"]


@attrs.frozen(kw_only=True)
class PermissionVoteBody:
    outcome: SelectedOutcome | CancelledOutcome


@attrs.frozen(kw_only=True)
class RewindBody:
    """``POST /session/:id/rewind``: drop user turn ``turn`` and after; ``files: true`` also restores the files to
    that turn's checkpoint, refused when one changed outside the session since unless ``force: true``."""

    turn: int
    files: bool | None = None
    force: bool | None = None


@attrs.frozen(kw_only=True)
class UndoBody:
    """``POST /session/:id/checkpoints/undo/:undoId``: ``force: true`` undoes even over files changed since."""

    force: bool | None = None


@attrs.frozen(kw_only=True)
class TitleBody:
    """``POST /session/:id/title``: the new title; ``""`` or ``null`` clears it."""

    title: str | None = title_field()


# A display name's wire form: a string that is not blank and holds no control character (stripped, then at
# most MAX_TITLE_CHARS: the converter counts after stripping, so no maxLength here).
DISPLAY_NAME_PATTERN = "^[^\\x00-\\x1f\\x7f]*[^\\s\\x00-\\x1f\\x7f][^\\x00-\\x1f\\x7f]*$"


@attrs.frozen(kw_only=True)
class SessionMetadataBody:
    """``PATCH /session/:id/metadata`` (qwen serve's rename, which qwen's Web Shell sends): ``displayName`` is the
    session's new title, set as ``POST /session/:id/title`` sets it (stripped, then at most 200 characters);
    absent, nothing changes. It cannot clear the title: ``null``, a blank name or one holding a control character
    is 400 ``invalid_metadata``, as qwen serve answers. qwen's ``pr`` (a pull request bound to the session) is
    not taken: Trellis has no pull requests."""

    wire_schema: ClassVar[dict[str, Any]] = {
        "properties": {"displayName": {"type": "string", "pattern": DISPLAY_NAME_PATTERN}}}
    displayName: str | None = attrs.field(default=None, metadata={_DISPLAY_NAME: True})


GIT_REF = r"^(?!-)[^\x00-\x20\x7f]+$"  # a ref or branch name git takes as nothing else: no option, no space


@attrs.frozen(kw_only=True)
class GitCheckoutBody:
    """``POST /workspaces/:workspace/git/checkout``: a branch, a remote branch, a tag or a hash to check out."""

    wire_schema: ClassVar[dict[str, Any]] = {"properties": {"ref": {"pattern": GIT_REF}}}
    ref: str = bounded(255)


@attrs.frozen(kw_only=True)
class GitBranchBody:
    """``POST /workspaces/:workspace/git/branch``: a new branch, started at ``startPoint`` (``HEAD`` without one)
    and checked out."""

    wire_schema: ClassVar[dict[str, Any]] = {"properties": {"name": {"pattern": GIT_REF},
                                                            "startPoint": {"pattern": GIT_REF}}}
    name: str = bounded(255)
    startPoint: str | None = bounded(255, default=None)


@attrs.frozen(kw_only=True)
class GitCommitBody:
    """``POST /workspaces/:workspace/git/commit``: a commit of what is staged, or of every change with ``all``."""

    wire_schema: ClassVar[dict[str, Any]] = {"properties": {"message": {"pattern": NOT_BLANK}}}
    message: str = bounded(65536)
    all: bool = False


@attrs.frozen(kw_only=True)
class ForkBody:
    """``{sessionId?}``: a copy of the conversation; ``{directive}`` (qwen's Web Shell's ``/fork <directive>``):
    the copy also runs the directive as its first prompt."""

    sessionId: str | None = None
    directive: str | None = None


@attrs.frozen(kw_only=True)
class CwdBody:
    cwd: str = path_field("invalid_cwd")


@attrs.frozen(kw_only=True)
class ModelBody:
    """``{model}``, or ``{modelId}`` as qwen serve's clients (its Web Shell) send it: one of the two."""

    # One of the two is a string, not blank (else 400 invalid_model); the other is absent or null.
    wire_schema: ClassVar[dict[str, Any]] = {"oneOf": [
        {"required": [name], "properties": {name: {"type": "string", "pattern": NOT_BLANK}}}
        for name in ("model", "modelId")]}
    model: str | None = bounded(MAX_MODEL_CHARS, default=None)
    modelId: str | None = bounded(MAX_MODEL_CHARS, default=None)

    def __attrs_post_init__(self) -> None:
        if (self.model is None) == (self.modelId is None):
            raise WireError("give the model name as model (or as modelId), not both or neither", "$.model")

    @property
    def name(self) -> str:
        return self.model if self.model is not None else self.modelId  # type: ignore[return-value]


@attrs.frozen(kw_only=True)
class ApprovalModeBody:
    mode: Literal["default", "auto-edit", "yolo", "plan"]
    # qwen's Web Shell toggles plan mode apart from the mode it returns to: planMode true means "plan".
    planMode: bool | None = None

    @property
    def target(self) -> str:
        """The mode to set."""
        return "plan" if self.planMode else self.mode


# --------------------------------------------------------------------------- the converter


def _strict(kind: type) -> Any:
    names = {int: "an integer", str: "a string", bool: "a boolean", float: "a number"}

    def hook(value: Any, _: Any) -> Any:
        ok = type(value) is kind or (kind is float and type(value) is int)
        if not ok:
            raise ValueError(f"expected {names[kind]}")
        return value

    return hook


def _tagged(conv: cattrs.Converter, options: dict[str, type], what: str, field: str) -> Any:
    """A union told apart by one tag field, with a clear error for a bad tag."""

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"expected a {what} object")
        tag = value.get(field)
        if tag not in options:
            raise ValueError(f"unknown {what} {field} {excerpt(tag)}; expected one of {sorted(options)}")
        return conv.structure(value, options[tag])

    return hook


def _strict_list(type_: Any, conv: cattrs.Converter) -> Any:
    inner = list_structure_factory(type_, conv)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, list):
            raise ValueError("expected a JSON array")
        return inner(value, _)

    return hook


def _bounded_str(name: str, limit: int, nullable: bool, path_code: str | None = None) -> Any:
    """The structure hook of a :func:`bounded` field (strict like ``_strict(str)``, plus the limit), and of a
    :func:`path_field` (no NUL either)."""

    def hook(value: Any, _: Any) -> Any:
        if value is None and nullable:
            return None
        if type(value) is not str:
            raise ValueError("expected a string")
        if len(value) > limit:
            raise TooLong(f"{name} is longer than {limit:,} characters ({len(value):,} given)")
        if path_code is not None and "\x00" in value:
            raise Refused(nul_in_path(name), path_code)
        return value

    return hook


def _title(value: Any, _: Any) -> Any:
    """The structure hook of a :func:`title_field`."""
    if value is None:
        return None
    if type(value) is not str:
        raise ValueError("expected a string or null")
    value = value.strip()
    if len(value) > MAX_TITLE_CHARS:
        raise TooLong(f"title is longer than {MAX_TITLE_CHARS:,} characters ({len(value):,} given, stripped)")
    return value or None


def _display_name(value: Any, _: Any) -> Any:
    """The structure hook of :class:`SessionMetadataBody`'s ``displayName``: a title as :func:`_title` takes it,
    but refused, as qwen serve refuses it, when it is not a string, holds a control character, or is blank."""
    if type(value) is not str:
        raise Refused("expected a string", "invalid_metadata")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise Refused("displayName must not contain control characters", "invalid_metadata")
    value = value.strip()
    if not value:
        raise Refused("displayName must not be empty (POST /session/:id/title clears a title)", "invalid_metadata")
    if len(value) > MAX_TITLE_CHARS:
        raise TooLong(f"displayName is longer than {MAX_TITLE_CHARS:,} characters ({len(value):,} given, stripped)")
    return value


def _overrides(cls: type) -> dict[str, Any]:
    """cattrs overrides of ``cls``: ``_meta`` on the wire for ``meta``, and the limits of bounded fields."""
    out: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if field.name == "meta":
            out["meta"] = override(rename="_meta")
        elif _TITLE in field.metadata:
            out[field.name] = override(struct_hook=_title)
        elif _DISPLAY_NAME in field.metadata:
            out[field.name] = override(struct_hook=_display_name)
        elif _MAX_CHARS in field.metadata:
            out[field.name] = override(struct_hook=_bounded_str(field.name, field.metadata[_MAX_CHARS],
                                                                field.default is None, field.metadata.get(_PATH)))
    return out


def json_depth(value: Any) -> int:
    """How deeply ``value`` nests arrays and objects (a scalar is 0), counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _dict_hook(value: Any, _: Any) -> Any:
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    if json_depth(value) > MAX_JSON_DEPTH:
        # Free-form objects (_meta, annotations) are journalled and published as they came; orjson writes
        # at most 254 levels, and a deeper prompt _meta crashed the session's FIFO at its journal write.
        raise TooLong(f"nests deeper than {MAX_JSON_DEPTH} levels", "value_too_deep")
    return value


def _make_converter() -> cattrs.Converter:
    conv = make_converter(forbid_extra_keys=True)
    for kind in (int, str, bool, float):
        conv.register_structure_hook(kind, _strict(kind))
    conv.register_structure_hook_func(lambda t: t == dict[str, Any], _dict_hook)
    conv.register_structure_hook_func(lambda t: t == ContentBlock, _tagged(conv, _BLOCKS, "content block", "type"))
    outcomes = SelectedOutcome | CancelledOutcome
    conv.register_structure_hook_func(
        lambda t: t == outcomes,
        _tagged(conv, {"selected": SelectedOutcome, "cancelled": CancelledOutcome}, "permission", "outcome"),
    )
    conv.register_structure_hook_factory(lambda t: typing.get_origin(t) is list, _strict_list)
    # Answers whose optional members are absent unless set (actors/wire/answers.py: ``wire_omits_none``).
    conv.register_unstructure_hook_factory(
        lambda t: getattr(t, "wire_omits_none", False) is True,
        lambda t: cattrs.gen.make_dict_unstructure_fn(t, conv, _cattrs_omit_if_default=True))
    for cls in (
        TextBlock, ImageBlock, AudioBlock, ResourceLinkBlock, EmbeddedResource, ResourceBlock,  # inner classes first
        CreateSessionBody, PromptBody, LoadBody,
    ):
        # `_meta` on the wire, `meta` in Python; and the limits of bounded fields.
        conv.register_structure_hook(
            cls, make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True, **_overrides(cls))
        )
        conv.register_unstructure_hook(
            cls, cattrs.gen.make_dict_unstructure_fn(cls, conv, _cattrs_omit_if_default=True, meta=override(rename="_meta"))
        )
    for cls in (MidTurnMessageBody, SelectedOutcome, CwdBody, ModelBody, TitleBody, GitCheckoutBody, GitBranchBody,
                GitCommitBody,
                SessionMetadataBody):  # bounded fields, no `_meta`
        conv.register_structure_hook(
            cls, make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True, **_overrides(cls))
        )
    return conv


converter = _make_converter()


def _format(exc: BaseException, type_: Any) -> str:
    if typing.get_origin(type_) in (typing.Union, types.UnionType):  # an optional Literal: name its values
        type_ = next((t for t in typing.get_args(type_) if t is not type(None)), type_)
    if typing.get_origin(type_) is Literal:
        return f"must be one of {list(typing.get_args(type_))}"
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        first, *more = sorted(exc.extra_fields)
        return f"unknown field {excerpt(first)}" + (f" (and {len(more)} more)" if more else "")
    if isinstance(exc, ValueError) and not isinstance(exc, cattrs.BaseValidationError):
        return shorten(str(exc))
    return shorten(cattrs.v.format_exception(exc, type_))


def _member(path: str, key: str) -> str:
    """``path`` extended by the object member ``key``: ``$.a.key``, or ``$.a["odd key"]``."""
    if key.isascii() and key.isidentifier():
        return f"{path}.{shorten(key, EXCERPT_CHARS)}"
    return f"{path}[{shorten(orjson.dumps(key).decode(), EXCERPT_CHARS)}]"


def structure(value: Any, cls: type[T]) -> T:
    """Structure already-parsed JSON into ``cls``, raising :class:`WireError`.

    The path names the offending field itself, an unknown one included
    (``$.prompt[0].bogus``).
    """
    if not isinstance(value, dict):
        raise WireError(f"expected a JSON object, got {type(value).__name__}")
    try:
        return converter.structure(value, cls)
    except cattrs.BaseValidationError as exc:
        leaves: list[BaseException] = []  # transform_error formats each leaf once, in output order

        def format_leaf(leaf: BaseException, type_: Any) -> str:
            leaves.append(leaf)
            return _format(leaf, type_)

        first = cattrs.transform_error(exc, path="$", format_exception=format_leaf)[0]
        if isinstance(leaves[0], WireError):  # a body's own check (ModelBody's): it names its path
            raise leaves[0] from None
        message, _, path = first.rpartition(" @ ")
        path = path.replace(".meta", "._meta")  # the Python name of the `_meta` fields
        if leaves and isinstance(leaves[0], cattrs.ForbiddenExtraKeysError):
            path = _member(path, min(leaves[0].extra_fields))
        code = leaves[0].code if leaves and isinstance(leaves[0], Refused) else "invalid_request"
        raise WireError(message, path, code) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise WireError(_format(exc, cls)) from None


def decode(body: bytes, cls: type[T]) -> T:
    """Parse a JSON body and structure it into ``cls``, raising :class:`WireError`."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"invalid JSON: {exc}", "$", "invalid_json") from None
    return structure(value, cls)


def unstructure(value: Any) -> Any:
    return converter.unstructure(value)


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)
